"""Phi-3 (model_type phi3: Phi-3-mini and -medium, Phi-3.5-mini, Phi-4-mini): LLaMA's pre-RMSNorm decoder with its
projections fused, and longrope positions, as Hugging Face lays them out.

    x_0 = embed_tokens[id]
    per layer: a = x + Attention(input_layernorm(x)); x' = a + GLU(post_attention_layernorm(a))
    Q | K | V = u qkv_proj            one matrix, H * d_head then G * d_head then G * d_head output columns
    gate | up = u gate_up_proj        one matrix, d_mlp columns each; GLU(u) = down_proj(act(gate) * up), silu
    logits = norm(x) W_U,   W_U = embed_tokens^T where tie_word_embeddings, else lm_head

No biases. The rotary embedding is the config's (engine/models/families/__init__.py `rotary`): longrope, whose
long factors apply once the run is longer than original_max_position_embeddings (read from the top level, 4096
where the config leaves it out, as Phi3Config does; "su" and "yarn" are Phi-3's older names for longrope), and
partial_rotary_factor where the config gives one (Phi-4-mini rotates 3/4 of each head). sliding_window, where the
config gives one, becomes the default window mask, as Mistral's does.
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
    rope_positions,
    rotary,
)
from engine.norms import RMSNorm
from engine.rotary import Rotary

OLDER_NAMES = {"su": "longrope", "yarn": "longrope"}  # Phi3Config reads these rope types as longrope
DEFAULTS = {"original_max_position_embeddings": 4096}  # Phi3Config's, where config.json leaves it out


def phi3_rotary(config: Config, d_head: int) -> Rotary:
    return rotary({**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}, d_head, renamed=OLDER_NAMES)


def sizes(config: Config) -> Sizes:
    s = decoder_sizes(config, max_positions=rope_positions(config))
    phi3_rotary(config, s.d_head)  # the rotary embedding and its scaling checked before any tensor is read
    return s


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", False)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, dh = s.d_model, need(config, "intermediate_size"), s.d_head
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        out |= {f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,)}
        out[f"{p}.self_attn.qkv_proj.weight"] = ((s.n_heads + 2 * s.n_kv_heads) * dh, d)
        out[f"{p}.self_attn.o_proj.weight"] = (d, s.n_heads * dh)
        out[f"{p}.mlp.gate_up_proj.weight"] = (2 * m, d)
        out[f"{p}.mlp.down_proj.weight"] = (d, m)
    out["norm.weight"] = (d,)
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def split_qkv(qkv: Tensor, s: Sizes) -> tuple[Tensor, Tensor, Tensor]:
    """qkv_proj's (H * d_head + 2 G * d_head, D) rows -> the Q, K and V rows, views in that order."""
    q_rows, kv_rows = s.n_heads * s.d_head, s.n_kv_heads * s.d_head
    return qkv[:q_rows], qkv[q_rows : q_rows + kv_rows], qkv[q_rows + kv_rows :]


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation, rot: Rotary) -> Block:
    p, eps = f"layers.{i}", number(config, "rms_norm_eps", 1e-5)
    q, k, v = split_qkv(t[f"{p}.self_attn.qkv_proj.weight"], s)
    w = from_concatenated(
        linear_T(q), linear_T(k), linear_T(v), linear_T(t[f"{p}.self_attn.o_proj.weight"]), s.n_heads, s.n_kv_heads
    )
    gate_up = t[f"{p}.mlp.gate_up_proj.weight"]
    m = gate_up.shape[0] // 2
    return Block(
        attn=replace(w, rotary=rot),
        ln_pre=RMSNorm(t[f"{p}.input_layernorm.weight"], eps),
        ln_pre_mlp=RMSNorm(t[f"{p}.post_attention_layernorm.weight"], eps),
        mlp=GatedFeedForward(
            W_gate=linear_T(gate_up[:m]),
            W_in=linear_T(gate_up[m:]),
            W_out=linear_T(t[f"{p}.mlp.down_proj.weight"]),
            act=act,
        ),
    )


def window(config: Config) -> int | None:
    return None if config.get("sliding_window") is None else int(need(config, "sliding_window"))


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    eps = number(config, "rms_norm_eps", 1e-5)
    rot = phi3_rotary(config, s.d_head)
    W_U = t["embed_tokens.weight"] if tied(config) else t["lm_head.weight"]
    net = Network(
        tuple(block(config, t, i, s, act, rot) for i in range(s.n_layers)),
        Unembed(RMSNorm(t["norm.weight"], eps), linear_T(W_U)),
    )
    w = window(config)
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=net,
        architecture=(
            f"Phi-3 pre-norm decoder: a = x + Attention(RMSNorm(x)); x' = a + GLU(RMSNorm(a)), {act} gate; Q, K, V "
            f"from one fused qkv_proj, gate and up from one gate_up_proj; {s.n_heads} heads over {s.n_kv_heads} "
            f"K/V groups of width {s.d_head}; {rot.describe()}; logits = RMSNorm(x) W_U; causal"
            + (f", sliding window {w}" if w is not None else "")
        ),
        default_masks=MaskSpec(causal=True, window=w),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("phi3",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
