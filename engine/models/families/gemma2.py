"""Gemma-2 (model_type gemma2): a pre- and post-norm decoder whose layers alternate a sliding window and global
attention, with softcapped attention scores and logits, as Hugging Face lays it out.

    x_0 = embed_tokens[id] * sqrt(hidden_size)              (the scale rounded to the model's dtype)
    per layer l, of kind layer_types[l] ("sliding_attention": local, its own window; "full_attention": global):
        a    = x + post_attention_layernorm(Attention_l(input_layernorm(x)))
        x'   = a + post_feedforward_layernorm(GLU(pre_feedforward_layernorm(a)))
    Attention_l: scores = c_a tanh(q . k / sqrt(query_pre_attn_scalar) / c_a)   c_a = attn_logit_softcapping
                 a local layer sees keys with |q - k| < sliding_window (and the request's masks), a global one
                 the request's masks alone
    GLU(u) = down_proj(act(gate_proj(u)) * up_proj(u))      act = hidden_activation (tanh gelu)
    logits = c_f tanh(norm(x) W_U / c_f)                    c_f = final_logit_softcapping, W_U = embed_tokens^T

Every RMSNorm scales by 1 + w. layer_types defaults, as transformers defaults it, to local for even layers and
global for odd ones. The pieces here (the block, the norms, the caps, the kinds) are what Gemma-3
(engine/models/families/gemma3_text.py) shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
from engine.norms import RMSNorm
from engine.rotary import Rotary

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def optional_number(config: Config, name: str) -> float | None:
    """config[name] as a positive finite number (a softcap of infinity would make 0 x inf), or None where the
    config leaves it out or sets it null."""
    value = config.get(name)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise refuse(name, f"got {value!r}: need a positive finite number, or null for none")
    return float(value)


def layer_types(config: Config, every: int) -> list[str]:
    """Each layer's kind, LOCAL or GLOBAL: config layer_types, else every `every`-th layer global (layers
    every - 1, 2 every - 1, ...), the rest local, as transformers fills it in."""
    n = need(config, "num_hidden_layers")
    kinds = config.get("layer_types")
    if kinds is None:
        every = int(config.get("sliding_window_pattern") or every)
        return [LOCAL if (i + 1) % every else GLOBAL for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n:
        raise refuse("layer_types", f"got {kinds!r}: need one kind per layer, {n} in all")
    for i, k in enumerate(kinds):
        if k not in (LOCAL, GLOBAL):
            raise refuse(f"layer_types[{i}]", f"got {k!r}: attnlab runs {LOCAL!r} and {GLOBAL!r}")
    return list(kinds)


def window(config: Config, kinds: list[str]) -> int | None:
    """The local layers' window (their query sees itself and window - 1 keys before it), None with no local layer."""
    if LOCAL not in kinds:
        return None
    return int(need(config, "sliding_window"))


def sizes(config: Config) -> Sizes:
    s = decoder_sizes(config, own_head_dim=True)  # head_dim is the config's own, not hidden_size / heads
    if flag(config, "use_bidirectional_attention", False):
        raise refuse(
            "use_bidirectional_attention", "true: attnlab runs Gemma as the causal decoder it is; set it false"
        )
    return s


NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")


