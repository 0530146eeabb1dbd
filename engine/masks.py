"""Eligibility masks: rows are query positions, columns key positions, True = eligible.

Every mask reads the same way (True means "may attend"), and masks combine by exclusion:
a (query, key) pair is eligible only if every mask allows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import Tensor

from engine.errors import InputError


@dataclass(frozen=True)
class MaskSpec:
    causal: bool = False  # query q sees keys k <= q
    padding: Sequence[bool] | None = None  # one per position: True = real token, False = padding
    window: int | None = None  # query q sees keys with |q - k| < window
    blocked: Sequence[tuple[int, int]] = field(default_factory=tuple)  # single (query, key) cells off
    # the padding mask given by position (a client that has not tokenised yet cannot count flags); `with_length`
    # turns it into `padding` once the sequence is known
    padded: Sequence[int] | None = None

    def is_empty(self) -> bool:
        return (
            not self.causal
            and self.padding is None
            and self.padded is None
            and self.window is None
            and not self.blocked
        )

    def with_length(self, seq_len: int) -> MaskSpec:
        """`padded` positions as one padding flag per position, now that the sequence has `seq_len` positions."""
        if self.padded is None:
            return self
        if self.padding is not None:
            raise InputError("masks.padded", "padding and padded are the same mask: give one of them")
        flags = [True] * seq_len
        for i, p in enumerate(self.padded):
            if not 0 <= p < seq_len:
                raise InputError(
                    f"masks.padded[{i}]",
                    f"position {p} is outside the sequence of {seq_len} tokens: positions run 0..{seq_len - 1}",
                )
            flags[p] = False
        return replace(self, padding=tuple(flags), padded=None)

    def to_dict(self) -> dict[str, Any]:
        """The masks as plain JSON values: {causal, padding, window, blocked}."""
        return {
            "causal": self.causal,
            "padding": list(self.padding) if self.padding is not None else None,
            "window": self.window,
            "blocked": [list(c) for c in self.blocked],
        }


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


def within_window(eligible: Tensor, window: int | None) -> Tensor:
    """A layer's own window (Block.window) ANDed with the request's eligibility: (S_q, S_k) or (B, S_q, S_k), query
    i at position S_k - S_q + i (the last S_q positions: a whole pass, or the new positions after a KV cache),
    key j at position j; key j stays eligible only where |position(i) - j| < window. None: eligible as given (the
    same tensor, not a copy)."""
    if window is None:
        return eligible
    s_q, s_k = eligible.shape[-2], eligible.shape[-1]
    q = torch.arange(s_k - s_q, s_k, device=eligible.device)[:, None]
    k = torch.arange(s_k, device=eligible.device)[None, :]
    return eligible & ((q - k).abs() < window)


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
    _block(eligible, spec)
    return eligible


def _block(eligible: Tensor, spec: MaskSpec) -> None:
    if spec.blocked:
        q_idx = torch.tensor([q for q, _ in spec.blocked], dtype=torch.long, device=eligible.device)
        k_idx = torch.tensor([k for _, k in spec.blocked], dtype=torch.long, device=eligible.device)
        eligible[q_idx, k_idx] = False


def cross_eligibility(
    spec: MaskSpec,
    n_queries: int,
    n_keys: int,
    source_padding: Sequence[bool] | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """(S_q, S_k) for cross-attention: queries from one sequence, keys from another (the source).

    Only masks that mean something across two sequences apply: the source's padding (key columns) and
    single blocked cells. Causal order and a window compare positions within one sequence, so they are refused.
    """
    for name, on in (("causal", spec.causal), ("window", spec.window is not None)):
        if on:
            raise InputError(
                f"masks.{name}",
                f"queries and keys come from different sequences with a source, so {name} masking compares "
                "positions that do not line up: leave it out (a decoder's cross-attention sees the whole source)",
            )
    if spec.padding is not None:
        raise InputError("masks.padding", "with a source, padding marks key positions: give it as source.padding")
    _check_blocked(spec, n_queries, n_keys)
    eligible = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    if source_padding is not None:
        eligible &= torch.tensor(list(source_padding), dtype=torch.bool, device=device)[None, :]
    _block(eligible, spec)
    return eligible


REASONS = ("causal", "window", "padding", "blocked")


def reason_grids(spec: MaskSpec, seq_len: int) -> dict[str, Tensor]:
    """Why each (query, key) cell is masked: one (S, S) grid per mask in force, True = this mask excludes the cell.

    A cell is eligible exactly when no grid marks it, so a client can name every reason without knowing what
    causal, window, padding or blocked mean.
    """
    validate_masks(spec, seq_len)
    grids: dict[str, Tensor] = {}
    if spec.causal:
        grids["causal"] = ~causal_mask(seq_len)
    if spec.window is not None:
        grids["window"] = ~window_mask(seq_len, spec.window)
    if spec.padding is not None:
        grids["padding"] = ~padding_mask(spec.padding)
    if spec.blocked:
        blocked = torch.ones(seq_len, seq_len, dtype=torch.bool)
        _block(blocked, spec)
        grids["blocked"] = ~blocked
    return grids


def batch_reason_grids(spec: MaskSpec, real: Sequence[Sequence[bool]], seq_len: int) -> dict[str, Tensor]:
    """`reason_grids` for each item of a batch, whose padding is its own length's: one (B, S, S) grid per mask.

    An item without padding still has a padding grid (all False), so every item names the same masks.
    """
    items = [reason_grids(replace(spec, padding=tuple(r)), seq_len) for r in real]
    return {name: torch.stack([g[name] for g in items]) for name in items[0]} if items else {}


def cross_reason_grids(
    spec: MaskSpec, n_queries: int, n_keys: int, source_padding: Sequence[bool] | None = None
) -> dict[str, Tensor]:
    """Why each (query, source key) cell is masked in cross-attention: one (S_q, S_k) grid per mask in force, the
    source's padding (its key columns) and single blocked cells, the only masks `cross_eligibility` takes."""
    _check_blocked(spec, n_queries, n_keys)
    grids: dict[str, Tensor] = {}
    if source_padding is not None:
        real = torch.tensor(list(source_padding), dtype=torch.bool)
        grids["padding"] = ~real[None, :].expand(n_queries, n_keys)
    if spec.blocked:
        allowed = torch.ones(n_queries, n_keys, dtype=torch.bool)
        _block(allowed, spec)
        grids["blocked"] = ~allowed
    return grids


