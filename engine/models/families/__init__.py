"""How a Hugging Face checkpoint of each architecture becomes attnlab's engine pieces: one module per family.

A family module declares one `Family` as FAMILY (or several as FAMILIES, where their key prefixes differ):

    model_types   the config.json `model_type` values it reads ("gpt2"; "llama", "mistral", ...)
    prefix        the base model's key prefix in the *ForCausalLM / *ForMaskedLM layouts ("transformer.",
                  "model."); the loader strips it, so a bare model's keys and a head model's read the same
    aliases       other names a tensor is saved under (GPT-NeoX's head is embed_out on disk, lm_head in memory)
    sizes         config dict -> Sizes, from config.json alone: checked against the limits before any tensor loads
    shapes        config dict -> {tensor name: shape}: every tensor `build` reads (names without the prefix),
                  each checked against the file's header before it is loaded
    build         (config dict, tensors by name) -> Mapped: the embedding (ids -> x_0), the Network (blocks,
                  unembedding), the default masks, the statistics' assumptions that fail, the data flow in words

A missing or unsupported setting is a CheckpointError naming the config field (engine/models/checkpoint.py raises
it; `refuse` here builds it). This module holds what the family modules share; engine/models/families/registry.py
gathers them, by model_type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.feedforward import Activation
from engine.forward import Network
from engine.masks import MaskSpec
from engine.norms import LayerNorm
from engine.rotary import Rotary

Config = Mapping[str, Any]
Shapes = dict[str, tuple[int, ...]]


class CheckpointError(Exception):
    """A checkpoint attnlab cannot read, with `reason`: the file or config field, and what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Sizes:
    """A checkpoint's dimensions from config.json alone."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    vocab_size: int
    max_positions: int  # the longest input: learned positions, or the config's max_position_embeddings
    decoder: bool  # causal, decodes token by token; False: an encoder that reads the whole sequence


@dataclass(frozen=True)
class Embedding:
    """ids -> x_0: word embeddings, learned positions and token type 0 where the family has them, a norm, a scale.

    x_0 = Norm(W_E[id] * scale W_in + W_pos[position + position_offset] + W_type)
    """

    W_E: Tensor  # (V, D), or (V, E) with W_in
    W_pos: Tensor | None = None  # (P, D) learned positions
    position_offset: int = 0  # the row of position 0 in W_pos (RoBERTa: padding_idx + 1)
    W_type: Tensor | None = None  # (D,) token type 0
    ln: LayerNorm | None = None  # after the sum (BERT)
    scale: float | None = None  # Gemma: sqrt(D), rounded to the run's dtype as Gemma rounds it
    W_in: Tensor | None = None  # (E, D) word embeddings narrower than the residual, projected up (OPT's project_in)

    def __call__(self, ids: Tensor, start: int = 0) -> Tensor:
        """(S,) ids at positions start .. start + S - 1 -> (S, D), in W_E's dtype."""
        x = self.W_E[ids]
        if self.scale is not None:
            x = x * torch.tensor(self.scale).to(x.dtype)  # a float32 scalar first, as Gemma rounds it
        if self.W_in is not None:
            x = x @ self.W_in
        if self.W_pos is not None:
            first = start + self.position_offset
            x = x + self.W_pos[first : first + ids.shape[0]]
        if self.W_type is not None:
            x = x + self.W_type
        if self.ln is not None:
            x = F.layer_norm(x, (x.shape[-1],), self.ln.weight, self.ln.bias, self.ln.eps)
        return x

    @property
    def positions(self) -> int | None:
        """How many positions the learned embeddings cover; None without them."""
        return None if self.W_pos is None else self.W_pos.shape[0] - self.position_offset


@dataclass(frozen=True)
class Mapped:
    """What a family makes of one checkpoint."""

    embedding: Embedding
    network: Network
    architecture: str  # the block's data flow, in words
    default_masks: MaskSpec | None = None  # causal (and windowed) for decoders
    breaks: Mapping[str, str] = field(default_factory=dict)  # engine/stats.py assumptions that fail, and why


@dataclass(frozen=True)
class Family:
    model_types: tuple[str, ...]
    prefix: str
    sizes: Callable[[Config], Sizes]
    shapes: Callable[[Config], Shapes]
    build: Callable[[Config, Mapping[str, Tensor]], Mapped]
    aliases: Mapping[str, str] = field(default_factory=dict)  # another name a tensor is saved under -> the one read

    def name(self, key: str) -> str:
        """A saved tensor's name as `shapes` and `build` know it: the prefix stripped, an alias resolved."""
        bare = key.removeprefix(self.prefix)
        return self.aliases.get(bare, bare)


