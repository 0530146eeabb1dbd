"""Attention at any length without an S x S tensor: a block at a time, as a flash-attention pass computes it.

A weight needs only its query, its key and its row's normaliser:

    a_qk = exp(s_qk - lse_q),   s_qk = scale * q . k,   lse_q = log sum_{eligible k} exp(s_qk)

(in a layer with a softcap c, s_qk = c tanh(scale * q . k / c): engine/softcap.py, the same in every function here;
in a layer with learned sink logits z_h, the sink joins the normaliser, lse_q = log(exp(z_h) + sum exp(s_qk)), and
the contexts are scaled by exp(lse without the sink - lse_q): `attend` adds it)

so a run keeps Q and K (after rotary) and each row's log-sum-exp, O(S d) numbers, and any block of weights is
recomputed from them exactly. `flash` makes the contexts and the log-sum-exps in one pass over key blocks with the
online softmax (a running maximum m and sum l per row, rescaled by exp(m_old - m_new) when the maximum grows);
`weights` recomputes any rectangle; `summarise` folds every weight into block maxima and sums, which
is how a run's summaries and its tile pyramid are made.

Shapes: q (H, S, d), k (G, S_k, d), v (G, S_k, d_v) with G dividing H (query head h reads K/V group h // (H / G)).
A row with no eligible key has lse = -inf, zero weights and a zero context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from engine import stop
from engine.errors import InputError
from engine.softcap import softcap_

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

    def within(self, window: int | None) -> BlockMask:
        """These masks and a layer's own window (engine/forward.py Block.window): two windows are the narrower."""
        if window is None:
            return self
        return replace(self, window=window if self.window is None else min(window, self.window))

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


def _scores(q: Tensor, k: Tensor, scale: float, allowed: Tensor | None, cap: float | None = None) -> Tensor:
    s = torch.matmul(q, k.transpose(-1, -2)).mul_(scale)
    if cap is not None:
        softcap_(s, cap)
    if allowed is not None:
        s.masked_fill_(~allowed, float("-inf"))
    return s


