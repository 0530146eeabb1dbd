"""ModernBERT (model_type modernbert), shaped on ModernBERT-base: a pre-LayerNorm encoder with rotary positions whose
layers are global every global_attn_every_n_layers-th layer and local between, as Hugging Face lays it out.

    x_0 = LayerNorm(tok_embeddings[id])                          (embeddings.norm: no learned positions)
    per layer l, of kind layer_types[l] ("full_attention": global, "sliding_attention": local):
        a  = x + Attention_l(attn_norm(x))                       (layer 0 has no attn_norm: x as it is)
        x' = a + GeGLU(mlp_norm(a))
    Attention_l: Wqkv split into q, k, v per head, rotary with the kind's own theta (global_rope_theta 160,000,
                 local_rope_theta 10,000), scores q . k / sqrt(head_dim), no causal mask (an encoder);
                 a local layer sees the keys with |q - k| <= local_attention / 2: half the window before the
                 query, half after (Block.window = local_attention // 2 + 1, since a window counts |q - k| < window)
    GeGLU(u) = Wo(act(u Wi[:m]) * u Wi[m:]),  m = intermediate_size,  act = hidden_activation (exact gelu)
    the encoder's output = final_norm(x) after the last layer

The final norm is the last block's Norm_mlp (engine/forward.py: what a block passes on), so the last layer's
resid_out is the model's last hidden state, as transformers' ModernBertModel returns it; the MaskedLM head is not
read (as for BERT, an encoder exposes its last hidden state). LayerNorms have no bias unless norm_bias; the
projections none unless attention_bias and mlp_bias.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from engine.attention import from_concatenated
from engine.feedforward import Activation, GatedFeedForward
from engine.forward import Block, Network
from engine.models.families import (
    ROTARY_BREAKS,
    CheckpointError,
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
    refuse,
    rotary,
)
from engine.norms import LayerNorm
from engine.rotary import Rotary

LOCAL, GLOBAL = "sliding_attention", "full_attention"
THETA = {GLOBAL: ("global_rope_theta", 160_000.0), LOCAL: ("local_rope_theta", 10_000.0)}


def layer_types(config: Config) -> list[str]:
    """Each layer's kind: config layer_types, else global every global_attn_every_n_layers-th layer from layer 0
    (0, 3, 6, ... for 3, ModernBERT-base's), local between, as transformers fills it in."""
    n = need(config, "num_hidden_layers")
    kinds = config.get("layer_types")
    if kinds is None:
        every = need(config, "global_attn_every_n_layers") if config.get("global_attn_every_n_layers") else 3
        return [LOCAL if i % every else GLOBAL for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n:
        raise refuse("layer_types", f"got {kinds!r}: need one kind per layer, {n} in all")
    for i, k in enumerate(kinds):
        if k not in (LOCAL, GLOBAL):
            raise refuse(f"layer_types[{i}]", f"got {k!r}: attnlab runs {LOCAL!r} and {GLOBAL!r}")
    return list(kinds)


def window(config: Config) -> int:
    """A local layer's Block.window: local_attention // 2 keys on each side of the query, and the query itself."""
    local = need(config, "local_attention") if config.get("local_attention") is not None else 128
    if local < 2:
        raise refuse("local_attention", f"got {local}: need at least 2 (half of it on each side of a query)")
    return local // 2 + 1


def rotaries(config: Config, d_head: int) -> dict[str, Rotary]:
    """Each kind's rotary: rope_parameters per kind (transformers 5), else global_rope_theta / local_rope_theta."""
    params = config.get("rope_parameters") or {}
    out = {}
    for kind, (older, default) in THETA.items():
        own = params.get(kind) if isinstance(params, Mapping) else None
        if own is None:
            theta = config.get(older)
            own = {"rope_type": "default", "rope_theta": default if theta is None else theta}
        if not isinstance(own, Mapping):
            raise refuse(f"rope_parameters.{kind}", f"got {own!r}: need the rotary settings of {kind} layers")
        try:
            out[kind] = rotary({**config, "rope_parameters": dict(own), "rope_scaling": None}, d_head)
        except CheckpointError as err:  # the shared reader names rope_parameters.*: say which kind it was
            raise CheckpointError(err.reason.replace("rope_parameters.", f"rope_parameters.{kind}.", 1)) from err
    return out


def sizes(config: Config) -> Sizes:
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    heads_divide(d, h, h)
    layer_types(config)
    window(config)
    rotaries(config, d // h)
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "max_position_embeddings"),
        decoder=False,
    )


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, need(config, "intermediate_size")
    norm_bias, attn_bias, mlp_bias = (flag(config, n, False) for n in ("norm_bias", "attention_bias", "mlp_bias"))

    def norm(name: str) -> Shapes:
        return {f"{name}.weight": (d,), **({f"{name}.bias": (d,)} if norm_bias else {})}

    out: Shapes = {"embeddings.tok_embeddings.weight": (s.vocab_size, d), **norm("embeddings.norm")}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        if i > 0:
            out |= norm(f"{p}.attn_norm")
        out |= {f"{p}.attn.Wqkv.weight": (3 * d, d), f"{p}.attn.Wo.weight": (d, d), **norm(f"{p}.mlp_norm")}
        out |= {f"{p}.mlp.Wi.weight": (2 * m, d), f"{p}.mlp.Wo.weight": (d, m)}
        if attn_bias:
            out |= {f"{p}.attn.Wqkv.bias": (3 * d,), f"{p}.attn.Wo.bias": (d,)}
        if mlp_bias:
            out |= {f"{p}.mlp.Wi.bias": (2 * m,), f"{p}.mlp.Wo.bias": (d,)}
    return out | norm("final_norm")


def layer_norm(config: Config, t: Mapping[str, Tensor], name: str) -> LayerNorm:
    """A LayerNorm, its bias zero where norm_bias is false (as adding none)."""
    weight = t[f"{name}.weight"]
    bias = t[f"{name}.bias"] if flag(config, "norm_bias", False) else torch.zeros_like(weight)
    return LayerNorm(weight, bias, number(config, "norm_eps", 1e-5))


def block(
    config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation, rot: Rotary, own: int | None
) -> Block:
    """Layer i: Wqkv's three blocks of rows as W_Q, W_K, W_V, rotary of its kind, its window (None: global)."""
    p, d, m = f"layers.{i}", s.d_model, need(config, "intermediate_size")
    qkv = t[f"{p}.attn.Wqkv.weight"]  # (3 D, D): q rows, then k, then v
    w = from_concatenated(
        linear_T(qkv[:d]),
        linear_T(qkv[d : 2 * d]),
        linear_T(qkv[2 * d :]),
        linear_T(t[f"{p}.attn.Wo.weight"]),
        s.n_heads,
    )
    if flag(config, "attention_bias", False):
        b = t[f"{p}.attn.Wqkv.bias"].reshape(3, s.n_heads, s.d_head)
        w = replace(w, b_Q=b[0], b_K=b[1], b_V=b[2], b_O=t[f"{p}.attn.Wo.bias"])
    w = replace(w, rotary=rot)
    wi = t[f"{p}.mlp.Wi.weight"]  # (2 m, D): the activated half first, the gate second
    mlp_bias = flag(config, "mlp_bias", False)
    bi = t[f"{p}.mlp.Wi.bias"] if mlp_bias else None
    last = i == s.n_layers - 1
    return Block(
        attn=w,
        ln_pre=layer_norm(config, t, f"{p}.attn_norm") if i > 0 else None,
        ln_pre_mlp=layer_norm(config, t, f"{p}.mlp_norm"),
        mlp=GatedFeedForward(
            W_gate=linear_T(wi[:m]),
            W_in=linear_T(wi[m:]),
            W_out=linear_T(t[f"{p}.mlp.Wo.weight"]),
            b_gate=None if bi is None else bi[:m],
            b_in=None if bi is None else bi[m:],
            b_out=t[f"{p}.mlp.Wo.bias"] if mlp_bias else None,
            act=act,
        ),
        ln_mlp=layer_norm(config, t, "final_norm") if last else None,  # the encoder's final norm
        window=own,
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_activation")
    kinds, own, rots = layer_types(config), window(config), rotaries(config, s.d_head)
    blocks = tuple(block(config, t, i, s, act, rots[k], own if k == LOCAL else None) for i, k in enumerate(kinds))
    words = " · ".join(
        f"L{i} {b.kind}" + ("" if b.attn.rotary is None else f" (theta {b.attn.rotary.theta:g})")
        for i, b in enumerate(blocks)
    )
    return Mapped(
        embedding=Embedding(W_E=t["embeddings.tok_embeddings.weight"], ln=layer_norm(config, t, "embeddings.norm")),
        network=Network(blocks),
        architecture=(
            "ModernBERT pre-LN encoder: x_0 = LayerNorm(embedding); a = x + Attention(LayerNorm(x)) (layer 0 "
            f"without the norm); x' = a + GLU(LayerNorm(a)), {act} gate; {s.n_heads} heads of width {s.d_head}, "
            f"rotary; a local layer sees |q - k| < {own} (half its local_attention on each side); layers: {words}; "
            "the output LayerNorm-ed after the last layer; bidirectional"
        ),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("modernbert",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
