"""Gemma-3's text decoder (model_type gemma3_text): Gemma-2's block (engine/models/families/gemma2.py) with q/k
norms, 5 local layers to 1 global, and a rotary theta of each kind's own.

    x_0 = embed_tokens[id] * sqrt(hidden_size)
    per layer l, of kind layer_types[l] (default: every 6th global, the rest local; sliding_window_pattern):
        a  = x + post_attention_layernorm(Attention_l(input_layernorm(x)))
        x' = a + post_feedforward_layernorm(GLU(pre_feedforward_layernorm(a)))
    Attention_l: Q, K = q_norm(Q), k_norm(K)          RMSNorm (1 + w) over each head's head_dim, before rotary
                 Q, K = R_theta(Q), R_theta(K)         theta = the kind's: rope_parameters[sliding_attention] for a
                                                       local layer (rope_local_base_freq in older configs, 10,000),
                                                       rope_parameters[full_attention] for a global one (rope_theta,
                                                       1,000,000)
                 scores = q . k / sqrt(query_pre_attn_scalar); a local layer sees |q - k| < sliding_window
    logits = norm(x) W_U (c_f tanh(. / c_f) where final_logit_softcapping is set)

transformers' Gemma-3 does not apply attn_logit_softcapping in its attention, so a config that sets it is refused
rather than read two ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.forward import Network
from engine.masks import MaskSpec
from engine.models.families import (
    ROTARY_BREAKS,
    CheckpointError,
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    activation,
    number,
    refuse,
)
from engine.models.families import rotary as read_rotary
from engine.models.families.gemma2 import (
    GLOBAL,
    LOCAL,
    block,
    kinds_in_words,
    layer_types,
    optional_number,
    sizes,
    unembed,
    window,
)
from engine.models.families.gemma2 import shapes as gemma2_shapes
from engine.norms import RMSNorm
from engine.rotary import Rotary

DEFAULT_THETA = {LOCAL: 10_000.0, GLOBAL: 1_000_000.0}  # transformers' Gemma-3 defaults


def rotaries(config: Config, d_head: int) -> dict[str, Rotary]:
    """Each layer kind's rotary: rope_parameters per kind (transformers 5), else the older top-level rope_theta
    (global) and rope_local_base_freq (local)."""
    params = config.get("rope_parameters") or {}
    out = {}
    for kind, older in ((LOCAL, "rope_local_base_freq"), (GLOBAL, "rope_theta")):
        own = params.get(kind) if isinstance(params, Mapping) else None
        if own is None:
            theta = config.get(older)
            own = {"rope_type": "default", "rope_theta": DEFAULT_THETA[kind] if theta is None else theta}
            if kind == GLOBAL and config.get("rope_scaling") is not None:
                own = {**own, **config["rope_scaling"]}
        if not isinstance(own, Mapping):
            raise refuse(f"rope_parameters.{kind}", f"got {own!r}: need the rotary settings of {kind} layers")
        try:
            out[kind] = read_rotary({**config, "rope_parameters": dict(own), "rope_scaling": None}, d_head)
        except CheckpointError as err:  # the shared reader names rope_parameters.*: say which kind it was
            raise CheckpointError(err.reason.replace("rope_parameters.", f"rope_parameters.{kind}.", 1)) from err
    return out


def shapes(config: Config) -> Shapes:
    return gemma2_shapes(config, qk_norm=True)


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    if optional_number(config, "attn_logit_softcapping") is not None:
        raise refuse(
            "attn_logit_softcapping",
            "set: transformers' Gemma-3 does not apply it in its attention, so attnlab will not guess; set it null",
        )
    act = activation(config, "hidden_activation")
    kinds = layer_types(config, 6)
    w = window(config, kinds)
    rot = rotaries(config, s.d_head)
    eps = number(config, "rms_norm_eps", 1e-6)
    blocks = []
    for i, k in enumerate(kinds):
        b = block(config, t, i, s, act, rot[k], w if k == LOCAL else None, None)
        a = f"layers.{i}.self_attn"
        q_norm = RMSNorm(t[f"{a}.q_norm.weight"], eps, True)
        k_norm = RMSNorm(t[f"{a}.k_norm.weight"], eps, True)
        blocks.append(replace(b, attn=replace(b.attn, q_norm=q_norm, k_norm=k_norm, qk_norm_over="head")))
    net = Network(tuple(blocks), unembed(config, t))
    final_cap = optional_number(config, "final_logit_softcapping")
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"], scale=s.d_model**0.5),
        network=net,
        architecture=(
            "Gemma-3 decoder with norms before and after each sublayer: a = x + RMSNorm(Attention(RMSNorm(x))); "
            f"x' = a + RMSNorm(GLU(RMSNorm(a))), {act} gate, every RMSNorm by 1 + w; {s.n_heads} heads over "
            f"{s.n_kv_heads} K/V groups of width {s.d_head}, q and k RMSNormed per head before rotary, scores "
            f"scaled by 1/sqrt({number(config, 'query_pre_attn_scalar', 256):g}); layers: "
            f"{kinds_in_words(net.blocks)}; logits = RMSNorm(x) W_U"
            + (f" softcapped at {final_cap:g}" if final_cap is not None else "")
            + "; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("gemma3_text",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
