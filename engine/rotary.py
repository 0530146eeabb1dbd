"""Rotary position embeddings: queries and keys turned by an angle that grows with their position.

For a head of width d_head, the first rot_dim dims rotate (all of them unless the model rotates part: GPT-NeoX's
rotary_pct, partial_rotary_factor), the rest pass through. The rotating dims pair up half against half (Hugging
Face's "rotate_half" layout: dim i with dim i + rot_dim / 2), each pair turned by position * theta^(-2i / rot_dim):

    inv_freq[i] = theta ** (-2i / rot_dim)                   i = 0 .. rot_dim / 2 - 1
    angle[p, i] = p * inv_freq[i]                            p = offset + 0 .. S - 1
    cos, sin    = cos(angle), sin(angle), each repeated twice along the dims: (S, rot_dim)
    rotated     = t_rot * cos + rotate_half(t_rot) * sin     rotate_half(a | b) = (-b | a)
    out         = rotated | t_pass

The score q_p . k_s then depends on the two positions only through p - s. `offset` is where the sequence starts:
0 for a whole pass, the KV cache's length when decoding, so a decoded position rotates as it would in the full
pass. Angles are worked out in float32 (float64 for a float64 run), as Hugging Face computes them, then cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def rotate_half(t: Tensor) -> Tensor:
    """(..., r) -> (..., r): the second half negated, moved before the first."""
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


@dataclass(frozen=True)
class Rotary:
    rot_dim: int  # the leading dims of each head that rotate (even); the rest pass through
    theta: float = 10000.0  # base of the frequencies (config rope_theta)

    def __post_init__(self) -> None:
        assert self.rot_dim > 0 and self.rot_dim % 2 == 0, self.rot_dim

    def cos_sin(self, positions: int, offset: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin of every angle, (S, rot_dim) each, for positions offset .. offset + S - 1."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        i = torch.arange(0, self.rot_dim, 2, device=device, dtype=torch.int64).to(work)
        inv_freq = 1.0 / (self.theta ** (i / self.rot_dim))  # (rot_dim / 2,)
        p = torch.arange(offset, offset + positions, device=device, dtype=work)
        angle = p[:, None] * inv_freq[None, :]  # (S, rot_dim / 2)
        both = torch.cat((angle, angle), dim=-1)  # (S, rot_dim)
        return both.cos().to(dtype), both.sin().to(dtype)

    def __call__(self, t: Tensor, offset: int = 0) -> Tensor:
        """(B, n, S, d_head) queries or keys at positions offset .. offset + S - 1 -> rotated, same shape."""
        cos, sin = self.cos_sin(t.shape[-2], offset, t.device, t.dtype)
        r = self.rot_dim
        turned = t[..., :r] * cos + rotate_half(t[..., :r]) * sin
        return turned if r == t.shape[-1] else torch.cat((turned, t[..., r:]), dim=-1)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Rotary:
        return self  # no tensors: the angles are made for each pass on its device
