"""A long run's weights as map tiles and rows, recomputed on demand from Q, K and the row normalisers.

The tile convention is the web map's: level z has 2^z x 2^z tiles of TILE x TILE cells over the S x S_k matrix,
x counts key blocks and y query blocks. At the deepest level, zmax = ceil(log2(S / TILE)), one cell is one weight;
each level up, a cell covers twice as many positions each way and holds the block's maximum or mean (masked
cells count as 0 in the mean).

Where a level's cells are at least the run's `fine` block, a tile is folded from the fine pyramid the run kept
(block maxima and sums, computed once); below it, the tile's weights are recomputed exactly (at most
TILE * fine / 2 positions each way) and folded. Either way no tile costs a pass over the whole matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from engine.blockwise import BlockMask, block_counts, reduce_blocks, summarise, weights

TILE = 256
Agg = str  # "max" | "mean"


def deepest(s: int) -> int:
    """zmax: the level whose cells are single weights."""
    return max(0, math.ceil(math.log2(s / TILE))) if s > TILE else 0


def fine_cell(s: int, heads: int, budget: int) -> int:
    """The smallest power-of-two block whose maxima and sums for `heads` heads fit `budget` bytes."""
    cell = 1
    while heads * math.ceil(s / cell) ** 2 * 8 > budget:
        cell *= 2
    return cell


@dataclass
class HeadKeep:
    """What a long run keeps of one layer: Q and K after rotary, each row's log-sum-exp, and the fine pyramid."""

    q: Tensor  # (H, S, d)
    k: Tensor  # (G, S_k, d)
    lse: Tensor  # (H, S)
    mask: BlockMask
    scale: float
    fine: int
    fine_max: Tensor  # (H, ceil(S / fine), ceil(S_k / fine)) float32
    fine_sum: Tensor  # the same shape, float32

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.lse, self.fine_max, self.fine_sum))


def keep(
    q: Tensor, k: Tensor, lse: Tensor, mask: BlockMask, scale: float, fine: int, grid: int
) -> tuple[HeadKeep, Tensor, Tensor, int]:
    """One layer's keep, and its summary: grid x grid block maxima and means, block = ceil(S / grid)."""
    s = max(mask.s_q, mask.s_k)
    block = max(1, math.ceil(s / grid))
    (fmax, fmean), (smax, smean) = summarise(q, k, lse, mask, scale, (fine, block))
    fsum = (fmean.double() * block_counts(mask.s_q, mask.s_k, fine)).float()
    return HeadKeep(q, k, lse, mask, scale, fine, fmax, fsum), smax, smean, block


@dataclass(frozen=True)
class TileSpec:
    z: int
    x: int
    y: int
    q0: int
    q1: int
    k0: int
    k1: int
    cell: int


def tile_spec(s_q: int, s_k: int, z: int, x: int, y: int) -> TileSpec | str:
    """Where tile (z, x, y) lies, or why it does not exist (a reason naming the coordinate)."""
    zmax = deepest(max(s_q, s_k))
    if not 0 <= z <= zmax:
        return f"z: got {z}; this run has levels 0 to {zmax}"
    cell = 2 ** (zmax - z)
    span = TILE * cell
    nx, ny = math.ceil(s_k / span), math.ceil(s_q / span)
    if not 0 <= x < nx:
        return f"x: got {x}; level {z} has key tiles 0 to {nx - 1}"
    if not 0 <= y < ny:
        return f"y: got {y}; level {z} has query tiles 0 to {ny - 1}"
    q0, k0 = y * span, x * span
    return TileSpec(z, x, y, q0, min(s_q, q0 + span), k0, min(s_k, k0 + span), cell)


def _fold(t: Tensor, f: int, op: str) -> Tensor:
    """(r, c) -> (ceil(r / f), ceil(c / f)) by max or sum over f x f blocks (edge blocks are smaller)."""
    r, c = t.shape
    pad = torch.nn.functional.pad(t, (0, -c % f, 0, -r % f))  # zeros: neutral for sums, and weights are >= 0
    blocks = pad.reshape(pad.shape[0] // f, f, pad.shape[1] // f, f)
    return blocks.amax(dim=(1, 3)) if op == "max" else blocks.sum(dim=(1, 3))


def tile(run: HeadKeep, head: int, spec: TileSpec, agg: Agg) -> Tensor:
    """The tile's cells (rows x columns, float32): exact weights at cell 1, else block maxima or means."""
    rows, cols = (spec.q0, spec.q1), (spec.k0, spec.k1)
    counts = block_counts(spec.q1 - spec.q0, spec.k1 - spec.k0, spec.cell)
    if spec.cell >= run.fine:
        f = spec.cell // run.fine
        a, b = spec.q0 // run.fine, math.ceil(spec.q1 / run.fine)
        c, d = spec.k0 // run.fine, math.ceil(spec.k1 / run.fine)
        if agg == "max":
            return _fold(run.fine_max[head, a:b, c:d], f, "max")
        return (_fold(run.fine_sum[head, a:b, c:d].double(), f, "sum") / counts).float()
    q = run.q[head : head + 1]
    k = run.k[head // (run.q.shape[0] // run.k.shape[0])][None]
    w = weights(q, k, run.lse[head : head + 1], run.mask, run.scale, rows, cols).float().cpu()
    if spec.cell == 1:
        return w[0]
    shape = (1, *counts.shape)
    bmax, bsum = torch.zeros(shape), torch.zeros(shape, dtype=torch.float64)
    # the fold indexes blocks from the tile's corner, which a cell size divides
    reduce_blocks(w, 0, 0, spec.cell, bmax, bsum)
    return bmax[0] if agg == "max" else (bsum[0] / counts).float()


def row(run: HeadKeep, head: int, query: int) -> Tensor:
    """One query's exact weights over every key (S_k,), float32."""
    q = run.q[head : head + 1]
    k = run.k[head // (run.q.shape[0] // run.k.shape[0])][None]
    w = weights(q, k, run.lse[head : head + 1], run.mask, run.scale, (query, query + 1), (0, run.mask.s_k))
    return w[0, 0].float().cpu()
