"""OLMo-2 (model_type olmo2), shaped on OLMo-2-0425-1B: a decoder that norms what each sublayer adds rather than
what it reads, and norms its queries and keys over the whole projection.

    x_0 = embed_tokens[id]
    per layer: a = x + post_attention_layernorm(Attention(x)); x' = a + post_feedforward_layernorm(GLU(a))
    Attention: Q = q_norm(x W_Q + b_Q) over all heads' H * head_dim at once, K = k_norm(x W_K + b_K) over
               G * head_dim, then split into heads, rotary, grouped K/V, 1 / sqrt(head_dim)
    GLU(u) = down_proj(silu(gate_proj(u)) * up_proj(u))
    logits = norm(x) W_U,   W_U = lm_head (OLMo-2 does not tie), embed_tokens^T where tie_word_embeddings

Every norm is an RMSNorm. Hugging Face names the norm after attention post_attention_layernorm, as LLaMA names
the norm before its MLP: here it acts on the attention output before it joins the residual (Block.ln_post_attn).
Biases on q, k, v and o where attention_bias (OLMo-2's are off), none in the MLP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import from_concatenated
from engine.feedforward import Activation, GatedFeedForward
from engine.forward import Block, Network, Unembed
from engine.masks import MaskSpec
from engine.models.families import (
    ROTARY_BREAKS,
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    Sizes,
    activation,
    flag,
    linear_T,
    llama,
    need,
    number,
    rotary,
)
from engine.norms import RMSNorm


def sizes(config: Config) -> Sizes:
    return llama.sizes(config)


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", False)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, dh = s.d_model, need(config, "intermediate_size"), s.d_head
    bias = flag(config, "attention_bias", False)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p, a = f"layers.{i}", f"layers.{i}.self_attn"
        out |= {f"{p}.post_attention_layernorm.weight": (d,), f"{p}.post_feedforward_layernorm.weight": (d,)}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{a}.{name}_proj.weight"] = (r, d)
            if bias:
                out[f"{a}.{name}_proj.bias"] = (r,)
        out |= {f"{a}.q_norm.weight": (rows["q"],), f"{a}.k_norm.weight": (rows["k"],)}
        out[f"{a}.o_proj.weight"] = (d, s.n_heads * dh)
        if bias:
            out[f"{a}.o_proj.bias"] = (d,)
        out |= {f"{p}.mlp.gate_proj.weight": (m, d), f"{p}.mlp.up_proj.weight": (m, d)}
        out[f"{p}.mlp.down_proj.weight"] = (d, m)
    out["norm.weight"] = (d,)
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, a, h, g, dh = f"layers.{i}", f"layers.{i}.self_attn", s.n_heads, s.n_kv_heads, s.d_head
    eps = number(config, "rms_norm_eps", 1e-6)
    w_q, w_k, w_v, w_o = (linear_T(t[f"{a}.{n}_proj.weight"]) for n in ("q", "k", "v", "o"))
    w = from_concatenated(w_q, w_k, w_v, w_o, h, g)
    if flag(config, "attention_bias", False):
        b_Q, b_K, b_V = (t[f"{a}.{n}_proj.bias"].reshape(-1, dh) for n in ("q", "k", "v"))
        w = replace(w, b_Q=b_Q, b_K=b_K, b_V=b_V, b_O=t[f"{a}.o_proj.bias"])
    w = replace(
        w,
        q_norm=RMSNorm(t[f"{a}.q_norm.weight"], eps),  # (H * head_dim,): over the whole projection
        k_norm=RMSNorm(t[f"{a}.k_norm.weight"], eps),  # (G * head_dim,)
        qk_norm_over="projection",
        rotary=rotary(config, dh),
    )
    return Block(
        attn=w,
        ln_post_attn=RMSNorm(t[f"{p}.post_attention_layernorm.weight"], eps),
        mlp=GatedFeedForward(
            W_gate=linear_T(t[f"{p}.mlp.gate_proj.weight"]),
            W_in=linear_T(t[f"{p}.mlp.up_proj.weight"]),
            W_out=linear_T(t[f"{p}.mlp.down_proj.weight"]),
            act=act,
        ),
        ln_post_mlp=RMSNorm(t[f"{p}.post_feedforward_layernorm.weight"], eps),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    W_U = t["embed_tokens.weight"] if tied(config) else t["lm_head.weight"]
    net = Network(
        tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
        Unembed(RMSNorm(t["norm.weight"], number(config, "rms_norm_eps", 1e-6)), linear_T(W_U)),
    )
    rot = rotary(config, s.d_head)
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=net,
        architecture=(
            f"OLMo-2 post-sublayer-norm decoder: a = x + RMSNorm(Attention(x)); x' = a + RMSNorm(GLU(a)), {act} "
            f"gate; {s.n_heads} heads over {s.n_kv_heads} K/V groups of width {s.d_head}, queries and keys "
            f"RMSNorm-ed over the whole projection before rotary on {rot.rot_dim} dims (theta {rot.theta:g}); "
            "logits = RMSNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("olmo2",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