def flash(
    q: Tensor, k: Tensor, v: Tensor, mask: BlockMask, scale: float, block: int = BLOCK, cap: float | None = None
) -> tuple[Tensor, Tensor]:
    """Contexts (H, S, d_v) and each row's log-sum-exp (H, S), with no tensor larger than (H, block, block)."""
    h, s, _ = q.shape
    k, v = _grouped(k, h), _grouped(v, h)
    contexts = torch.zeros(h, s, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((h, s), float("-inf"), dtype=q.dtype, device=q.device)
    for q0 in range(0, s, block):
        stop.check()  # a client gone: no more query blocks for nobody
        q1 = min(s, q0 + block)
        m = torch.full((h, q1 - q0), float("-inf"), dtype=q.dtype, device=q.device)
        total = torch.zeros_like(m)
        acc = torch.zeros(h, q1 - q0, v.shape[-1], dtype=q.dtype, device=q.device)
        lo, hi = mask.keys_for(q0, q1)
        for k0 in range(lo, hi, block):
            k1 = min(hi, k0 + block)
            sc = _scores(q[:, q0:q1], k[:, k0:k1], scale, mask.block(q0, q1, k0, k1, q.device), cap)
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


def fused(q: Tensor, mask: BlockMask, cap: float | None = None) -> bool:
    """Whether torch's CPU flash-attention kernel computes this layer: on the CPU, float32 or float64, square,
    no mask but causal (a window, padding or blocked cells would need an S x S mask tensor) and no softcap (the
    kernel's scores are the plain scaled q . k)."""
    plain = mask.window is None and mask.key_padding is None and not mask.blocked and mask.s_q == mask.s_k
    plain = plain and cap is None
    return plain and q.device.type == "cpu" and q.dtype in (torch.float32, torch.float64)


# the score cells one call of torch's CPU flash kernel covers, at most (whole heads, at least one): a long run's
# stop check comes between calls, so a client that leaves waits for one call (64 heads at 32,768 tokens: one head)
CALL_SCORES = 1 << 28


def flash_cpu(q: Tensor, k: Tensor, v: Tensor, mask: BlockMask, scale: float) -> tuple[Tensor, Tensor]:
    """torch's CPU flash kernel on (B, H, S, d) q, k and v: contexts and each row's log-sum-exp."""
    contexts, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, mask.causal, scale=scale)
    return contexts, lse


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: BlockMask,
    scale: float,
    all_masked: str,
    cap: float | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One attention layer's contexts (B, H, S, d_v) and row log-sum-exps (B, H, S) for batch-of-one q (B, H, S, d),
    k and v (B, G, S_k, .), as engine.attention needs them; a row left with no key is refused under
    all_masked "error", as the dense pass refuses it. `cap`: the layer's softcap, if any; `sinks` (H,): its learned
    sink logits, if any, taken into each row's log-sum-exp (so every weight remade from it is the sink layer's)."""
    contexts, lse = _attend(q, k, v, mask, scale, all_masked, cap)
    if sinks is None:
        return contexts, lse
    with_sink = torch.logaddexp(lse, sinks.to(lse.dtype).view(1, -1, 1))  # (B, H, S)
    kept = torch.exp(lse - with_sink)  # the share the keys keep: 0 in a row with no key (lse -inf)
    return contexts * kept[..., None].to(contexts.dtype), with_sink


def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: BlockMask, scale: float, all_masked: str, cap: float | None = None
) -> tuple[Tensor, Tensor]:
    """attend without sinks."""
    if fused(q, mask, cap):  # torch's own CPU flash kernel returns the row normalisers too: the same numbers, faster
        h, s = q.shape[1], q.shape[2]
        kk, vv = _grouped(k[0], h)[None], _grouped(v[0], h)[None]
        step = max(1, CALL_SCORES // (s * mask.s_k))  # heads per call: a kernel call cannot be stopped inside
        parts = []
        for h0 in range(0, h, step):
            stop.check()
            parts.append(flash_cpu(q[:, h0 : h0 + step], kk[:, h0 : h0 + step], vv[:, h0 : h0 + step], mask, scale))
        return torch.cat([c for c, _ in parts], dim=1), torch.cat([lse for _, lse in parts], dim=1)
    contexts, lse = flash(q[0], k[0], v[0], mask, scale, cap=cap)
    if all_masked == "error":
        empty = torch.isinf(lse[0]).nonzero().flatten()
        if empty.numel():
            rows = ", ".join(str(int(r)) for r in empty[:8]) + (" ..." if empty.numel() > 8 else "")
            raise InputError(
                "masks", f'query rows {rows} have no eligible key: unmask a key, or send all_masked "zero"'
            )
    return contexts[None], lse[None]


def log_weights(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    mask: BlockMask,
    scale: float,
    rows: tuple[int, int],
    cols: tuple[int, int],
    cap: float | None = None,
) -> Tensor:
    """log a_qk = scale * q . k - lse_q for queries [rows) against keys [cols), (H, rows, cols), in one product
    (the normaliser is added inside it; with a softcap, after capping the product); -inf on masked cells and on
    rows with no key."""
    (q0, q1), (k0, k1) = rows, cols
    kk = _grouped(k, q.shape[0])[:, k0:k1]
    row = lse[:, q0:q1, None]
    shift = torch.where(torch.isinf(row), float("-inf"), -row)
    if cap is None:
        t = torch.baddbmm(shift, q[:, q0:q1], kk.transpose(-1, -2), beta=1.0, alpha=scale)
    else:
        t = _scores(q[:, q0:q1], kk, scale, None, cap).add_(shift)
    allowed = mask.block(q0, q1, k0, k1, q.device)
    if allowed is not None:
        t.masked_fill_(~allowed, float("-inf"))
    return t


def weights(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    mask: BlockMask,
    scale: float,
    rows: tuple[int, int],
    cols: tuple[int, int],
    cap: float | None = None,
) -> Tensor:
    """The exact weights of queries [rows) against keys [cols), (H, rows, cols), from Q, K and the row
    normalisers alone; masked cells and rows with no key are 0."""
    return log_weights(q, k, lse, mask, scale, rows, cols, cap).exp_()


def fold(t: Tensor, f: int, op: str, pad: float = 0.0) -> Tensor:
    """(..., r, c) -> (..., ceil(r / f), ceil(c / f)): the max or the sum of each f x f block, the edge blocks cut
    at t's edge (padded with `pad`: 0 changes neither for weights, which are >= 0; -inf for a max of logs)."""
    *lead, r, c = t.shape
    pr, pc = -r % f, -c % f
    if pr or pc:
        t = torch.nn.functional.pad(t, (0, pc, 0, pr), value=pad)
    blocks = t.reshape(*lead, (r + pr) // f, f, (c + pc) // f, f)
    return blocks.amax(dim=(-3, -1)) if op == "max" else blocks.sum(dim=(-3, -1))


def block_counts(s_q: int, s_k: int, cell: int) -> Tensor:
    """How many cells of the S x S_k grid each cell x cell block holds (the edge blocks hold fewer)."""
    rows = torch.tensor([min(cell, s_q - i * cell) for i in range(math.ceil(s_q / cell))], dtype=torch.float64)
    cols = torch.tensor([min(cell, s_k - j * cell) for j in range(math.ceil(s_k / cell))], dtype=torch.float64)
    return rows[:, None] * cols[None, :]


def summarise(
    q: Tensor,
    k: Tensor,
    lse: Tensor,
    mask: BlockMask,
    scale: float,
    cell: int,
    block: int = BLOCK,
    cap: float | None = None,
) -> tuple[Tensor, Tensor]:
    """The maxima and sums (float32, on the CPU) of every weight over cell x cell blocks, (H, ceil(S / cell),
    ceil(S_k / cell)), in one pass over blocks of `block` positions (a multiple of `cell`, which must be a power of
    two: every cell block then lies inside one pass block, and is folded once, by a reshape)."""
    block = max(block, cell)
    h, s, _ = q.shape
    shape = (h, math.ceil(s / cell), math.ceil(mask.s_k / cell))
    bmax, bsum = torch.zeros(shape), torch.zeros(shape)
    for q0 in range(0, s, block):
        stop.check()
        q1 = min(s, q0 + block)
        lo, hi = mask.keys_for(q0, q1)
        for k0 in range(lo - lo % block, hi, block):
            k1 = min(hi, k0 + block)
            t = log_weights(q, k, lse, mask, scale, (q0, q1), (k0, k1), cap)
            i, j = q0 // cell, k0 // cell
            m = fold(t, cell, "max", float("-inf")).exp_()  # the max of the logs: a cell's worth of exps, not all
            bmax[:, i : i + m.shape[1], j : j + m.shape[2]] = m.float().cpu()
            bsum[:, i : i + m.shape[1], j : j + m.shape[2]] = fold(t.exp_(), cell, "sum").float().cpu()
    return bmax, bsum
