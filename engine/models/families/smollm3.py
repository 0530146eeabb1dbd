"""SmolLM3 (model_type smollm3), shaped on SmolLM3-3B: LLaMA's pre-RMSNorm decoder (engine/models/families/llama.py)
in which some layers have no rotary position embedding at all (NoPE layers).

    per layer l: a = x + Attention_l(input_layernorm(x)); x' = a + GLU(post_attention_layernorm(a))
    Attention_l: grouped K/V; queries and keys rotated by position where no_rope_layers[l] is 1, left as
                 projected where it is 0 (the layer's rotary is None: its scores see no position but the mask's)
    logits = norm(x) W_U,   W_U = embed_tokens^T (tie_word_embeddings, SmolLM3's default), else lm_head

no_rope_layers defaults, as transformers fills it in, to 0 for every no_rope_layer_interval-th layer (layers 3, 7, ...
for the interval 4) and 1 elsewhere. With use_sliding_window, the layers layer_types names "sliding_attention" get
their own window of sliding_window (SmolLM3-3B slides in none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from torch import Tensor

from engine.models.families import Config, Family, Mapped, Shapes, Sizes, flag, gemma2, llama, need, refuse


def as_llama(config: Config) -> dict[str, Any]:
    """The config as LLaMA's family reads it: SmolLM3 ties its embeddings unless it says otherwise."""
    return {**config, "model_type": "llama", "tie_word_embeddings": flag(config, "tie_word_embeddings", True)}


def rope_layers(config: Config) -> list[bool]:
    """Whether each layer rotates its queries and keys: no_rope_layers, else every interval-th layer without."""
    n = need(config, "num_hidden_layers")
    listed = config.get("no_rope_layers")
    if listed is None:
        every = need(config, "no_rope_layer_interval") if config.get("no_rope_layer_interval") is not None else 4
        return [bool((i + 1) % every) for i in range(n)]
    if not isinstance(listed, list) or len(listed) < n or any(v not in (0, 1) or isinstance(v, float) for v in listed):
        raise refuse("no_rope_layers", f"got {listed!r}: need a 0 or 1 for each of the {n} layers")
    return [bool(v) for v in listed[:n]]


def windows(config: Config) -> list[int | None]:
    """Each layer's own window: sliding_window on the "sliding_attention" layers where use_sliding_window."""
    n = need(config, "num_hidden_layers")
    if not flag(config, "use_sliding_window", False) or config.get("sliding_window") is None:
        return [None] * n
    kinds = gemma2.layer_types(config, n + 1)
    return [int(need(config, "sliding_window")) if k == gemma2.LOCAL else None for k in kinds]


def sizes(config: Config) -> Sizes:
    s = llama.sizes(as_llama(config))
    rope_layers(config)
    windows(config)
    return s


def shapes(config: Config) -> Shapes:
    return llama.shapes(as_llama(config))


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    mapped = llama.build(as_llama(config), t)
    rotated, own = rope_layers(config), windows(config)
    blocks = tuple(
        replace(b, attn=b.attn if rope else replace(b.attn, rotary=None), window=w)
        for b, rope, w in zip(mapped.network.blocks, rotated, own, strict=True)
    )
    s = sizes(config)
    return replace(
        mapped,
        network=replace(mapped.network, blocks=blocks),
        architecture=(
            "SmolLM3 pre-norm decoder: a = x + Attention(RMSNorm(x)); x' = a + GLU(RMSNorm(a)); "
            f"{s.n_heads} heads over {s.n_kv_heads} K/V groups of width {s.d_head}; layers: "
            + " · ".join(
                f"L{i} {b.kind}"
                + ("" if b.attn.rotary is None else f" (theta {b.attn.rotary.theta:g})")
                + ("" if b.attn.rotary is not None else " no rotary")
                for i, b in enumerate(blocks)
            )
            + "; logits = RMSNorm(x) W_U; causal"
        ),
    )


FAMILY = Family(model_types=("smollm3",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
