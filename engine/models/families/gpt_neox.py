"""GPT-NeoX (model_type gpt_neox, the Pythia models): a pre-LN decoder with partial rotary and parallel blocks.

    x_0 = embed_in[id]                                          no learned positions: rotary on Q and K instead
    per layer, use_parallel_residual (the default):
        x' = x + Attention(input_layernorm(x)) + MLP(post_attention_layernorm(x))
    and otherwise the sequential pre-LN block: a = x + Attention(ln(x)); x' = a + MLP(ln'(a))
    logits = final_layer_norm(x) W_U,  W_U = embed_out^T (untied unless tie_word_embeddings)

query_key_value is one Linear whose 3D outputs are laid out per head as [q | k | v], d_head each (Hugging Face
views them as (heads, 3 d_head) and splits the last axis), unlike GPT-2's Q | K | V blocks. The first
rotary_pct (partial_rotary_factor, 0.25 by default) of each head's dims rotate.
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
    flag,
    heads_divide,
    linear_T,
    need,
    number,
    rope_positions,
    rotary,
)
from engine.norms import LayerNorm


def sizes(config: Config) -> Sizes:
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    heads_divide(d, h, h)
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=rope_positions(config),
        decoder=True,
    )


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, need(config, "intermediate_size")
    bias = flag(config, "attention_bias", True)
    out: Shapes = {"embed_in.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out |= {f"{p}.{norm}.weight": (d,), f"{p}.{norm}.bias": (d,)}
        out |= {f"{p}.attention.query_key_value.weight": (3 * d, d), f"{p}.attention.dense.weight": (d, d)}
        if bias:
            out |= {f"{p}.attention.query_key_value.bias": (3 * d,), f"{p}.attention.dense.bias": (d,)}
        out |= {f"{p}.mlp.dense_h_to_4h.weight": (m, d), f"{p}.mlp.dense_h_to_4h.bias": (m,)}
        out |= {f"{p}.mlp.dense_4h_to_h.weight": (d, m), f"{p}.mlp.dense_4h_to_h.bias": (d,)}
    out |= {"final_layer_norm.weight": (d,), "final_layer_norm.bias": (d,)}
    if not flag(config, "tie_word_embeddings", False):
        out["embed_out.weight"] = (s.vocab_size, d)
    return out


def per_head_split(t: Tensor, n_heads: int, d_head: int) -> tuple[Tensor, Tensor, Tensor]:
    """query_key_value's (3D, ...) rows, per head [q | k | v], -> Q, K, V rows (D, ...) each, head after head."""
    rows = t.reshape(n_heads, 3, d_head, *t.shape[1:])
    return tuple(rows[:, j].reshape(n_heads * d_head, *t.shape[1:]) for j in range(3))  # type: ignore[return-value]


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, dh = f"layers.{i}", s.n_heads, s.d_head
    eps = number(config, "layer_norm_eps", 1e-5)
    w_q, w_k, w_v = per_head_split(t[f"{p}.attention.query_key_value.weight"], h, dh)
    w = from_concatenated(w_q.T, w_k.T, w_v.T, linear_T(t[f"{p}.attention.dense.weight"]), h)
    if flag(config, "attention_bias", True):
        b_q, b_k, b_v = per_head_split(t[f"{p}.attention.query_key_value.bias"], h, dh)
        w = replace(
            w,
            b_Q=b_q.reshape(h, dh),
            b_K=b_k.reshape(h, dh),
            b_V=b_v.reshape(h, dh),
            b_O=t[f"{p}.attention.dense.bias"],
        )
    w = replace(w, rotary=rotary(config, dh, 0.25))
    norm = {
        n: LayerNorm(t[f"{p}.{n}.weight"], t[f"{p}.{n}.bias"], eps)
        for n in ("input_layernorm", "post_attention_layernorm")
    }
    return Block(
        attn=w,
        ln_pre=norm["input_layernorm"],
        ln_pre_mlp=norm["post_attention_layernorm"],
        parallel=flag(config, "use_parallel_residual", True),
        mlp=FeedForward(
            W_in=linear_T(t[f"{p}.mlp.dense_h_to_4h.weight"]),
            b_in=t[f"{p}.mlp.dense_h_to_4h.bias"],
            W_out=linear_T(t[f"{p}.mlp.dense_4h_to_h.weight"]),
            b_out=t[f"{p}.mlp.dense_4h_to_h.bias"],
            act=act,
        ),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    eps = number(config, "layer_norm_eps", 1e-5)
    W_U = t["embed_in.weight"] if flag(config, "tie_word_embeddings", False) else t["embed_out.weight"]
    final = LayerNorm(t["final_layer_norm.weight"], t["final_layer_norm.bias"], eps)
    parallel = flag(config, "use_parallel_residual", True)
    flow = (
        "x' = x + Attention(LayerNorm(x)) + MLP(LayerNorm'(x)) (parallel)"
        if parallel
        else "a = x + Attention(LayerNorm(x)); x' = a + MLP(LayerNorm'(a))"
    )
    rot = rotary(config, s.d_head, 0.25)
    return Mapped(
        embedding=Embedding(W_E=t["embed_in.weight"]),
        network=Network(tuple(block(config, t, i, s, act) for i in range(s.n_layers)), Unembed(final, linear_T(W_U))),
        architecture=(
            f"GPT-NeoX pre-LN decoder: {flow}, {act}; rotary on {rot.rot_dim} of {s.d_head} dims per head "
            f"(theta {rot.theta:g}); logits = LayerNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(
    model_types=("gpt_neox",),
    prefix="gpt_neox.",
    sizes=sizes,
    shapes=shapes,
    build=build,
    aliases={"lm_head.weight": "embed_out.weight"},  # transformers 5 names it lm_head in memory, embed_out on disk
)
