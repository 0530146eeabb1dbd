"""Phi (model_type phi: Phi-1, Phi-1.5, Phi-2): a pre-LN decoder with partial rotary, one norm read by attention
and feed-forward in parallel, and a bias on the unembedding, as Hugging Face's PhiModel lays it out.

    x_0 = embed_tokens[id]                                       no learned positions: rotary on Q and K instead
    per layer: h = input_layernorm(x); x' = x + Attention(h) + MLP(h)      MLP: fc2(act(fc1(.))), gelu_new = tanh
    logits = final_layernorm(x) W_U + b_U,   W_U = lm_head (untied unless tie_word_embeddings), b_U its bias

q_proj, k_proj, v_proj (each with a bias, num_key_value_heads K/V groups) and dense (with a bias) are separate
Linears. The first partial_rotary_factor of each head's dims rotate (Phi-2: 0.4 of 80, so 32; 0.5 by default),
rounded down as Hugging Face rounds it. qk_layernorm (a LayerNorm on each head's queries and keys before rotary)
is refused: Phi-1, Phi-1.5 and Phi-2 ship it false.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import from_concatenated
from engine.feedforward import Activation, FeedForward
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

PARTIAL_ROTARY_DEFAULT = 0.5  # PhiConfig's, where config.json leaves partial_rotary_factor out


def sizes(config: Config) -> Sizes:
    s = decoder_sizes(config)
    if flag(config, "qk_layernorm", False):
        raise refuse(
            "qk_layernorm",
            "true: attnlab reads Phi without a LayerNorm on each head's queries and keys (Phi-1, Phi-1.5 and Phi-2 "
            "ship it false)",
        )
    return s


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", False)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, need(config, "intermediate_size")
    rows = {"q": s.n_heads * s.d_head, "k": s.n_kv_heads * s.d_head, "v": s.n_kv_heads * s.d_head}
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        out |= {f"{p}.input_layernorm.weight": (d,), f"{p}.input_layernorm.bias": (d,)}
        for name, r in rows.items():
            out |= {f"{p}.self_attn.{name}_proj.weight": (r, d), f"{p}.self_attn.{name}_proj.bias": (r,)}
        out |= {f"{p}.self_attn.dense.weight": (d, d), f"{p}.self_attn.dense.bias": (d,)}
        out |= {f"{p}.mlp.fc1.weight": (m, d), f"{p}.mlp.fc1.bias": (m,)}
        out |= {f"{p}.mlp.fc2.weight": (d, m), f"{p}.mlp.fc2.bias": (d,)}
    out |= {"final_layernorm.weight": (d,), "final_layernorm.bias": (d,), "lm_head.bias": (s.vocab_size,)}
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, g, dh = f"layers.{i}", s.n_heads, s.n_kv_heads, s.d_head
    a = f"{p}.self_attn"
    w = from_concatenated(
        linear_T(t[f"{a}.q_proj.weight"]),
        linear_T(t[f"{a}.k_proj.weight"]),
        linear_T(t[f"{a}.v_proj.weight"]),
        linear_T(t[f"{a}.dense.weight"]),
        h,
        g,
    )
    w = replace(
        w,
        b_Q=t[f"{a}.q_proj.bias"].reshape(h, dh),
        b_K=t[f"{a}.k_proj.bias"].reshape(g, dh),
        b_V=t[f"{a}.v_proj.bias"].reshape(g, dh),
        b_O=t[f"{a}.dense.bias"],
        rotary=rotary(config, dh, PARTIAL_ROTARY_DEFAULT),
    )
    norm = LayerNorm(t[f"{p}.input_layernorm.weight"], t[f"{p}.input_layernorm.bias"], eps(config))
    return Block(
        attn=w,
        ln_pre=norm,
        ln_pre_mlp=norm,  # the same norm: attention and the MLP read one h
        parallel=True,
        mlp=FeedForward(
            W_in=linear_T(t[f"{p}.mlp.fc1.weight"]),
            b_in=t[f"{p}.mlp.fc1.bias"],
            W_out=linear_T(t[f"{p}.mlp.fc2.weight"]),
            b_out=t[f"{p}.mlp.fc2.bias"],
            act=act,
        ),
    )


def eps(config: Config) -> float:
    return number(config, "layer_norm_eps", 1e-5)


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    W_U = t["embed_tokens.weight"] if tied(config) else t["lm_head.weight"]
    final = LayerNorm(t["final_layernorm.weight"], t["final_layernorm.bias"], eps(config))
    rot = rotary(config, s.d_head, PARTIAL_ROTARY_DEFAULT)
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=Network(
            tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
            Unembed(final, linear_T(W_U), t["lm_head.bias"]),
        ),
        architecture=(
            f"Phi pre-LN decoder: h = LayerNorm(x); x' = x + Attention(h) + MLP(h) (parallel, one norm), {act}; "
            f"{s.n_heads} heads over {s.n_kv_heads} K/V groups; rotary on {rot.rot_dim} of {s.d_head} dims per "
            f"head (theta {rot.theta:g}); logits = LayerNorm(x) W_U + b_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("phi",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
