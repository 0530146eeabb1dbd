"""Checks the audit reads off a run's attention weights themselves, not off the code that made them.

The softmax axis, measured. For every layer, head and batch item, with weights w (S queries x S_k keys):

    row sums     r_q = sum_k w[q, k]   over every query row q that holds some weight
    column sums  c_k = sum_q w[q, k]   over every key column k that holds some weight
    row_sum_error     = max_q |r_q - 1|,  column_sum_error = max_k |c_k - 1|  (None when no row, column holds any)
    measured          = "keys"    when every such row sums to 1 within AXIS_TOLERANCE[dtype],
                        "queries" when not, but every such column does,
                        "neither" when neither does

Only lines that hold weight are summed, under every mask and each classic bug: a row with no eligible key is all
zeros (the all-masked policy "zero"), a key column no query may see is all zeros under softmax_over_queries, and
under flipped_mask the rows the flipped mask leaves empty are zeros too. A line of zeros says no softmax ran along it,
not which axis one ran along (weight on a masked key, or a row with a key and no weight, is what max_masked_weight and
max_row_sum_error report). Under a causal mask a softmax over keys makes every row sum to 1 and the columns not
(key 0 collects a weight from every query), while a softmax over queries makes every column sum to 1 (key k is seen
by queries k..S-1) and the rows not: so the two are told apart under causal, window, padding and blocked masks alike.
norm_over_sequence normalises over keys and reads "keys": its leak is the perturbation's to find. A matrix whose rows
and columns both sum to 1 (one position, or uniform weights with no mask) is a softmax over keys whatever made it, and
reads "keys".

Repeated rows. Within one head (and batch item), two real query positions whose weight rows are identical, equal
value for value: identical tokens with nothing to tell them apart, a head that puts all its weight on one key, or a
bug. `count` is the rows equal to an earlier row of their head (a group of k equal rows counts k - 1); `examples`
names at most REPEATED_EXAMPLES pairs. Rows that hold no weight (no eligible key) are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

# |sum - 1| allowed for a row or column to count as summing to 1: each weight is rounded to its dtype, relative error
# at most eps / 2, so a row's sum is off by at most eps / 2 (summed here in float64); float32's softmax itself adds
# about sqrt(S) x 6e-8, far under 1e-4. A wrong axis is off by much more (a whole weight or more).
AXIS_TOLERANCE_FLOOR = 1e-4
REPEATED_EXAMPLES = 8  # pairs of repeated rows named in the audit; the count covers every one


def axis_tolerance(dtype: torch.dtype) -> float:
    return max(AXIS_TOLERANCE_FLOOR, torch.finfo(dtype).eps) if dtype.is_floating_point else AXIS_TOLERANCE_FLOOR


def softmax_axis(layers: Sequence[Tensor]) -> dict[str, Any]:
    """The measured axis over every layer's weights (B, H, S, S_k): {declared, measured, row_sum_error,
    column_sum_error, tolerance} (see the module's docstring)."""
    row_error: float | None = None
    column_error: float | None = None
    tolerance = AXIS_TOLERANCE_FLOOR
    for w in layers:
        tolerance = max(tolerance, axis_tolerance(w.dtype))
        held = w != 0
        rows = w.sum(dim=-1, dtype=torch.float64)  # (B, H, S)
        columns = w.sum(dim=-2, dtype=torch.float64)  # (B, H, S_k)
        row_error = _worst(row_error, (rows - 1).abs(), held.any(dim=-1))
        column_error = _worst(column_error, (columns - 1).abs(), held.any(dim=-2))
    if row_error is not None and row_error <= tolerance:
        measured = "keys"
    elif column_error is not None and column_error <= tolerance:
        measured = "queries"
    else:
        measured = "neither"
    return {
        "declared": "keys",
        "measured": measured,
        "row_sum_error": row_error,
        "column_sum_error": column_error,
        "tolerance": tolerance,
    }


def _worst(worst: float | None, errors: Tensor, held: Tensor) -> float | None:
    if not bool(held.any()):
        return worst
    here = float(errors.masked_select(held).max())
    return here if worst is None else max(worst, here)


def repeated_rows(layers: Sequence[Tensor], real: Tensor | None = None, *, batch: bool = False) -> dict[str, Any]:
    """Identical weight rows within a head, over every layer's weights (B, H, S, S_k); `real` (B, S): False at a
    padding query, whose row is not counted. {count, heads, examples: [{layer, head, item, queries}]}; `item` is
    None unless `batch`."""
    count, heads = 0, 0
    examples: list[dict[str, Any]] = []
    for layer, w in enumerate(layers):
        s, s_k = w.shape[-2:]
        if s < 2 or s_k == 0:
            continue
        counted = w.ne(0).any(dim=-1)  # (B, H, S): rows that hold weight
        if real is not None:
            counted &= real[:, None, :].to(counted.device)
        # a fingerprint per row, sorted: identical rows end up side by side; uncounted rows get NaN, which equals
        # nothing
        prints = fingerprints(w).masked_fill(~counted[..., None], float("nan"))  # (B, H, S, 2)
        order = torch.argsort(prints[..., 0], dim=-1, stable=True)  # (B, H, S)
        ordered = torch.gather(prints, 2, order[..., None].expand(-1, -1, -1, 2))
        bi, hi, i = (ordered[:, :, 1:] == ordered[:, :, :-1]).all(dim=-1).nonzero().unbind(dim=-1)
        qa, qb = order[bi, hi, i], order[bi, hi, i + 1]
        equal = torch.cat(
            [(w[bi[c], hi[c], qa[c]] == w[bi[c], hi[c], qb[c]]).all(dim=-1) for c in _chunks(len(qa))]
        )  # a fingerprint shared by two different rows is not a repeat
        count += int(equal.sum())
        heads += len({(b, h) for b, h in zip(bi[equal].tolist(), hi[equal].tolist(), strict=True)})
        for b, h, x, y in zip(*(t[equal][:REPEATED_EXAMPLES].tolist() for t in (bi, hi, qa, qb)), strict=True):
            if len(examples) < REPEATED_EXAMPLES:
                examples.append({"layer": layer, "head": h, "item": b if batch else None, "queries": sorted([x, y])})
    return {"count": count, "heads": heads, "examples": examples}


def fingerprints(w: Tensor, rows: int = 4096) -> Tensor:
    """(..., S_k) -> (..., 2): each row's sums against two seeded random vectors, in float64, `rows` rows at a time
    (never a float64 copy of the whole layer). An elementwise product summed along the row, not a matrix product:
    every row is reduced by the same code in the same order, so identical rows get identical fingerprints."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    probe = torch.randn(2, w.shape[-1], generator=gen, dtype=torch.float64).to(w.device)
    flat = w.reshape(-1, w.shape[-1])
    out = torch.empty(flat.shape[0], 2, dtype=torch.float64, device=w.device)
    for c in _chunks(flat.shape[0], rows):
        part = flat[c].to(torch.float64)
        for j in range(2):
            out[c, j] = (part * probe[j]).sum(dim=-1)
    return out.reshape(*w.shape[:-1], 2)


def _chunks(n: int, size: int = 4096) -> list[slice]:
    """Slices of at most `size` pairs: two rows per pair are gathered at a time, never every pair's at once."""
    return [slice(c, c + size) for c in range(0, n, size)] or [slice(0, 0)]
