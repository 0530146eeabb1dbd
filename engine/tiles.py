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

from torch import Tensor

from engine.blockwise import BlockMask, block_counts, fold, summarise, weights

TILE = 256
Agg = str  # "max" | "mean"


def deepest(s: int) -> int:
    """zmax: the level whose cells are single weights."""
    return max(0, math.ceil(math.log2(s / TILE))) if s > TILE else 0


FINEST = 4  # the pyramid's smallest block: a tile of cells below it is recomputed (at most 512 x 512 positions)
PYRAMID_BYTES = 64 << 20  # what one run's pyramid may hold, at most


def fine_cell(s: int, heads: int, budget: int) -> int:
    """The smallest power-of-two block, FINEST at least, whose maxima and sums for `heads` heads (every layer's)
    fit `budget` bytes."""
    cell = FINEST
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
    softcap: float | None = None  # the layer's score softcap (engine/softcap.py), applied wherever weights are remade

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.k, self.lse, self.fine_max, self.fine_sum))


def keep(
    q: Tensor, k: Tensor, lse: Tensor, mask: BlockMask, scale: float, fine: int, grid: int, cap: float | None = None
) -> tuple[HeadKeep, Tensor, Tensor, int]:
    """One layer's keep, and its summary: the block maxima and means over blocks of `block` positions, the
    smallest power of two (times the fine block) that makes at most grid x grid blocks, folded from the pyramid."""
    s = max(mask.s_q, mask.s_k)
    fmax, fsum = summarise(q, k, lse, mask, scale, fine, cap=cap)
    block = fine
    while math.ceil(s / block) > grid:
        block *= 2
    f = block // fine
    smax = fold(fmax, f, "max")
    smean = (fold(fsum.double(), f, "sum") / block_counts(mask.s_q, mask.s_k, block)).float()
    return HeadKeep(q, k, lse, mask, scale, fine, fmax, fsum, cap), smax, smean, block


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


def tile(run: HeadKeep, head: int, spec: TileSpec, agg: Agg) -> Tensor:
    """The tile's cells (rows x columns, float32): exact weights at cell 1, else block maxima or means."""
    rows, cols = (spec.q0, spec.q1), (spec.k0, spec.k1)
    counts = block_counts(spec.q1 - spec.q0, spec.k1 - spec.k0, spec.cell)
    if spec.cell >= run.fine:
        f = spec.cell // run.fine
        a, b = spec.q0 // run.fine, math.ceil(spec.q1 / run.fine)
        c, d = spec.k0 // run.fine, math.ceil(spec.k1 / run.fine)
        if agg == "max":
            return fold(run.fine_max[head, a:b, c:d], f, "max")
        return (fold(run.fine_sum[head, a:b, c:d].double(), f, "sum") / counts).float()
    q = run.q[head : head + 1]
    k = run.k[head // (run.q.shape[0] // run.k.shape[0])][None]
    w = weights(q, k, run.lse[head : head + 1], run.mask, run.scale, rows, cols, run.softcap).float().cpu()
    if spec.cell == 1:
        return w[0]
    return fold(w[0], spec.cell, "max") if agg == "max" else (fold(w[0].double(), spec.cell, "sum") / counts).float()


def row(run: HeadKeep, head: int, query: int) -> Tensor:
    """One query's exact weights over every key (S_k,), float32."""
    q = run.q[head : head + 1]
    k = run.k[head // (run.q.shape[0] // run.k.shape[0])][None]
    w = weights(q, k, run.lse[head : head + 1], run.mask, run.scale, (query, query + 1), (0, run.mask.s_k), run.softcap)
    return w[0, 0].float().cpu()
