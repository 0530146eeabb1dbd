"""Attention at any length without an S x S tensor: a block at a time, as a flash-attention pass computes it.

A weight needs only its query, its key and its row's normaliser:

    a_qk = exp(s_qk - lse_q),   s_qk = scale * q . k,   lse_q = log sum_{eligible k} exp(s_qk)

so a run keeps Q and K (after rotary) and each row's log-sum-exp, O(S d) numbers, and any block of weights is
recomputed from them exactly. `flash` makes the contexts and the log-sum-exps in one pass over key blocks with the
online softmax (a running maximum m and sum l per row, rescaled by exp(m_old - m_new) when the maximum grows);
`weights` recomputes any rectangle; `reduce_blocks` folds a rectangle of weights into block maxima and sums, which
is how a run's summaries and its tile pyramid are made.

Shapes: q (H, S, d), k (G, S_k, d), v (G, S_k, d_v) with G dividing H (query head h reads K/V group h // (H / G)).
A row with no eligible key has lse = -inf, zero weights and a zero context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

BLOCK = 1024  # query rows and keys per block: (H, 1024, 1024) float32 is 4 MiB a head


@dataclass(frozen=True)
class BlockMask:
    """The masks of a long run, evaluated a block at a time: causal, a window (|q - k| < window), key padding
    (True = a real key) and single blocked [query, key] cells."""

    s_q: int
    s_k: int
    causal: bool = False
    window: int | None = None
    key_padding: Tensor | None = None  # (S_k,) bool
    blocked: tuple[tuple[int, int], ...] = field(default_factory=tuple)

    def keys_for(self, q0: int, q1: int) -> tuple[int, int]:
        """The key range [k0, k1) any query in [q0, q1) may see: the rest of the row is masked."""
        k0, k1 = 0, self.s_k
        if self.causal:
            k1 = min(k1, q1)
        if self.window is not None:
            k0 = max(k0, q0 - self.window + 1)
            k1 = min(k1, q1 + self.window - 1)
        return k0, max(k0, k1)

    def block(self, q0: int, q1: int, k0: int, k1: int, device: torch.device) -> Tensor | None:
        """(q1 - q0, k1 - k0) eligibility, or None where every cell of the block is eligible."""
        allowed: Tensor | None = None
        qi = torch.arange(q0, q1, device=device)[:, None]
        kj = torch.arange(k0, k1, device=device)[None, :]
        if self.causal and k1 - 1 > q0:
            allowed = kj <= qi
        if self.window is not None and (q1 - 1 - k0 >= self.window or k1 - 1 - q0 >= self.window):
            near = (qi - kj).abs() < self.window
            allowed = near if allowed is None else allowed & near
        if self.key_padding is not None:
            real = self.key_padding[k0:k1].to(device)
            if not bool(real.all()):
                allowed = real[None, :].expand(q1 - q0, -1) if allowed is None else allowed & real[None, :]
        inside = [(q, k) for q, k in self.blocked if q0 <= q < q1 and k0 <= k < k1]
        if inside:
            allowed = torch.ones(q1 - q0, k1 - k0, dtype=torch.bool, device=device) if allowed is None else allowed
            allowed = allowed.clone()
            for q, k in inside:
                allowed[q - q0, k - k0] = False
        return allowed


def _grouped(t: Tensor, n_heads: int) -> Tensor:
    """(G, S, d) -> (H, S, d), each K/V group repeated for the query heads that read it (a view where G = H)."""
    g = t.shape[0]
    return t if g == n_heads else t.repeat_interleave(n_heads // g, dim=0)


def _scores(q: Tensor, k: Tensor, scale: float, allowed: Tensor | None) -> Tensor:
    s = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
    if allowed is not None:
        s.masked_fill_(~allowed, float("-inf"))
    return s


def flash(q: Tensor, k: Tensor, v: Tensor, mask: BlockMask, scale: float, block: int = BLOCK) -> tuple[Tensor, Tensor]:
    """Contexts (H, S, d_v) and each row's log-sum-exp (H, S), with no tensor larger than (H, block, block)."""
    h, s, _ = q.shape
    k, v = _grouped(k, h), _grouped(v, h)
    contexts = torch.zeros(h, s, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((h, s), float("-inf"), dtype=q.dtype, device=q.device)
    for q0 in range(0, s, block):
        q1 = min(s, q0 + block)
        m = torch.full((h, q1 - q0), float("-inf"), dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(h, q1 - q0, v.shape[-1], dtype=q.dtype, device=q.device)
        lo, hi = mask.keys_for(q0, q1)
        for k0 in range(lo, hi, block):
            k1 = min(hi, k0 + block)
            sc = _scores(q[:, q0:q1], k[:, k0:k1], scale, mask.block(q0, q1, k0, k1, q.device))
            m_new = torch.maximum(m, sc.amax(dim=-1))
            safe = torch.where(torch.isinf(m_new), 0.0, m_new)  # a row with no key yet: nothing to rescale
            p = torch.exp(sc - safe[..., None])
            grow = torch.exp(torch.where(torch.isinf(m), float("-inf"), m - safe))
            total = total * grow + p.sum(dim=-1)
            acc = acc * grow[..., None] + torch.matmul(p, v[:, k0:k1])
            m = m_new
        keyed = total > 0
        contexts[:, q0:q1] = torch.where(keyed[..., None], acc / total.clamp_min(1e-38)[..., None], 0.0)
        lse[:, q0:q1] = torch.where(keyed, m + torch.log(total.clamp_min(1e-38)), float("-inf"))
    return contexts, lse


def weights(
    q: Tensor, k: Tensor, lse: Tensor, mask: BlockMask, scale: float, rows: tuple[int, int], cols: tuple[int, int]
) -> Tensor:
    """The exact weights of queries [rows) against keys [cols), (H, rows, cols), from Q, K and the row
    normalisers alone; masked cells and rows with no key are 0."""
    (q0, q1), (k0, k1) = rows, cols
    kk = _grouped(k, q.shape[0])[:, k0:k1]
    sc = _scores(q[:, q0:q1], kk, scale, mask.block(q0, q1, k0, k1, q.device))
    row = lse[:, q0:q1, None]
    return torch.where(torch.isinf(row), 0.0, torch.exp(sc - torch.where(torch.isinf(row), 0.0, row)))


def reduce_blocks(w: Tensor, q0: int, k0: int, cell: int, out_max: Tensor, out_sum: Tensor) -> None:
    """Fold weights w (H, rows, cols) whose first cell is (q0, k0) into the cell x cell block maxima and sums
    out_max, out_sum (H, ceil(S / cell), ceil(S_k / cell)), in place: cell (q, k) lands in block (q // cell,
    k // cell). Blocks need not align with w's edges, so rectangles may be folded in any order."""
    h, r, c = w.shape
    ki = (torch.arange(k0, k0 + c, device=w.device) // cell) - k0 // cell
    nk = int(ki[-1]) + 1
    by_key_max = torch.full((h, r, nk), float("-inf"), dtype=w.dtype, device=w.device)
    by_key_max.scatter_reduce_(2, ki.expand(h, r, c), w, reduce="amax")
    by_key_sum = torch.zeros(h, r, nk, dtype=w.dtype, device=w.device).index_add_(2, ki, w)
    qi = (torch.arange(q0, q0 + r, device=w.device) // cell) - q0 // cell
    nq = int(qi[-1]) + 1
    bmax = torch.full((h, nq, nk), float("-inf"), dtype=w.dtype, device=w.device)
    bmax.scatter_reduce_(1, qi[None, :, None].expand(h, r, nk), by_key_max, reduce="amax")
    bsum = torch.zeros(h, nq, nk, dtype=w.dtype, device=w.device).index_add_(1, qi, by_key_sum)
    bq, bk = q0 // cell, k0 // cell
    view_max = out_max[:, bq : bq + nq, bk : bk + nk]
    torch.maximum(view_max, bmax.to(out_max.dtype), out=view_max)
    out_sum[:, bq : bq + nq, bk : bk + nk] += bsum.to(out_sum.dtype)


def block_counts(s_q: int, s_k: int, cell: int) -> Tensor:
    """How many cells of the S x S_k grid each cell x cell block holds (the edge blocks hold fewer)."""
    rows = torch.tensor([min(cell, s_q - i * cell) for i in range(math.ceil(s_q / cell))], dtype=torch.float64)
    cols = torch.tensor([min(cell, s_k - j * cell) for j in range(math.ceil(s_k / cell))], dtype=torch.float64)
    return rows[:, None] * cols[None, :]


def summarise(
    q: Tensor, k: Tensor, lse: Tensor, mask: BlockMask, scale: float, cells: tuple[int, ...], block: int = BLOCK
) -> list[tuple[Tensor, Tensor]]:
    """For each cell size, the block maxima and means of every weight (H, ceil(S / cell), ceil(S_k / cell)), in
    one pass over blocks; a block's mean counts its masked cells as 0 weight."""
    h, s, _ = q.shape
    out = []
    for cell in cells:
        shape = (h, math.ceil(s / cell), math.ceil(mask.s_k / cell))
        out.append((torch.zeros(shape, dtype=torch.float32), torch.zeros(shape, dtype=torch.float64)))
    for q0 in range(0, s, block):
        q1 = min(s, q0 + block)
        lo, hi = mask.keys_for(q0, q1)
        for k0 in range(lo, hi, block):
            k1 = min(hi, k0 + block)
            w = weights(q, k, lse, mask, scale, (q0, q1), (k0, k1)).float().cpu()
            for cell, (bmax, bsum) in zip(cells, out, strict=True):
                reduce_blocks(w, q0, k0, cell, bmax, bsum)
    return [
        (bmax, (bsum / block_counts(s, mask.s_k, cell)).float()) for cell, (bmax, bsum) in zip(cells, out, strict=True)
    ]
