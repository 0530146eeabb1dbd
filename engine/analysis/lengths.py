"""Dense attention against blockwise attention at several lengths, measured here: the chapter's flash lesson.

For one layer's random Q, K, V of a shape (H query heads, G K/V groups, d_head, batch 1) at each length S:

    dense       scores = scale * Q K^T (H x S x S, held whole, as engine/attention.py holds it), the softmax over
                keys (H x S x S again), then weights x V
    blockwise   engine.blockwise.flash: the online softmax over blocks of `block` keys (a running maximum m and sum
                l per row, rescaled by exp(m_old - m_new)), no tensor larger than H x block x block

Both are measured by engine.measure (peak bytes above what was allocated before, and the time of one run), and
their contexts compared (the largest absolute difference). The prediction beside them is the formula the cost
panel prints for one layer's scores, H x S^2 x bytes(dtype), and the blockwise pass's one block of scores,
H x min(S, block)^2 x bytes. Dense peak bytes grow with S^2; blockwise ones with S (its contexts and normalisers).

How much may be measured is the caller's limit: `lengths_flops` counts the work and `largest_scores` the dense
pass's score elements at the longest length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from engine import stop
from engine.analysis.cost import CostQuery, measured_dtype, validate
from engine.attention import attention_scores, expand_groups
from engine.blockwise import BlockMask, flash
from engine.measure import CPU_METHOD, CUDA_METHOD, measure

RUNS = 3  # engine.measure runs each pass three times: a warm-up, a timed run, a run whose memory is recorded


@dataclass(frozen=True)
class LengthPoint:
    seq_len: int
    dense_peak_bytes: int  # the dense pass: scores and weights H x S x S each
    dense_ms: float
    blockwise_peak_bytes: int  # engine.blockwise.flash: no tensor larger than H x block x block
    blockwise_ms: float
    predicted_score_bytes: int  # H x S^2 x bytes: the formula the cost panel prints, for one layer, batch 1
    predicted_block_bytes: int  # H x min(S, block)^2 x bytes: one block of the blockwise pass's scores
    max_abs_diff: float  # the largest |dense context - blockwise context|


@dataclass(frozen=True)
class Lengths:
    block: int  # keys (and query rows) per block of the blockwise pass
    measured_dtype: str  # the dtype both passes ran in (float32 for half precision on a CPU)
    method: str  # how peak bytes were measured, in words
    points: list[LengthPoint]


def lengths_flops(q: CostQuery, lengths: Sequence[int]) -> int:
    """The work of measuring both passes at every length: each pass is 2 H S^2 d_head for the scores and as much
    for weights x V, run three times."""
    return sum(2 * RUNS * 4 * q.heads * s * s * q.d_head for s in lengths)


def largest_scores(q: CostQuery, lengths: Sequence[int]) -> int:
    """The dense pass's score elements at the longest length, H x S^2 (its weights are as many again)."""
    return q.heads * max(lengths) ** 2


def dense(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """The contexts (H, S, d_v) with the whole H x S x S scores and weights held, as engine/attention.py makes
    them with no mask (attention_scores, then the softmax over keys, then weights x V)."""
    h = q.shape[0]
    scores = attention_scores(q[None], expand_groups(k[None], h), scale)
    weights = torch.softmax(scores, dim=-1)
    return (weights @ expand_groups(v[None], h))[0]


def measure_point(q: CostQuery, s: int, block: int, device: torch.device, dtype: torch.dtype, seed: int) -> LengthPoint:
    """Both passes measured at length s on the same random Q, K, V (N(0, 1) entries; scale 1 / sqrt(d_head))."""
    size = torch.empty((), dtype=dtype).element_size()
    scale = 1.0 / math.sqrt(q.d_head)
    gen = torch.Generator().manual_seed(seed + s)
    qq, kk, vv = (
        torch.randn(n, s, q.d_head, generator=gen).to(device=device, dtype=dtype) for n in (q.heads, q.groups, q.groups)
    )
    mask = BlockMask(s, s)
    with torch.inference_mode():
        want, m_dense = measure(lambda: dense(qq, kk, vv, scale), device)
        (got, _), m_block = measure(lambda: flash(qq, kk, vv, mask, scale, block), device)
    return LengthPoint(
        seq_len=s,
        dense_peak_bytes=m_dense.peak_bytes,
        dense_ms=m_dense.ms,
        blockwise_peak_bytes=m_block.peak_bytes,
        blockwise_ms=m_block.ms,
        predicted_score_bytes=q.heads * s * s * size,
        predicted_block_bytes=q.heads * min(s, block) ** 2 * size,
        max_abs_diff=float((want.double() - got.double()).abs().max()),
    )


def measure_lengths(q: CostQuery, lengths: Sequence[int], block: int, device: torch.device, seed: int = 0) -> Lengths:
    """Both passes measured at each length, in the query's dtype (float32 for half precision on a CPU)."""
    dtype = measured_dtype(validate(q), device)
    points = []
    for s in lengths:
        stop.check()  # the client has gone: no more lengths
        points.append(measure_point(q, s, block, device, dtype, seed))
    method = CUDA_METHOD if device.type == "cuda" else CPU_METHOD
    return Lengths(block, str(dtype).removeprefix("torch."), method, points)
