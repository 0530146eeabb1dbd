"""The normalisations a block may put around its attention and feed-forward, each a small frozen piece.

    LayerNorm   y = (x - mean(x)) / sqrt(var(x) + eps) * w + b          BERT, GPT-2, the induction model
    RMSNorm     y = x / sqrt(mean(x^2) + eps) * w                        LLaMA, Mistral
                y = x / sqrt(mean(x^2) + eps) * (1 + w)   with offset    Gemma stores w - 1

Means and variances are over the last axis (the residual width D). Each piece moves with `to(device, dtype)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


class Norm(Protocol):
    def __call__(self, x: Tensor) -> Tensor: ...

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Norm: ...


@dataclass(frozen=True)
class LayerNorm:
    weight: Tensor  # (D,)
    bias: Tensor  # (D,)
    eps: float = 1e-5

    def __call__(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> LayerNorm:
        return LayerNorm(self.weight.to(device=device, dtype=dtype), self.bias.to(device=device, dtype=dtype), self.eps)


@dataclass(frozen=True)
class RMSNorm:
    weight: Tensor  # (D,)
    eps: float = 1e-6
    offset: bool = False  # scale by (1 + weight), as Gemma stores it

    def __call__(self, x: Tensor) -> Tensor:
        scale = self.weight + 1 if self.offset else self.weight
        return F.rms_norm(x, (x.shape[-1],), scale, self.eps)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> RMSNorm:
        return RMSNorm(self.weight.to(device=device, dtype=dtype), self.eps, self.offset)
