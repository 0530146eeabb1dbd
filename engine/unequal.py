"""Heads of unequal widths (custom weights with `head_widths`): the chapter's "other designs use unequal widths".

Head h reads columns [c_h, c_h + d_k^h) of w_q and w_k, where the widths d_k^h sum to their column count, and
scores with its own factor 1 / sqrt(d_k^h). The engine keeps heads as (H, D, d) tensors, so each head is padded with
zero columns to the widest: a zero column adds nothing to any dot product Q K^T, and the scale reads each head's
real width, never the padded one.

Values: w_v is split by the same widths when it has as many columns as w_q (each head's d_v = its d_k), else into
equal widths (columns / heads). Contexts are padded likewise; the concatenation drops the padding, so it is the
concatenation of the unequal contexts, and w_o's rows (sum of the value widths) are padded with zero rows per head,
so output = concat W_O exactly.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.errors import InputError
from engine.weights import AttentionWeights


def check_widths(widths: tuple[int, ...], n_heads: int, n_kv_heads: int | None, columns: int) -> None:
    """A 422 naming the field: one positive width per head, summing to w_q's columns; K/V groups only trivially."""
    if len(widths) != n_heads:
        raise InputError("head_widths", f"got {len(widths)} widths for {n_heads} heads: give one per head")
    for i, width in enumerate(widths):
        if width < 1:
            raise InputError(f"head_widths[{i}]", f"got {width}: a head's width is at least 1")
    if sum(widths) != columns:
        raise InputError(
            "head_widths", f"the widths sum to {sum(widths)} but w_q has {columns} columns: they must sum to it"
        )
    if n_kv_heads is not None and n_kv_heads != n_heads:
        raise InputError(
            "kv_heads", f"got {n_kv_heads} K/V groups: heads of unequal widths each need their own K and V"
        )


def padded(w: Tensor, widths: tuple[int, ...], rows_per_head: bool = False) -> Tensor:
    """(D, sum widths) -> (H, D, max width), each head's columns zero-padded; rows_per_head: (sum widths, d_out)
    -> (H, max width, d_out) for w_o, each head's rows zero-padded."""
    top = max(widths)
    out = w.new_zeros((len(widths), top, w.shape[1]) if rows_per_head else (len(widths), w.shape[0], top))
    start = 0
    for h, width in enumerate(widths):
        if rows_per_head:
            out[h, :width] = w[start : start + width]
        else:
            out[h, :, :width] = w[:, start : start + width]
        start += width
    return out


def value_widths(widths: tuple[int, ...], w_v: Tensor, columns_q: int) -> tuple[int, ...]:
    """The per-head value widths: head_widths when w_v has w_q's columns, else equal ones."""
    if w_v.shape[1] == columns_q:
        return widths
    if w_v.shape[1] % len(widths):
        raise InputError(
            "weights.w_v",
            f"got {w_v.shape[1]} columns: with head_widths, w_v needs {columns_q} (the same widths as w_q) or a "
            f"multiple of {len(widths)} heads (equal value widths)",
        )
    return (w_v.shape[1] // len(widths),) * len(widths)


def head_factors(w: AttentionWeights, scale: bool, like: Tensor) -> Tensor | None:
    """(H,) each head's score factor 1 / sqrt(d_k^h) (1 without scaling), or None where heads are of one width."""
    if w.head_widths is None:
        return None
    factors = [1.0 / math.sqrt(d) if scale else 1.0 for d in w.head_widths]
    return torch.tensor(factors, dtype=like.dtype, device=like.device)


def concatenation(contexts: Tensor, value_widths: tuple[int, ...]) -> Tensor:
    """contexts (B, H, S, max d_v), padded -> (B, S, sum d_v): each head's real columns, head after head."""
    return torch.cat([contexts[:, h, :, :width] for h, width in enumerate(value_widths)], dim=-1)


def split(
    w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor | None, n_heads: int, g: int | None, widths: tuple[int, ...]
) -> AttentionWeights:
    """engine.attention.from_concatenated for heads of unequal widths: each head zero-padded to the widest."""
    check_widths(widths, n_heads, g, w_q.shape[1])
    if w_k.shape[1] != w_q.shape[1]:
        raise InputError("weights.w_k", f"got {w_k.shape[1]} columns: need the sum of head_widths, {w_q.shape[1]}")
    values = value_widths(widths, w_v, w_q.shape[1])
    if w_o is not None and (w_o.dim() != 2 or w_o.shape[0] != sum(values)):
        need = f"(sum of value widths, d_out) = ({sum(values)}, d_out)"
        raise InputError("weights.w_o", f"got shape {tuple(w_o.shape)}: need {need}")
    W_O = None if w_o is None else padded(w_o, values, rows_per_head=True)
    Q, K, V = (padded(m, ws) for m, ws in ((w_q, widths), (w_k, widths), (w_v, values)))
    return AttentionWeights(W_Q=Q, W_K=K, W_V=V, W_O=W_O, head_widths=widths, value_widths=values)