def pair_counts(spec: MaskSpec, seq_len: int) -> dict[str, int]:
    """How many (query, key) pairs each mask leaves eligible on its own, and all of them together.

    Causal over S positions leaves S (S + 1) / 2 (21 for 6); a window w leaves the pairs with |q - k| < w.
    """
    s = seq_len
    counts = {"total": s * s}
    if spec.causal:
        counts["causal"] = int(causal_mask(s).sum())
    if spec.window is not None:
        counts["window"] = int(window_mask(s, spec.window).sum())
    if spec.padding is not None:
        counts["padding"] = int(padding_mask(spec.padding).sum())
    if spec.blocked:
        counts["blocked"] = s * s - len(set(spec.blocked))
    counts["eligible"] = int(eligibility(spec, s).sum())
    return counts


def validate_masks(spec: MaskSpec, seq_len: int) -> None:
    if spec.padding is not None and len(spec.padding) != seq_len:
        raise InputError(
            "masks.padding",
            f"got {len(spec.padding)} padding flags for {seq_len} positions: give one per position",
        )
    if spec.window is not None and spec.window < 1:
        raise InputError("masks.window", f"got window {spec.window}: window must be >= 1")
    _check_blocked(spec, seq_len, seq_len)


def _check_blocked(spec: MaskSpec, n_queries: int, n_keys: int) -> None:
    for i, (q, k) in enumerate(spec.blocked):
        if not (0 <= q < n_queries and 0 <= k < n_keys):
            if n_queries == n_keys:
                where = f"query and key must be in 0..{n_queries - 1}"
            else:
                where = f"query must be in 0..{n_queries - 1} and key in 0..{n_keys - 1}"
            raise InputError(
                f"masks.blocked[{i}]", f"cell ({q}, {k}) is outside the {n_queries} x {n_keys} grid: {where}"
            )


def empty_rows(eligible: Tensor) -> list[int]:
    """Query rows with no eligible key (for an (S, S) or (..., S, S) matrix: any batch item)."""
    dead = ~eligible.any(dim=-1)  # (..., S)
    while dead.dim() > 1:
        dead = dead.any(dim=0)
    return [int(i) for i in dead.nonzero().flatten().tolist()]


def batch_policy(
    eligible: Tensor, real: tuple[tuple[bool, ...], ...] | None, policy: Literal["error", "zero"]
) -> Literal["error", "zero"]:
    """The empty-row policy a batch runs under: a padding position's query row, which no real token reads (padding
    is never a key), may be left without a key by a window (a short item's padding further than the window from
    its last real token); those rows take zero weights under "error" too, so only a real row is refused."""
    if real is None or policy != "error" or eligible.dim() != 3:
        return policy
    dead = ~eligible.any(dim=-1)  # (B, S)
    padded = ~torch.tensor(real, dtype=torch.bool, device=eligible.device)
    return "zero" if bool(dead.any()) and not bool((dead & ~padded).any()) else policy
