"""StableLM (model_type stablelm: StableLM-2-1.6B, StableLM-3B-4E1T, StableLM-Zephyr): a LayerNorm decoder with
partial rotary, grouped K/V and a gated feed-forward, as Hugging Face's StableLmModel lays it out.

    x_0 = embed_tokens[id]                                       no learned positions: rotary on Q and K instead
    use_parallel_residual false (StableLM-2-1.6B and most):
        a = x + Attention(input_layernorm(x)); x' = a + GLU(post_attention_layernorm(a))
    and true (StableLM-2-12B): h = input_layernorm(x); x' = x + Attention(h) + GLU(h)
    GLU(u) = down_proj(act(gate_proj(u)) * up_proj(u))          silu, no biases
    logits = norm(x) W_U,   W_U = lm_head (untied unless tie_word_embeddings)

q_proj, k_proj, v_proj carry biases where use_qkv_bias (StableLM-2-1.6B: yes), o_proj never. The first
partial_rotary_factor of each head's dims rotate (0.25 by default: StableLM-2-1.6B rotates 16 of 64), rounded down
as Hugging Face rounds it. qk_layernorm (a LayerNorm per head on queries and keys before rotary, StableLM-2-12B)
is refused: attnlab's attention has no norm between the projections and rotary.
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
    decoder_sizes,
    flag,
    linear_T,
    need,
    number,
    refuse,
    rotary,
)
from engine.norms import LayerNorm

PARTIAL_ROTARY_DEFAULT = 0.25  # StableLmConfig's, where config.json leaves partial_rotary_factor out


def sizes(config: Config) -> Sizes:
    s = decoder_sizes(config)
    if flag(config, "qk_layernorm", False):
        raise refuse(
            "qk_layernorm",
            "true: attnlab reads StableLM without a LayerNorm on each head's queries and keys (StableLM-2-1.6B and "
            "StableLM-3B ship it false)",
        )
    return s


def parallel(config: Config) -> bool:
    return flag(config, "use_parallel_residual", False)


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", False)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, dh = s.d_model, need(config, "intermediate_size"), s.d_head
    qkv_bias = flag(config, "use_qkv_bias", False)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        norms = ("input_layernorm",) if parallel(config) else ("input_layernorm", "post_attention_layernorm")
        for norm in norms:
            out |= {f"{p}.{norm}.weight": (d,), f"{p}.{norm}.bias": (d,)}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{p}.self_attn.{name}_proj.weight"] = (r, d)
            if qkv_bias:
                out[f"{p}.self_attn.{name}_proj.bias"] = (r,)
        out[f"{p}.self_attn.o_proj.weight"] = (d, s.n_heads * dh)
        out |= {
            f"{p}.mlp.gate_proj.weight": (m, d),
            f"{p}.mlp.up_proj.weight": (m, d),
            f"{p}.mlp.down_proj.weight": (d, m),
        }
    out |= {"norm.weight": (d,), "norm.bias": (d,)}
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def eps(config: Config) -> float:
    return number(config, "layer_norm_eps", 1e-5)


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, g, dh = f"layers.{i}", s.n_heads, s.n_kv_heads, s.d_head
    a = f"{p}.self_attn"
    w = from_concatenated(
        linear_T(t[f"{a}.q_proj.weight"]),
        linear_T(t[f"{a}.k_proj.weight"]),
        linear_T(t[f"{a}.v_proj.weight"]),
        linear_T(t[f"{a}.o_proj.weight"]),
        h,
        g,
    )
    if flag(config, "use_qkv_bias", False):
        w = replace(
            w,
            b_Q=t[f"{a}.q_proj.bias"].reshape(h, dh),
            b_K=t[f"{a}.k_proj.bias"].reshape(g, dh),
            b_V=t[f"{a}.v_proj.bias"].reshape(g, dh),
        )
    w = replace(w, rotary=rotary(config, dh, PARTIAL_ROTARY_DEFAULT))
    before = LayerNorm(t[f"{p}.input_layernorm.weight"], t[f"{p}.input_layernorm.bias"], eps(config))
    after = f"{p}.post_attention_layernorm"
    return Block(
        attn=w,
        ln_pre=before,
        ln_pre_mlp=before if parallel(config) else LayerNorm(t[f"{after}.weight"], t[f"{after}.bias"], eps(config)),
        parallel=parallel(config),
        mlp=GatedFeedForward(
            W_gate=linear_T(t[f"{p}.mlp.gate_proj.weight"]),
            W_in=linear_T(t[f"{p}.mlp.up_proj.weight"]),
            W_out=linear_T(t[f"{p}.mlp.down_proj.weight"]),
            act=act,
        ),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    W_U = t["embed_tokens.weight"] if tied(config) else t["lm_head.weight"]
    final = LayerNorm(t["norm.weight"], t["norm.bias"], eps(config))
    rot = rotary(config, s.d_head, PARTIAL_ROTARY_DEFAULT)
    flow = (
        "h = LayerNorm(x); x' = x + Attention(h) + GLU(h) (parallel, one norm)"
        if parallel(config)
        else "a = x + Attention(LayerNorm(x)); x' = a + GLU(LayerNorm'(a))"
    )
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=Network(tuple(block(config, t, i, s, act) for i in range(s.n_layers)), Unembed(final, linear_T(W_U))),
        architecture=(
            f"StableLM pre-LN decoder: {flow}, {act} gate; {s.n_heads} heads over {s.n_kv_heads} K/V groups; "
            f"rotary on {rot.rot_dim} of {s.d_head} dims per head (theta {rot.theta:g}); logits = LayerNorm(x) W_U; "
            "causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("stablelm",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