ROTARY_BREAKS = {"fixed_qk": "rotary position embeddings turn Q and K by position, so the form differs per pair"}


def refuse(field_name: str, why: str) -> CheckpointError:
    return CheckpointError(f"config.json {field_name}: {why}")


def need(config: Config, name: str, kind: type = int) -> Any:
    """config[name], required and of `kind` (positive for ints): a CheckpointError naming it otherwise."""
    if name not in config or config[name] is None:
        raise refuse(name, "missing: the family needs it")
    value = config[name]
    if kind is int and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise refuse(name, f"got {value!r}: need a positive integer")
    if kind is float and (not isinstance(value, int | float) or isinstance(value, bool) or not value > 0):
        raise refuse(name, f"got {value!r}: need a positive number")
    if kind is str and not isinstance(value, str):
        raise refuse(name, f"got {value!r}: need a string")
    return value


def number(config: Config, name: str, default: float) -> float:
    """config[name] as a positive number (an epsilon, say), `default` where the config leaves it out."""
    value = config.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
        raise refuse(name, f"got {value!r}: need a positive number")
    return float(value)


def flag(config: Config, name: str, default: bool) -> bool:
    """config[name] as true or false, `default` where the config leaves it out."""
    value = config.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise refuse(name, f"got {value!r}: need true or false")
    return value


def heads_divide(d_model: int, n_heads: int, n_kv_heads: int, width: str = "hidden_size") -> None:
    if n_kv_heads > n_heads or n_heads % n_kv_heads:
        raise refuse("num_key_value_heads", f"got {n_kv_heads} for {n_heads} heads: heads must divide by it")
    if d_model % n_heads:
        raise refuse("num_attention_heads", f"got {n_heads} heads for {width} {d_model}: {width} must divide by heads")


# transformers' activation names (its ACT2FN) -> the engine's (engine/feedforward.py), for every family
ACTIVATIONS: dict[str, Activation] = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ACTIVATIONS |= {"relu": "relu", "silu": "silu", "swish": "silu"}


def activation(config: Config, name: str, known: Mapping[str, Activation] = ACTIVATIONS) -> Activation:
    """The engine's name (engine/feedforward.py) for the config's activation `name`."""
    act = need(config, name, str)
    if act not in known:
        raise refuse(name, f"got {act!r}: attnlab runs {', '.join(sorted(known))}")
    return known[act]


def rotary(config: Config, d_head: int, factor_default: float = 1.0) -> Rotary:
    """The rotary embedding config.json declares: rope_parameters (transformers 5) or the older top-level
    rope_theta / rope_scaling, GPT-NeoX's rotary_pct / rotary_emb_base. Only rope_type "default" is read."""
    rope = dict(config.get("rope_parameters") or {})
    scaling = config.get("rope_scaling") or {}
    kind = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise refuse("rope_parameters.rope_type", f"got {kind!r}: attnlab runs only the default rotary embedding")
    theta = rope.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base", 10000.0)))
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct")))
    factor = factor_default if factor is None else factor
    if not isinstance(theta, int | float) or isinstance(theta, bool) or not theta > 0:
        raise refuse("rope_parameters.rope_theta", f"got {theta!r}: need a positive number")
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not 0 < factor <= 1:
        raise refuse("rope_parameters.partial_rotary_factor", f"got {factor!r}: need a fraction in (0, 1]")
    rot_dim = int(d_head * factor)
    if rot_dim < 2 or rot_dim % 2:
        raise refuse(
            "rope_parameters.partial_rotary_factor",
            f"{factor} of head width {d_head} rotates {rot_dim} dims: rotary needs an even number, at least 2",
        )
    return Rotary(rot_dim=rot_dim, theta=float(theta))


def linear_T(t: Tensor) -> Tensor:
    """A torch Linear's (out, in) weight as the (in, out) matrix x W multiplies by: a view, not a copy. The
    attention projections go back to the stored (out, in) form for F.linear (AttentionWeights.linear), and a
    product with a transposed view reads it in place, so loading copies no weight twice."""
    return t.T
