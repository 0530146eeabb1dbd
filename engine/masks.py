"""Eligibility masks: rows are query positions, columns key positions, True = eligible.

Every mask reads the same way (True means "may attend"), and masks combine by exclusion:
a (query, key) pair is eligible only if every mask allows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.errors import InputError


@dataclass(frozen=True)
class MaskSpec:
    causal: bool = False  # query q sees keys k <= q
    padding: Sequence[bool] | None = None  # one per position: True = real token, False = padding
    window: int | None = None  # query q sees keys with |q - k| < window
    blocked: Sequence[tuple[int, int]] = field(default_factory=tuple)  # single (query, key) cells off

    def is_empty(self) -> bool:
        return not self.causal and self.padding is None and self.window is None and not self.blocked


def causal_mask(seq_len: int, device: torch.device | None = None) -> Tensor:
    """(S, S): key k is eligible for query q when k <= q."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def window_mask(seq_len: int, window: int, device: torch.device | None = None) -> Tensor:
    """(S, S): key k is eligible for query q when |q - k| < window."""
    pos = torch.arange(seq_len, device=device)
    # |q - k| <= S - 1, so any window past S allows every pair; capping it keeps a huge int out of int64
    return (pos[:, None] - pos[None, :]).abs() < min(window, seq_len)


def padding_mask(padding: Sequence[bool], device: torch.device | None = None) -> Tensor:
    """(S, S): every query may attend only to keys that are real tokens."""
    real = torch.tensor(list(padding), dtype=torch.bool, device=device)
    return real[None, :].expand(len(padding), len(padding))


def eligibility(spec: MaskSpec, seq_len: int, device: torch.device | None = None) -> Tensor:
    """Combine every mask in `spec` into one (S, S) boolean matrix, validating it first."""
    validate_masks(spec, seq_len)
    eligible = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    if spec.causal:
        eligible &= causal_mask(seq_len, device)
    if spec.window is not None:
        eligible &= window_mask(seq_len, spec.window, device)
    if spec.padding is not None:
        eligible &= padding_mask(spec.padding, device)
    if spec.blocked:
        q_idx = torch.tensor([q for q, _ in spec.blocked], dtype=torch.long, device=device)
        k_idx = torch.tensor([k for _, k in spec.blocked], dtype=torch.long, device=device)
        eligible[q_idx, k_idx] = False
    return eligible


def validate_masks(spec: MaskSpec, seq_len: int) -> None:
    if spec.padding is not None and len(spec.padding) != seq_len:
        raise InputError(
            "masks.padding",
            f"got {len(spec.padding)} padding flags for {seq_len} positions: give one per position",
        )
    if spec.window is not None and spec.window < 1:
        raise InputError("masks.window", f"got window {spec.window}: window must be >= 1")
    for i, (q, k) in enumerate(spec.blocked):
        if not (0 <= q < seq_len and 0 <= k < seq_len):
            raise InputError(
                f"masks.blocked[{i}]",
                f"cell ({q}, {k}) is outside the {seq_len} x {seq_len} grid: query and key must be in 0..{seq_len - 1}",
            )


def empty_rows(eligible: Tensor) -> list[int]:
    """Query rows with no eligible key (for an (S, S) or (..., S, S) matrix: any batch item)."""
    dead = ~eligible.any(dim=-1)  # (..., S)
    while dead.dim() > 1:
        dead = dead.any(dim=0)
    return [int(i) for i in dead.nonzero().flatten().tolist()]
