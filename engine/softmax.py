"""The softmax step of attention: weights = softmax over keys of the scores, with ineligible keys removed.

Ineligible keys get exactly 0 and a row with no eligible key all zeros, never NaN (whether such rows are allowed is
the all-masked policy, `check_policy`). For long sequences `softmax_contexts` also multiplies the weights by V while
they are in the cache. `sink_softmax` is the softmax of a layer with learned sink logits (gpt-oss): one more logit
per head joins every row, takes weight and has no value. `buggy_softmax` computes the chapter's two classic bugs on
purpose.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.errors import AllMaskedRowsError, InputError
from engine.interventions import ClassicBug
from engine.masks import empty_rows


def masked_softmax(
    scores: Tensor, eligible: Tensor, out: Tensor | None = None, *, every_row_keyed: bool | None = None
) -> Tensor:
    """Softmax over keys (last axis) among eligible keys only; scores must be finite (`attention` refuses others
    before this step).

    Ineligible keys get exactly 0: the mask is added as 0 or -inf, and exp(-inf) = 0. A row with no eligible key
    gets all zeros (never NaN, never a uniform row); callers decide beforehand whether such rows are allowed.
    Computed in float32 at least, so half-precision rows still sum to 1. `out`, a tensor of the scores' shape
    and dtype, receives the weights when given (half-precision scores ignore it: they are computed in float32).
    `every_row_keyed`: whether every row of `eligible` has an eligible key, when the caller already knows.
    """
    work = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    if every_key_eligible(eligible):
        # nothing masked: adding 0 to every score changes none of them, so the pass that adds the mask is skipped
        weights = torch.softmax(work, dim=-1, out=out if work is scores else None)
        return weights if work is scores else weights.to(scores.dtype)
    allowed = _broadcast_eligible(eligible, work)
    blocked = torch.where(allowed, 0.0, float("-inf"))  # float32: 0 and -inf are exact in every dtype
    weights = torch.add(work, blocked, out=out if work is scores else None)
    torch.softmax(weights, dim=-1, out=weights)  # in place: each row is read before it is overwritten
    if not (every_row_has_a_key(eligible) if every_row_keyed is None else every_row_keyed):
        # those rows came out NaN (exp(-inf - -inf)): make them 0
        weights.masked_fill_(~allowed.any(dim=-1, keepdim=True), 0.0)
    return weights if work is scores else weights.to(scores.dtype)


def sink_softmax(scores: Tensor, eligible: Tensor, sinks: Tensor) -> tuple[Tensor, Tensor]:
    """Softmax over the eligible keys and one sink logit per head: scores (B, H, S, S_k), sinks (H,) ->
    weights (B, H, S, S_k) and sink weight (B, H, S).

        [a_q1 ... a_qS_k, sink_q] = softmax([s_q1 ... s_qS_k, z_h])      (ineligible keys at -inf)

    The sink takes its share of each row and has no value, so a row's weights over the keys sum to 1 - sink_q;
    a row with no eligible key gives all its weight to the sink (its weights over keys exactly 0, never NaN).
    Computed in float32 at least, as masked_softmax is.
    """
    work = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    b, h, s, _ = work.shape
    column = sinks.to(work.dtype).view(1, h, 1, 1).expand(b, h, s, 1)
    allowed = _broadcast_eligible(eligible, work)
    logits = torch.cat([work.masked_fill(~allowed, float("-inf")), column], dim=-1)  # (B, H, S, S_k + 1)
    probs = torch.softmax(logits, dim=-1)
    return probs[..., :-1].to(scores.dtype), probs[..., -1].to(scores.dtype)


ROW_BLOCK = 64  # query rows per tile in softmax_contexts: (B, H, 64, S_k) in float32 is 1.5 MiB at 12 heads, 512 keys
TILED_FROM = 8 << 20  # bytes of weights from which softmax_contexts tiles; below, one pass measured as fast or faster


def softmax_contexts(
    scores: Tensor, eligible: Tensor, v: Tensor, out: Tensor, *, every_row_keyed: bool
) -> tuple[Tensor, Tensor]:
    """weights = masked_softmax(scores, eligible), written into `out`, and contexts = weights v (B, H, S, d_v), a
    block of ROW_BLOCK query rows at a time.

    Each block's weights are made and multiplied by V while they are still in the cache, and only up to the last
    key any of its rows may see: past it the weights are written as exact zeros, with no softmax and no product
    (under a causal mask, about half of them). The -inf of the mask is added only to the keys where some row of the
    block is masked (under a causal mask, the block's diagonal square), never to the whole score matrix. From
    TILED_FROM bytes of weights (12 heads: 512 tokens tile, 256 do not). Within float32 rounding of the whole-row
    softmax and product (a shorter sum); the same weights, bit for bit, with the same exact zeros on ineligible keys
    and zero rows where no key is eligible.
    """
    s, s_k = scores.shape[-2:]
    if s <= ROW_BLOCK or s_k == 0 or scores.numel() * scores.element_size() < TILED_FROM:
        weights = masked_softmax(scores, eligible, out, every_row_keyed=every_row_keyed)
        return weights, weights @ v
    allowed = _broadcast_eligible(eligible, scores)
    b, h, _, d_v = v.shape
    # contexts as a (B, H, S, d_v) view of (B, S, H, d_v): each block's product lands in place, and the layer's
    # concatenation of heads (B, S, H * d_v) is then a view of it, not one more copy
    contexts = v.new_empty(b, s, h, d_v).transpose(1, 2)
    for r0, (lo, hi, end) in zip(range(0, s, ROW_BLOCK), key_spans(eligible, ROW_BLOCK), strict=True):
        rows = slice(r0, r0 + ROW_BLOCK)
        # a contiguous copy of the block's scores, then softmax in place on it: 301 µs for a 64-row block at 512
        # tokens, against 349 µs for a softmax that reads the strided rows of `scores` itself (which must stay)
        tile = scores[..., rows, :end].clone(memory_format=torch.contiguous_format)
        if hi > lo:
            tile[..., lo:hi].add_(torch.where(allowed[..., rows, lo:hi], 0.0, float("-inf")))
        torch.softmax(tile, dim=-1, out=tile)
        if not every_row_keyed:  # rows with no eligible key came out NaN: make them 0
            tile.masked_fill_(~allowed[..., rows, :end].any(dim=-1, keepdim=True), 0.0)
        out[..., rows, :end].copy_(tile)
        out[..., rows, end:].zero_()
        torch.matmul(tile, v[..., :end, :], out=contexts[..., rows, :])
    return out, contexts


def key_spans(eligible: Tensor, block: int) -> list[tuple[int, int, int]]:
    """For each block of `block` query rows of eligible (S, S_k) or (B, S, S_k), the keys its softmax must treat:
    (lo, hi, end). end: 1 + the last key any of its rows (in any batch) may attend to, 0 where none may. [lo, hi):
    the keys before `end` that some row of the block (in some batch) may not attend to, the only ones that need the
    mask; lo = hi = 0 where every row may attend to every key before `end`.

    Under a causal mask the block at rows r0 .. r0 + block - 1 gets (r0 + 1, r0 + block, r0 + block): only its
    diagonal square is masked.
    """
    s, s_k = eligible.shape[-2:]
    e = eligible.view(torch.uint8)
    seen, open_ = (e.amax(dim=0), e.amin(dim=0)) if e.dim() == 3 else (e, e)
    n = -(-s // block)
    if n * block != s:  # rows past the end see nothing and block nothing
        seen = torch.cat([seen, seen.new_zeros(n * block - s, s_k)])
        open_ = torch.cat([open_, open_.new_ones(n * block - s, s_k)])
    keys = torch.arange(1, s_k + 1, dtype=torch.int32, device=e.device)  # 1-based, so that 0 means none
    end = (seen.view(n, block, s_k).amax(dim=1) * keys).amax(dim=-1)  # (n,)
    shut = (1 - open_.view(n, block, s_k).amin(dim=1)) * (keys <= end[:, None])  # (n, S_k): masked for some row
    hi = (shut * keys).amax(dim=-1)
    lo = torch.where(hi > 0, s_k - (shut * (s_k + 1 - keys)).amax(dim=-1), 0)  # s_k + 1 - the first masked key
    return list(zip(lo.tolist(), hi.tolist(), end.tolist(), strict=True))


def buggy_softmax(scores: Tensor, eligible: Tensor, bug: ClassicBug) -> Tensor:
    """The chapter's two classic bugs, computed on purpose to show what they look like (never by default).

    softmax_over_queries: normalised down each column (over queries) instead of along each row (over keys):
    columns sum to 1, rows do not. flipped_mask: the mask read as True = blocked, so every eligible key is
    removed and every masked one attended to.
    """
    if bug == "softmax_over_queries":
        return masked_softmax(scores.transpose(-1, -2), eligible.transpose(-1, -2)).transpose(-1, -2)
    return masked_softmax(scores, ~eligible)


def check_policy(eligible: Tensor, all_masked: str) -> bool:
    """Refuse rows with no eligible key under the "error" policy; True when every row has one."""
    if all_masked not in ("error", "zero"):
        raise InputError("all_masked", f"got {all_masked!r}: must be 'error' or 'zero'")
    every_row_keyed = every_row_has_a_key(eligible)
    if all_masked == "error" and not every_row_keyed:
        rows = empty_rows(eligible)
        if rows:
            raise AllMaskedRowsError(rows)
    return every_row_keyed


def every_key_eligible(eligible: Tensor) -> bool:
    """True when nothing is masked (a min over bytes: 6 µs at 512 x 512, where `all` on bool took 156 µs)."""
    return eligible.numel() > 0 and bool(eligible.view(torch.uint8).amin())


def every_row_has_a_key(eligible: Tensor) -> bool:
    """True when every query row of (..., S, S_k) has an eligible key (a max over bytes: `any` on bool is slower)."""
    return eligible.shape[-1] > 0 and bool(eligible.view(torch.uint8).amax(dim=-1).all())


def _broadcast_eligible(eligible: Tensor, scores: Tensor) -> Tensor:
    """(S, S) or (B, S, S) -> broadcastable to scores (B, H, S, S)."""
    if eligible.dim() == 3:
        return eligible[:, None]
    return eligible
