"""How a Hugging Face checkpoint of each architecture becomes attnlab's engine pieces: one module per family.

A family module declares one `Family` as FAMILY (or several as FAMILIES, where their key prefixes differ):

    model_types   the config.json `model_type` values it reads ("gpt2"; "llama", "mistral", ...)
    prefix        the base model's key prefix in the *ForCausalLM / *ForMaskedLM layouts ("transformer.",
                  "model."); the loader strips it, so a bare model's keys and a head model's read the same
    aliases       other names a tensor is saved under (GPT-NeoX's head is embed_out on disk, lm_head in memory)
    sizes         config dict -> Sizes, from config.json alone: checked against the limits before any tensor loads
    shapes        config dict -> {tensor name: shape}: every tensor `build` reads (names without the prefix),
                  each checked against the file's header before it is loaded
    build         (config dict, tensors by name) -> Mapped: the embedding (ids -> x_0, or pixels -> x_0 for an
                  image model: engine/patches.py), the Network (blocks, unembedding), the default masks, the
                  statistics' assumptions that fail, the data flow in words, an image model's classifier
    reads         what x_0 is made from: "ids" (a text's token ids, read by tokenizer.json) or "pixels" (an image,
                  resized and normalised by the caller as preprocessor_config.json says; no tokenizer.json)

A missing or unsupported setting is a CheckpointError naming the config field (engine/models/checkpoint.py raises
it; `refuse` here builds it). This module holds what the family modules share; engine/models/families/registry.py
gathers them, by model_type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.classifier import ImageClassifier
from engine.feedforward import Activation
from engine.forward import Network
from engine.masks import MaskSpec
from engine.norms import LayerNorm
from engine.patches import PatchEmbedding, wide
from engine.rotary import (
    Dynamic,
    Linear,
    Llama3,
    LongRope,
    Rotary,
    Scaling,
    Yarn,
    longrope_attention_factor,
    yarn_attention_factor,
)

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
        """(S,) ids at positions start .. start + S - 1 -> (S, D), in W_E's dtype, or float32 where the checkpoint
        stores 16-bit numbers (every row read converted exactly, as the whole table once was at loading)."""
        x = wide(self.W_E[ids])
        if self.scale is not None:
            x = x * torch.tensor(self.scale).to(x.dtype)  # a float32 scalar first, as Gemma rounds it
        if self.W_in is not None:
            x = x @ wide(self.W_in)
        if self.W_pos is not None:
            first = start + self.position_offset
            x = x + wide(self.W_pos[first : first + ids.shape[0]])
        if self.W_type is not None:
            x = x + wide(self.W_type)
        if self.ln is not None:
            ln = self.ln.to(x.device, x.dtype)
            x = F.layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)
        return x

    @property
    def positions(self) -> int | None:
        """How many positions the learned embeddings cover; None without them."""
        return None if self.W_pos is None else self.W_pos.shape[0] - self.position_offset


@dataclass(frozen=True)
class Mapped:
    """What a family makes of one checkpoint."""

    embedding: Embedding | PatchEmbedding  # ids -> x_0, or pixels -> x_0 (Family.reads)
    network: Network
    architecture: str  # the block's data flow, in words
    default_masks: MaskSpec | None = None  # causal (and windowed) for decoders
    breaks: Mapping[str, str] = field(default_factory=dict)  # engine/stats.py assumptions that fail, and why
    classifier: ImageClassifier | None = None  # an image model's class logits, where the checkpoint has a head


@dataclass(frozen=True)
class Family:
    model_types: tuple[str, ...]
    prefix: str
    sizes: Callable[[Config], Sizes]
    shapes: Callable[[Config], Shapes]
    build: Callable[[Config, Mapping[str, Tensor]], Mapped]
    aliases: Mapping[str, str] = field(default_factory=dict)  # another name a tensor is saved under -> the one read
    reads: Literal["ids", "pixels"] = "ids"  # x_0 from a text's token ids, or from an image's pixels

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


def decoder_sizes(config: Config, *, own_head_dim: bool = False, max_positions: int | None = None) -> Sizes:
    """A decoder's Sizes from the fields Hugging Face's decoders share: hidden_size, num_attention_heads,
    num_key_value_heads (one per head where it is left out), num_hidden_layers, vocab_size and
    max_position_embeddings (or `max_positions`, where the family reads its own). Each head's width is the config's
    head_dim where it gives one (required where `own_head_dim`; the K/V groups then divide the heads, and the width
    need not), else hidden_size / heads."""
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    g = h if config.get("num_key_value_heads") is None else need(config, "num_key_value_heads")
    if own_head_dim or config.get("head_dim") is not None:
        heads_divide(h, h, g)
        d_head = need(config, "head_dim")
    else:
        heads_divide(d, h, g)
        d_head = d // h
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=g,
        d_head=d_head,
        vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "max_position_embeddings") if max_positions is None else max_positions,
        decoder=True,
    )


# transformers' activation names (its ACT2FN) -> the engine's (engine/feedforward.py), for every family
ACTIVATIONS: dict[str, Activation] = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ACTIVATIONS |= {"relu": "relu", "silu": "silu", "swish": "silu"}


def activation(config: Config, name: str, known: Mapping[str, Activation] = ACTIVATIONS) -> Activation:
    """The engine's name (engine/feedforward.py) for the config's activation `name`."""
    act = need(config, name, str)
    if act not in known:
        raise refuse(name, f"got {act!r}: attnlab runs {', '.join(sorted(known))}")
    return known[act]


ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
ORIGINAL = "original_max_position_embeddings"


def rope_parameters(config: Config, renamed: Mapping[str, str] | None = None) -> tuple[str, str, dict[str, Any]]:
    """(the field they are read from, rope_type, the parameters) as transformers standardises them: the older
    rope_scaling in place of rope_parameters where a config gives it, "type" for rope_type, a name `renamed` (Phi-3
    reads "su" and "yarn" as "longrope"), and for llama3, yarn and longrope original_max_position_embeddings from
    the top level where the config has it there (Phi-3), else the parameters', else max_position_embeddings."""
    where = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    given = config.get(where) or {}
    if not isinstance(given, Mapping):
        raise refuse(where, f"got {given!r}: need an object")
    params = dict(given)
    kind = params.get("rope_type", params.get("type", "default"))
    kind = (renamed or {}).get(kind, kind) if isinstance(kind, str) else kind
    if kind in ("llama3", "yarn", "longrope"):
        if config.get(ORIGINAL) is not None:
            params[ORIGINAL] = config[ORIGINAL]
        elif params.get(ORIGINAL) is None:
            params[ORIGINAL] = config.get("max_position_embeddings")
    return where, kind, params