def shapes(config: Config, qk_norm: bool = False) -> Shapes:
    """Every tensor read; `qk_norm`: each layer's q_norm and k_norm (head_dim,) too (Gemma-3)."""
    s = sizes(config)
    d, m, dh = s.d_model, need(config, "intermediate_size"), s.d_head
    bias = flag(config, "attention_bias", False)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d), "norm.weight": (d,)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        out |= {f"{p}.{n}.weight": (d,) for n in NORMS}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{p}.self_attn.{name}_proj.weight"] = (r, d)
            if bias:
                out[f"{p}.self_attn.{name}_proj.bias"] = (r,)
        out[f"{p}.self_attn.o_proj.weight"] = (d, s.n_heads * dh)
        if bias:
            out[f"{p}.self_attn.o_proj.bias"] = (d,)
        if qk_norm:
            out |= {f"{p}.self_attn.q_norm.weight": (dh,), f"{p}.self_attn.k_norm.weight": (dh,)}
        out |= {f"{p}.mlp.gate_proj.weight": (m, d), f"{p}.mlp.up_proj.weight": (m, d)}
        out[f"{p}.mlp.down_proj.weight"] = (d, m)
    if not flag(config, "tie_word_embeddings", True):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def block(
    config: Config,
    t: Mapping[str, Tensor],
    i: int,
    s: Sizes,
    act: Activation,
    rot: Rotary,
    own_window: int | None,
    softcap: float | None,
) -> Block:
    """Layer i: its projections with the score scale, softcap and rotary, its window (None: global), and the
    four norms around its two sublayers."""
    p, h, g, dh = f"layers.{i}", s.n_heads, s.n_kv_heads, s.d_head
    eps = number(config, "rms_norm_eps", 1e-6)
    a = f"{p}.self_attn"
    w = from_concatenated(
        linear_T(t[f"{a}.q_proj.weight"]),
        linear_T(t[f"{a}.k_proj.weight"]),
        linear_T(t[f"{a}.v_proj.weight"]),
        linear_T(t[f"{a}.o_proj.weight"]),
        h,
        g,
    )
    if flag(config, "attention_bias", False):
        w = replace(
            w,
            b_Q=t[f"{a}.q_proj.bias"].reshape(h, dh),
            b_K=t[f"{a}.k_proj.bias"].reshape(g, dh),
            b_V=t[f"{a}.v_proj.bias"].reshape(g, dh),
            b_O=t[f"{a}.o_proj.bias"],
        )
    scalar = number(config, "query_pre_attn_scalar", 256)
    w = replace(w, rotary=rot, scale=scalar**-0.5, softcap=softcap)

    def norm(name: str) -> RMSNorm:
        return RMSNorm(t[f"{p}.{name}.weight"], eps, True)

    return Block(
        attn=w,
        ln_pre=norm("input_layernorm"),
        ln_post_attn=norm("post_attention_layernorm"),
        ln_pre_mlp=norm("pre_feedforward_layernorm"),
        ln_post_mlp=norm("post_feedforward_layernorm"),
        mlp=GatedFeedForward(
            W_gate=linear_T(t[f"{p}.mlp.gate_proj.weight"]),
            W_in=linear_T(t[f"{p}.mlp.up_proj.weight"]),
            W_out=linear_T(t[f"{p}.mlp.down_proj.weight"]),
            act=act,
        ),
        window=own_window,
    )


def kinds_in_words(blocks: Sequence[Block]) -> str:
    """'L0 local 4 (theta 10000) · L1 global (theta 1e+06) ...': each layer's kind, for the architecture line."""
    parts = []
    for i, b in enumerate(blocks):
        theta = f" (theta {b.attn.rotary.theta:g})" if b.attn.rotary is not None else ""
        parts.append(f"L{i} {b.kind}{theta}")
    return " · ".join(parts)


def unembed(config: Config, t: Mapping[str, Tensor]) -> Unembed:
    eps = number(config, "rms_norm_eps", 1e-6)
    W_U = t["embed_tokens.weight"] if flag(config, "tie_word_embeddings", True) else t["lm_head.weight"]
    cap = optional_number(config, "final_logit_softcapping")
    return Unembed(RMSNorm(t["norm.weight"], eps, True), linear_T(W_U), softcap=cap)


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_activation")
    kinds = layer_types(config, 2)
    w = window(config, kinds)
    rot = rotary(config, s.d_head)
    cap = optional_number(config, "attn_logit_softcapping")
    blocks = tuple(block(config, t, i, s, act, rot, w if k == LOCAL else None, cap) for i, k in enumerate(kinds))
    final_cap = optional_number(config, "final_logit_softcapping")
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"], scale=s.d_model**0.5),
        network=Network(blocks, unembed(config, t)),
        architecture=(
            "Gemma-2 decoder with norms before and after each sublayer: a = x + RMSNorm(Attention(RMSNorm(x))); "
            f"x' = a + RMSNorm(GLU(RMSNorm(a))), {act} gate, every RMSNorm by 1 + w; {s.n_heads} heads over "
            f"{s.n_kv_heads} K/V groups of width {s.d_head}, scores scaled by "
            f"1/sqrt({number(config, 'query_pre_attn_scalar', 256):g})"
            + (f" and softcapped at {cap:g}" if cap is not None else "")
            + f"; layers: {kinds_in_words(blocks)}; logits = RMSNorm(x) W_U"
            + (f" softcapped at {final_cap:g}" if final_cap is not None else "")
            + "; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("gemma2",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
