"""The feed-forward a block may run after attention, each a small frozen piece.

    FeedForward         act(x W_in + b_in) W_out + b_out                           BERT, GPT-2 (gelu)
    GatedFeedForward    (act(x W_gate + b_gate) * (x W_in + b_in)) W_out + b_out   LLaMA (silu: SwiGLU), Gemma (GeGLU)

act is one of ACTIVATIONS: gelu (exact, erf), gelu_tanh (the tanh approximation), silu (x sigmoid(x)), relu.
Biases are optional (None: no bias). x is (B, S, D); the hidden width is d_mlp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Activation = Literal["gelu", "gelu_tanh", "silu", "relu"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


def _linear(x: Tensor, W: Tensor, b: Tensor | None) -> Tensor:
    return x @ W if b is None else x @ W + b


def _moved(piece: FeedForward | GatedFeedForward, device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    """Every tensor field of `piece` on `device` in `dtype`, by name."""
    out: dict[str, Any] = {}
    for f in fields(piece):
        t = getattr(piece, f.name)
        if isinstance(t, Tensor):
            out[f.name] = t.to(device=device, dtype=dtype)
    return out


@dataclass(frozen=True)
class FeedForward:
    """act(x W_in + b_in) W_out + b_out; the exact (erf) gelu unless `act` says otherwise."""

    W_in: Tensor  # (D, d_mlp)
    b_in: Tensor | None  # (d_mlp,)
    W_out: Tensor  # (d_mlp, D)
    b_out: Tensor | None  # (D,)
    act: Activation = "gelu"

    def __post_init__(self) -> None:
        assert self.act in ACTIVATIONS, self.act

    def __call__(self, x: Tensor) -> Tensor:
        return _linear(ACTIVATIONS[self.act](_linear(x, self.W_in, self.b_in)), self.W_out, self.b_out)

    @property
    def d_mlp(self) -> int:
        return self.W_in.shape[1]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> FeedForward:
        return replace(self, **_moved(self, device, dtype))


@dataclass(frozen=True)
class GatedFeedForward:
    """(act(x W_gate + b_gate) * (x W_in + b_in)) W_out + b_out: a GLU; silu makes it SwiGLU, gelu GeGLU."""

    W_gate: Tensor  # (D, d_mlp)
    W_in: Tensor  # (D, d_mlp)
    W_out: Tensor  # (d_mlp, D)
    b_gate: Tensor | None = None  # (d_mlp,)
    b_in: Tensor | None = None  # (d_mlp,)
    b_out: Tensor | None = None  # (D,)
    act: Activation = "silu"

    def __post_init__(self) -> None:
        assert self.act in ACTIVATIONS, self.act

    def __call__(self, x: Tensor) -> Tensor:
        gate = ACTIVATIONS[self.act](_linear(x, self.W_gate, self.b_gate))
        return _linear(gate * _linear(x, self.W_in, self.b_in), self.W_out, self.b_out)

    @property
    def d_mlp(self) -> int:
        return self.W_in.shape[1]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> GatedFeedForward:
        return replace(self, **_moved(self, device, dtype))


MLP = FeedForward | GatedFeedForward