def rope_positions(config: Config) -> int:
    """The longest input of a rotary decoder: max_position_embeddings, times the factor of a dynamic (NTK) scaling,
    whose base grows with the length past max_position_embeddings so that it runs that much longer."""
    p = need(config, "max_position_embeddings")
    where, kind, params = rope_parameters(config)
    if kind != "dynamic":
        return int(p)
    return max(int(p), int(p * positive(params, "factor", where)))


def positive(params: Mapping[str, Any], name: str, where: str, default: float | None = None) -> float:
    """params[name] as a positive number (`default` where it is left out): a CheckpointError naming it otherwise."""
    value = params.get(name)
    value = default if value is None else value
    if value is None:
        raise refuse(f"{where}.{name}", "missing: its rope_type needs it")
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise refuse(f"{where}.{name}", f"got {value!r}: need a positive number")
    return float(value)


def factors(params: Mapping[str, Any], name: str, where: str, count: int) -> tuple[float, ...]:
    """params[name] as `count` positive numbers, one per rotating pair of dims."""
    value = params.get(name)
    if not isinstance(value, list | tuple) or len(value) != count:
        got = len(value) if isinstance(value, list | tuple) else repr(value)
        raise refuse(f"{where}.{name}", f"got {got}: need a list of {count} numbers, one per rotary pair (rot_dim / 2)")
    for i, f in enumerate(value):
        positive({"": f}, "", f"{where}.{name}[{i}]")
    return tuple(float(f) for f in value)


