"""What every attention source ("model") offers: a description, tokenisation, and a run.

A run returns every layer's `AttentionOutput` by name, so the web layer, the analyses and the
tests all read the same tensors the forward pass produced.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from engine.attention import AllMaskedPolicy, AttentionOutput, AttentionWeights, attention
from engine.errors import InputError
from engine.masks import MaskSpec, eligibility


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    n_layers: int
    n_heads: int  # per layer (for models with options, at the default options)
    n_kv_heads: int
    d_model: int
    d_head: int  # key/query width per head
    d_v: int  # value width per head
    max_tokens: int | None = None  # the model's own limit (positions it has embeddings for)
    tokenizer: str = "whitespace"
    default_text: str | None = None
    default_masks: MaskSpec | None = None
    options: dict[str, Any] = field(default_factory=dict)  # option -> default value
    vocab: list[str] | None = None


@dataclass
class RunInput:
    """One request to a model, already parsed. Tensors are (S, D)."""

    text: str | None = None
    tokens: list[str] | None = None
    x: Tensor | None = None
    weights: dict[str, Tensor] | None = None  # w_q, w_k, w_v, optional w_o: D x (heads * width)
    heads: int | None = None
    kv_heads: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    masks: MaskSpec | None = None  # None: the model's default masks
    scale: bool = True
    all_masked: AllMaskedPolicy = "error"
    last_layer: int | None = None  # compute layers 0..last_layer; None: all


@dataclass
class LayerTrace:
    index: int
    attn: AttentionOutput
    resid_in: Tensor  # (B, S, D) what the layer read
    resid_out: Tensor  # (B, S, D') what the layer passed on


@dataclass
class ModelRun:
    model: str
    tokens: list[str]
    masks: MaskSpec
    eligible: Tensor  # (S, S)
    layers: list[LayerTrace]
    config: dict[str, Any]
    timings_ms: dict[str, float] = field(default_factory=dict)


class AttentionModel(ABC):
    info: ModelInfo

    @abstractmethod
    def tokenize(self, inp: RunInput) -> list[str]:
        """The token labels this input produces (without running anything)."""

    @abstractmethod
    def run(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> ModelRun:
        """Compute every layer up to inp.last_layer on `device` in `dtype`."""

    def n_layers(self, inp: RunInput) -> int:
        return self.info.n_layers

    def n_heads(self, inp: RunInput) -> int:
        """Query heads per layer for this input (options or custom weights can set it)."""
        return inp.heads or self.info.n_heads

    def last_layer(self, inp: RunInput) -> int:
        """The last layer a run computes: inp.last_layer, checked, or the model's last."""
        n = self.n_layers(inp)
        if inp.last_layer is None:
            return n - 1
        if not 0 <= inp.last_layer < n:
            raise InputError("layer", f"got layer {inp.last_layer}: {self.info.name} has layers 0..{n - 1}")
        return inp.last_layer

    def token_pool(self) -> list[str] | None:
        """Tokens a random probe sequence may be drawn from; None: the model only runs its own fixed input."""
        return self.info.vocab

    def frame_tokens(self, words: list[str]) -> tuple[list[str], int]:
        """The tokens a run needs around `words` (special tokens, say), and the position of words[0]."""
        return words, 0

    def resolve_masks(self, inp: RunInput, seq_len: int) -> MaskSpec:
        if inp.masks is not None:
            return inp.masks
        default = self.info.default_masks or MaskSpec()
        if default.padding is not None and len(default.padding) != seq_len:
            default = MaskSpec(causal=default.causal, window=default.window)
        return default


def reject_head_counts(inp: RunInput, name: str, where: str) -> None:
    """`heads` and `kv_heads` say how custom weights split into heads: a model with its own weights has no use
    for them, and ignoring them would answer with another number of heads than the caller asked for."""
    for field_name in ("heads", "kv_heads"):
        if getattr(inp, field_name) is not None:
            raise InputError(field_name, f"{name} has its own heads ({where}): leave {field_name} out")


def whitespace_tokens(inp: RunInput) -> list[str]:
    if inp.tokens is not None:
        tokens = list(inp.tokens)
        field_name = "tokens"
    elif inp.text is not None:
        tokens = inp.text.split()
        field_name = "text"
    else:
        raise InputError("text", "give one of text, tokens or x")
    if not tokens:
        raise InputError(field_name, "got no tokens: give at least one")
    return tokens


@contextmanager
def timed(timings: dict[str, float], name: str, device: torch.device) -> Iterator[None]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timings[name] = (time.perf_counter() - start) * 1000.0


def single_layer_run(
    model: AttentionModel,
    inp: RunInput,
    tokens: list[str],
    x: Tensor,
    w: AttentionWeights,
    device: torch.device,
    dtype: torch.dtype,
) -> ModelRun:
    """Run one attention layer on x (S, D) with the input's masks: the common path of the toy models."""
    timings: dict[str, float] = {}
    if len(tokens) != x.shape[0]:
        raise InputError("tokens", f"got {len(tokens)} token labels for {x.shape[0]} rows of x: give one per row")
    masks = model.resolve_masks(inp, x.shape[0])
    eligible = eligibility(masks, x.shape[0], device)
    x = x.to(device=device, dtype=dtype)
    w = w.to(device, dtype)
    with timed(timings, "attention", device):
        out = attention(x, w, eligible, scale=inp.scale, all_masked=inp.all_masked)
    return ModelRun(
        model=model.info.name,
        tokens=tokens,
        masks=masks,
        eligible=eligible,
        layers=[LayerTrace(0, out, x[None], out.output)],
        config=layer_config(w, 1, out.scale_factor),
        timings_ms=timings,
    )


def layer_config(w: AttentionWeights, n_layers: int, factor: float) -> dict[str, Any]:
    return {
        "n_layers": n_layers,
        "n_heads": w.n_heads,
        "n_kv_heads": w.n_kv_heads,
        "d_model": w.d_model,
        "d_head": w.d_head,
        "d_v": w.d_v,
        "d_out": w.d_out,
        "has_w_o": w.W_O is not None,
        "scale_factor": factor,
    }
