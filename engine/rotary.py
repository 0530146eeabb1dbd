"""Rotary position embeddings: queries and keys turned by an angle that grows with their position.

For a head of width d_head, the first rot_dim dims rotate (all of them unless the model rotates part: GPT-NeoX's
rotary_pct, partial_rotary_factor), the rest pass through. The rotating dims pair up half against half (Hugging
Face's "rotate_half" layout: dim i with dim i + rot_dim / 2), each pair turned by position * theta^(-2i / rot_dim):

    inv_freq[i] = theta ** (-2i / rot_dim)                   i = 0 .. rot_dim / 2 - 1
    angle[p, i] = p * inv_freq[i]                            p = offset + 0 .. S - 1
    cos, sin    = a cos(angle), a sin(angle), each repeated twice along the dims: (S, rot_dim)
    rotated     = t_rot * cos + rotate_half(t_rot) * sin     rotate_half(a | b) = (-b | a)
    out         = rotated | t_pass

The score q_p . k_s then depends on the two positions only through p - s. `offset` is where the sequence starts:
0 for a whole pass, the KV cache's length when decoding, so a decoded position rotates as it would in the full
pass. Angles are worked out in float32 (float64 for a float64 run), as Hugging Face computes them, then cast.

A scaling (config rope_parameters.rope_type, as transformers' modeling_rope_utils.py computes each) changes
inv_freq, and yarn and longrope set the attention factor a (1 otherwise), which multiplies cos and sin, so every
rotated query and key by a and every score by a^2. With r = rot_dim, L = original_max_position_embeddings,
P = max_position_embeddings and n = the run's length (below):

    linear    inv_freq / factor                                  positions slowed `factor` times
    llama3    wavelen = 2 pi / inv_freq; kept where wavelen < L / high_freq_factor, inv_freq / factor where
              wavelen > L / low_freq_factor, between them (1 - s) inv_freq / factor + s inv_freq with
              s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    dynamic   (NTK) the base grows with the length past P:
              theta' = theta (factor max(n, P) / P - (factor - 1)) ^ (r / (r - 2)),  inv_freq from theta'
    yarn      each frequency between extrapolation e_i = inv_freq[i] and interpolation e_i / factor:
              inv_freq[i] = e_i / factor * ramp_i + e_i (1 - ramp_i),
              ramp_i = clamp((i - low) / (high - low), 0, 1), low = max(d(beta_fast), 0), high = min(d(beta_slow),
              r - 1), d(b) = r ln(L / (2 pi b)) / (2 ln theta) (low floored, high ceiled when truncate);
              a = attention_factor, else m(factor, mscale) / m(factor, mscale_all_dim) where both are given, else
              m(factor, 1), with m(s, k) = 0.1 k ln(s) + 1 (1 where s <= 1); factor defaults to P / L
    longrope  (Phi-3) inv_freq[i] = 1 / (f_i theta^(2i / r)), f = long_factor where n > L, else short_factor;
              a = attention_factor, else sqrt(1 + ln(factor) / ln L) (1 where factor <= 1), factor P / L unless given

The run's length n is the pass's last position + 1 (offset + S), as transformers reads it from the position ids,
unless the Rotary is pinned to its run's length (`at_length`): decoding an input of n positions one at a time then
rotates every step as the pass over all n does, so each step is that pass's row. Only dynamic and longrope read n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor


def rotate_half(t: Tensor) -> Tensor:
    """(..., r) -> (..., r): the second half negated, moved before the first."""
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def inverse_frequencies(theta: float | Tensor, rot_dim: int, work: torch.dtype, device: torch.device) -> Tensor:
    """(rot_dim / 2,) theta ** (-2i / rot_dim): the unscaled frequencies."""
    i = torch.arange(0, rot_dim, 2, device=device, dtype=torch.int64).to(work)
    return 1.0 / (theta ** (i / rot_dim))


@dataclass(frozen=True)
class Linear:
    """rope_type "linear": every frequency divided by `factor`."""

    factor: float

    def frequencies(
        self, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device
    ) -> tuple[Tensor, float]:
        return inverse_frequencies(theta, rot_dim, work, device) / self.factor, 1.0


@dataclass(frozen=True)
class Llama3:
    """rope_type "llama3": low frequencies divided by `factor`, high ones kept, a smooth ramp between them."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original: int  # L, original_max_position_embeddings

    def frequencies(
        self, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device
    ) -> tuple[Tensor, float]:
        inv_freq = inverse_frequencies(theta, rot_dim, work, device)
        low_wavelen = self.original / self.low_freq_factor
        high_wavelen = self.original / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / self.factor, inv_freq)
        s = (self.original / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        smoothed = (1 - s) * scaled / self.factor + s * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled), 1.0


@dataclass(frozen=True)
class Dynamic:
    """rope_type "dynamic" (NTK): theta grows with the run's length once it passes P."""

    factor: float
    max_positions: int  # P, max_position_embeddings

    def frequencies(
        self, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device
    ) -> tuple[Tensor, float]:
        p, power = self.max_positions, rot_dim / (rot_dim - 2)
        if length <= p:  # transformers keeps the base it made at P, in Python floats
            base: float | Tensor = theta * ((self.factor * p / p) - (self.factor - 1)) ** power
        else:  # and past P makes it from the length, a tensor
            n = torch.tensor(float(length), dtype=work, device=device)
            base = theta * ((self.factor * n / p) - (self.factor - 1)) ** power
        return inverse_frequencies(base, rot_dim, work, device), 1.0