def scaling(
    config: Config, kind: str, params: Mapping[str, Any], where: str, rot_dim: int, theta: float
) -> Scaling | None:
    """The rotary scaling `kind` reads from `params` (engine/rotary.py has the maths of each)."""
    if kind == "default":
        return None
    if kind == "linear":
        return Linear(positive(params, "factor", where))
    if kind == "dynamic":
        if rot_dim < 4:
            raise refuse(f"{where}.rope_type", f"dynamic on {rot_dim} rotary dims: its power r / (r - 2) needs 4")
        return Dynamic(positive(params, "factor", where), need(config, "max_position_embeddings"))
    original = params.get(ORIGINAL)
    if not isinstance(original, int) or isinstance(original, bool) or original < 2:
        raise refuse(f"{where}.{ORIGINAL}", f"got {original!r}: need an integer of at least 2")
    if kind == "llama3":
        low, high = positive(params, "low_freq_factor", where), positive(params, "high_freq_factor", where)
        if high <= low:
            raise refuse(f"{where}.high_freq_factor", f"got {high:g}: need more than low_freq_factor {low:g}")
        return Llama3(positive(params, "factor", where), low, high, original)
    if kind == "yarn" and "factor" not in params:
        raise refuse(f"{where}.factor", "missing: rope_type 'yarn' needs it (null: max_position_embeddings / L)")
    implied = need(config, "max_position_embeddings") / original  # transformers' factor where the config's is null
    factor = positive(params, "factor", where, implied)
    if kind == "yarn":
        if theta == 1.0:
            raise refuse(f"{where}.rope_theta", "got 1: yarn divides by ln(rope_theta)")
        m = positive(params, "mscale", where, 0) if params.get("mscale") else None
        m_all = positive(params, "mscale_all_dim", where, 0) if params.get("mscale_all_dim") else None
        a = params.get("attention_factor")
        truncate = params.get("truncate", True)
        if not isinstance(truncate, bool):
            raise refuse(f"{where}.truncate", f"got {truncate!r}: need true or false")
        return Yarn(
            factor,
            original,
            yarn_attention_factor(factor, m, m_all) if a is None else positive(params, "attention_factor", where),
            positive(params, "beta_fast", where, 32) if params.get("beta_fast") else 32.0,  # 0 or null: 32, as theirs
            positive(params, "beta_slow", where, 1) if params.get("beta_slow") else 1.0,
            truncate,
        )
    if kind == "longrope":
        a = params.get("attention_factor")
        return LongRope(
            factors(params, "short_factor", where, rot_dim // 2),
            factors(params, "long_factor", where, rot_dim // 2),
            original,
            longrope_attention_factor(factor, original) if a is None else positive(params, "attention_factor", where),
        )
    raise AssertionError(kind)


def rotary(
    config: Config, d_head: int, factor_default: float = 1.0, renamed: Mapping[str, str] | None = None
) -> Rotary:
    """The rotary embedding config.json declares: rope_parameters (transformers 5) or the older top-level
    rope_theta / rope_scaling, GPT-NeoX's rotary_pct / rotary_emb_base; its scaling, one of ROPE_TYPES
    (`renamed`: a family's other names for them)."""
    where, kind, rope = rope_parameters(config, renamed)
    if kind not in ROPE_TYPES:
        raise refuse(f"{where}.rope_type", f"got {kind!r}: attnlab runs {', '.join(ROPE_TYPES)}")
    theta = rope.get("rope_theta", config.get("rope_theta", config.get("rotary_emb_base", 10000.0)))
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", config.get("rotary_pct")))
    factor = factor_default if factor is None else factor
    if not isinstance(theta, int | float) or isinstance(theta, bool) or not 0 < theta < math.inf:
        raise refuse("rope_parameters.rope_theta", f"got {theta!r}: need a positive number")
    if not isinstance(factor, int | float) or isinstance(factor, bool) or not 0 < factor <= 1:
        raise refuse("rope_parameters.partial_rotary_factor", f"got {factor!r}: need a fraction in (0, 1]")
    rot_dim = int(d_head * factor)
    if rot_dim < 2 or rot_dim % 2:
        raise refuse(
            "rope_parameters.partial_rotary_factor",
            f"{factor} of head width {d_head} rotates {rot_dim} dims: rotary needs an even number, at least 2",
        )
    theta = float(theta)
    return Rotary(rot_dim=rot_dim, theta=theta, scaling=scaling(config, kind, rope, where, rot_dim, theta))


def linear_T(t: Tensor) -> Tensor:
    """A torch Linear's (out, in) weight as the (in, out) matrix x W multiplies by: a view, not a copy. The
    attention projections go back to the stored (out, in) form for F.linear (AttentionWeights.linear), and a
    product with a transposed view reads it in place, so loading copies no weight twice."""
    return t.T
