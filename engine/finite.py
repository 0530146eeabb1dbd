"""Overflow: whether a step of attention stayed finite, and which input or weight to name when it did not.

`attention` checks only its scores and output (cheaply: a sum, or a norm bound for long sequences); when one is
not finite, `refuse_first_non_finite` walks the steps in data-flow order and names the first that overflowed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.errors import NonFiniteError


def refuse_first_non_finite(steps: list[tuple[Tensor, str, str]]) -> None:
    """Raise for the first of (tensor, what, field) in data-flow order that is not finite.

    `attention` checks only the scores and the output, and comes here when one of them is not finite: every
    element of Q and K enters every row and column of the scores, and every element of V enters every output row
    (a weight of 0 times inf is NaN), so a non-finite Q, K or V shows there. This names the step where it began,
    as checking each step in turn would have.
    """
    for t, what, field in steps:
        require_finite(t, what, field)
    raise AssertionError("refuse_first_non_finite found every step finite")


def require_finite(t: Tensor, what: str, field: str = "x") -> None:
    """A 422 naming `field` (the input or weight that feeds this step) when `t` overflowed its dtype."""
    if not is_finite(t):
        raise NonFiniteError(
            field,
            f"the {what} overflowed {str(t.dtype).removeprefix('torch.')} (largest magnitude "
            f"{torch.finfo(t.dtype).max:.3g}): reduce the magnitude of the inputs or weights",
        )


def is_finite(t: Tensor) -> bool:
    """Every element finite. A sum is inf or NaN as soon as one element is, and costs one pass with no temporary
    (isfinite(t).all() makes four); only when the sum itself overflowed are the elements looked at one by one."""
    total = t.sum(dtype=torch.promote_types(t.dtype, torch.float32))
    return math.isfinite(total.item()) or bool(torch.isfinite(t).all())


def cannot_overflow(q: Tensor, k: Tensor, factor: float) -> bool:
    """True when no score factor * q_i . k_j of q (..., S, d) and k (..., S_k, d) can reach the dtype's largest
    value; decided before the scores exist, while Q and K are still in the cache.

    |q_i . k_j| <= |q_i| |k_j| (Cauchy-Schwarz), and so is every partial sum of the product; a margin of 4
    covers rounding. Reading the norms costs O(S d) where checking every score reads S x S_k, so for long
    sequences this is tried first and the scores are read only when the bound is too large (or not finite).
    Short sequences skip it: there the full check is the cheaper one.
    """
    if q.shape[-2] * k.shape[-2] < 4 * (q.shape[-2] + k.shape[-2]) * q.shape[-1]:
        return False
    acc = torch.promote_types(q.dtype, torch.float32)
    # float32 rows take no dtype argument: at 512 tokens the norms measured 143 -> 123 us without it
    norms = [torch.linalg.vector_norm(t, dim=-1, dtype=None if t.dtype == acc else acc).amax().item() for t in (q, k)]
    return norms[0] * norms[1] * max(factor, 1.0) < torch.finfo(q.dtype).max / 4