def mscale(scale: float, k: float = 1.0) -> float:
    """yarn's m(s, k) = 0.1 k ln(s) + 1, 1 where s <= 1."""
    return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0


def yarn_attention_factor(factor: float, m: float | None, m_all_dim: float | None) -> float:
    """yarn's default attention factor, from `factor`, mscale and mscale_all_dim."""
    if m and m_all_dim:
        return float(mscale(factor, m) / mscale(factor, m_all_dim))
    return mscale(factor)


def longrope_attention_factor(factor: float, original: int) -> float:
    """longrope's default attention factor, sqrt(1 + ln(factor) / ln L), 1 where factor <= 1."""
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


@dataclass(frozen=True)
class Yarn:
    """rope_type "yarn": extrapolated high frequencies, interpolated low ones, a ramp between, and a factor a."""

    factor: float
    original: int  # L, original_max_position_embeddings
    attention_factor: float  # a: the config's, else yarn_attention_factor
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True

    def correction_range(self, theta: float, rot_dim: int) -> tuple[float, float]:
        """(low, high): the dims where beta_fast and beta_slow rotations fit in L positions."""

        def dim(rotations: float) -> float:
            return (rot_dim * math.log(self.original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low, high = dim(self.beta_fast), dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, rot_dim - 1)

    def frequencies(
        self, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device
    ) -> tuple[Tensor, float]:
        pos_freqs = theta ** (torch.arange(0, rot_dim, 2, device=device).to(work) / rot_dim)
        extrapolation = 1.0 / pos_freqs
        interpolation = 1.0 / (self.factor * pos_freqs)
        low, high = self.correction_range(theta, rot_dim)
        if low == high:
            high += 0.001  # transformers' guard against a zero-width ramp
        ramp = ((torch.arange(rot_dim // 2, device=device, dtype=work) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp  # the share of extrapolation
        return interpolation * (1 - keep) + extrapolation * keep, self.attention_factor


@dataclass(frozen=True)
class LongRope:
    """rope_type "longrope" (Phi-3): each frequency divided by its own factor, the long ones past L."""

    short_factor: tuple[float, ...]  # (rot_dim / 2,)
    long_factor: tuple[float, ...]  # (rot_dim / 2,)
    original: int  # L, original_max_position_embeddings
    attention_factor: float  # a: the config's, else longrope_attention_factor

    def frequencies(
        self, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device
    ) -> tuple[Tensor, float]:
        f = self.long_factor if length > self.original else self.short_factor
        ext = torch.tensor(f, dtype=work, device=device)
        shape = torch.arange(0, rot_dim, 2, dtype=torch.int64, device=device).to(work) / rot_dim
        return 1.0 / (ext * theta**shape), self.attention_factor


Scaling = Linear | Llama3 | Dynamic | Yarn | LongRope


@dataclass(frozen=True)
class Rotary:
    rot_dim: int  # the leading dims of each head that rotate (even); the rest pass through
    theta: float = 10000.0  # base of the frequencies (config rope_theta)
    scaling: Scaling | None = None  # a rope_type other than "default"
    length: int | None = None  # the run's length n where a pass is part of it (decoding); None: the pass's end

    def __post_init__(self) -> None:
        assert self.rot_dim > 0 and self.rot_dim % 2 == 0, self.rot_dim

    def at_length(self, length: int) -> Rotary:
        """This rotary for a run of `length` positions, whichever part of it a pass covers."""
        return replace(self, length=length)

    def describe(self) -> str:
        """In words, for a model's data flow: "rotary on 16 dims (theta 500000, llama3 scaling)"."""
        kind = "" if self.scaling is None else f", {type(self.scaling).__name__.lower()} scaling"
        return f"rotary on {self.rot_dim} dims (theta {self.theta:g}{kind})"

    def cos_sin(self, positions: int, offset: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin of every angle times the attention factor, (S, rot_dim) each, for positions offset ..
        offset + S - 1."""
        work = torch.float64 if dtype == torch.float64 else torch.float32
        n = offset + positions if self.length is None else max(self.length, offset + positions)
        if self.scaling is None:
            inv_freq, a = inverse_frequencies(self.theta, self.rot_dim, work, device), 1.0
        else:
            inv_freq, a = self.scaling.frequencies(self.theta, self.rot_dim, n, work, device)
        p = torch.arange(offset, offset + positions, device=device, dtype=work)
        angle = p[:, None] * inv_freq[None, :]  # (S, rot_dim / 2)
        both = torch.cat((angle, angle), dim=-1)  # (S, rot_dim)
        return (both.cos() * a).to(dtype), (both.sin() * a).to(dtype)

    def __call__(self, t: Tensor, offset: int = 0) -> Tensor:
        """(B, n, S, d_head) queries or keys at positions offset .. offset + S - 1 -> rotated, same shape."""
        cos, sin = self.cos_sin(t.shape[-2], offset, t.device, t.dtype)
        r = self.rot_dim
        turned = t[..., :r] * cos + rotate_half(t[..., :r]) * sin
        return turned if r == t.shape[-1] else torch.cat((turned, t[..., r:]), dim=-1)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Rotary:
        return self  # no tensors: the angles are made for each pass on its device
