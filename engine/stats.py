"""Per-head statistics of one sequence's attention: the numbers a person checks a head by.

Two masked quantities that are easy to confuse, named apart:
    masked_share[q]   share of the *unmasked* softmax of row q that falls on keys the masks remove: a property
                      of the scores (how much the masks changed the row), anywhere in [0, 1]
    masked_weight[q]  weight that row q still puts on masked keys after masking: the chapter's masked mass,
                      exactly 0 when the mask works

A layer with learned sink logits (gpt-oss) gives each row's softmax one more outcome, the sink, with weight sink_q
and no value: its rows over the keys sum to 1 - sink_q. The statistics read the whole softmax there: the row-sum
error is |sum_k a_qk + sink_q - 1|, the entropy includes the sink's -sink_q ln sink_q, the uniform row of
kl_from_uniform has n_q + 1 outcomes, and mean_sink_weight is the mean sink weight.

Head health:
    kl_from_uniform   mean over rows with two or more eligible keys of KL(weights || uniform over eligible keys)
                      = ln(n_q) - H(row q), in nats; near 0 for a head that does not choose ("dead")
    identical_to      heads of the same layer whose weights have cosine similarity >= IDENTICAL_SIMILARITY
    qk_rank           rank of W_Q^h (W_K^g)^T (D x D, at most d_head): the bilinear form the head scores with
    qk_symmetric      W_Q = W_K for the head: q_i . k_j = q_j . k_i, so its scores are a symmetric matrix

What a statistic assumes is declared (ASSUMES, from ASSUMPTIONS), and a model declares the assumptions that do not
hold for it (AttentionModel.breaks: name -> why). Where one does not hold, the statistics that assume it are None
and `refused` says why, rather than a number about weights that are not what the head scores with.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.analysis.sinks import sink_mass
from engine.attention import AttentionWeights

DEAD_KL = 0.01  # nats: a head whose rows are on average within this of uniform is flagged dead
IDENTICAL_SIMILARITY = 0.999  # cosine similarity of two heads' flattened weights above which they are "identical"
RANK_RTOL = 1e-6  # singular values below this fraction of the largest count as zero


@dataclass(frozen=True)
class Assumption:
    name: str
    says: str


FIXED_QK = Assumption(
    "fixed_qk",
    "one fixed bilinear form W_Q W_K^T per head, the same at every pair of positions (no rotary embeddings)",
)
ASSUMPTIONS = {a.name: a for a in (FIXED_QK,)}
ASSUMES: dict[str, Assumption] = {"qk_rank": FIXED_QK, "qk_rank_max": FIXED_QK, "qk_symmetric": FIXED_QK}


def refusals(broken: Mapping[str, str]) -> dict[str, str]:
    """The statistics that assume something `broken` names (assumption -> why it fails), each with the reason."""
    unknown = sorted(set(broken) - set(ASSUMPTIONS))
    assert not unknown, f"a model breaks assumptions no statistic makes: {unknown}; known: {sorted(ASSUMPTIONS)}"
    return {
        stat: f"assumes {a.says}; it does not hold here: {broken[a.name]}"
        for stat, a in ASSUMES.items()
        if a.name in broken
    }


@dataclass(frozen=True)
class HeadStats:
    entropy: list[float]  # per query, nats, over the weights row (0 for an all-masked row)
    mean_entropy: float
    masked_share: list[float]  # per query: share of the unmasked softmax that the masks removed
    masked_weight: list[float]  # per query: weight left on masked keys after masking (0)
    max_masked_weight: float  # largest weight on an ineligible key (0 by construction)
    max_row_sum_error: float  # max |row sum - 1| over rows with at least one eligible key
    zero_rows: list[int]  # rows with no eligible key (all weights 0 under the `zero` policy)
    score_min: float  # over every cell, masked or not
    score_max: float
    eligible_score_min: float | None  # over eligible cells only; None when nothing is eligible
    eligible_score_max: float | None
    mean_distance: float  # mean over live queries of sum_k weight * |q - k|
    kl_from_uniform: float | None  # nats; None when no row has two eligible keys to choose between
    dead: bool  # kl_from_uniform < DEAD_KL
    identical_to: list[int]  # other heads of the layer with (near) identical weights
    qk_rank: int | None  # rank of W_Q W_K^T for this head; None when the weights are not known
    qk_rank_max: int | None  # d_head: the most that rank can be
    qk_symmetric: bool | None  # W_Q = W_K for this head, so its scores are symmetric (before masking)
    sink_mass: float = 0.0  # mean over live queries of the weight on the sink keys (position 0 unless given)
    mean_sink_weight: float | None = None  # mean over live queries of the learned sink logit's weight; None: no sink
    refused: dict[str, str] = field(default_factory=dict)  # statistic -> why it is None: what it assumes fails


def row_entropy(weights: Tensor) -> Tensor:
    """(..., S, S) -> (..., S) float64: -sum_k W[q, k] ln W[q, k] per row, in nats (0 for an all-zero row).
    Worked in the weights' own precision (torch sums float32 pairwise: about 1e-7 relative at 512 keys; a sum
    that casts to float64 as it goes took 15 times as long), given as float64."""
    matrices = weights.detach().reshape(weights.shape[:-2].numel(), *weights.shape[-2:])  # (N, S, S_k)
    sums = matrices.new_empty(matrices.shape[:-1])  # (N, S)
    # One S x S_k matrix at a time, through two buffers made once: at 512 tokens a layer's (H, S, S) temporaries
    # are 12 MiB each, and four of them at once went back to the system when freed and were faulted in again on
    # every call (29 ms a layer; 5 ms this way, the same sums bit for bit).
    p = matrices.new_empty(matrices.shape[1:])
    terms = matrices.new_empty(matrices.shape[1:])
    for i, w in enumerate(matrices):
        torch.clamp_min(w, 0, out=p)
        # p ln p, 0 at p = 0: the log of p raised to the smallest normal number is finite, so 0 x it is 0 (torch's
        # xlogy does the same but element by element, 17 times as long as the vectorised log at 512 tokens)
        torch.clamp_min(p, torch.finfo(p.dtype).tiny, out=terms).log_().mul_(p)
        torch.sum(terms, dim=-1, out=sums[i])
    return 0.0 - sums.reshape(weights.shape[:-1]).double()  # 0.0 - so 0 reads 0, not -0


def row_distance(weights: Tensor) -> Tensor:
    """(..., S, S_k) -> (..., S) float64: sum_k W[q, k] |q - k| per row, the row's mean attention distance."""
    q = torch.arange(weights.shape[-2], device=weights.device, dtype=weights.dtype)
    k = torch.arange(weights.shape[-1], device=weights.device, dtype=weights.dtype)
    distance = (q[:, None] - k[None, :]).abs()
    return torch.einsum("...qk,qk->...q", weights, distance).double()  # a product per row, no S x S temporary


def kl_from_uniform(weights: Tensor, eligible: Tensor, entropy: Tensor | None = None, extra: int = 0) -> Tensor | None:
    """weights (H, S, S), eligible (S, S) -> (H,): mean over rows with >= 2 eligible keys of ln(n_q) - H(row).

    `entropy`: row_entropy(weights), when the caller has it already; `extra`: outcomes each row has besides its
    keys (1 with a learned sink, whose term the entropy then holds)."""
    n = eligible.sum(dim=-1) + extra  # (S,)
    rows = n >= 2
    if not bool(rows.any()):
        return None
    entropy = row_entropy(weights) if entropy is None else entropy
    kl = torch.log(n.to(torch.float64).clamp_min(1)) - entropy  # (H, S)
    return kl[:, rows].mean(dim=-1).clamp_min(0.0)


def head_similarity(weights: Tensor) -> Tensor:
    """(H, S, S) -> (H, H) cosine similarity between heads' flattened weight matrices, in float64 for float64
    weights and float32 otherwise (the identical-heads threshold, 0.999, is far above float32's error).

    sim[h, g] = G[h, g] / sqrt(G[h, h] G[g, g]) for the Gram matrix G = sum_q W[:, q, :] W[:, q, :]^T (H, H), one
    small product per query row: the norms come from the same sums as the dot products, so a head's similarity to
    itself is 1 to float32's last digit (within 2e-7 of a float64 reference at 512 tokens, where unit rows and one
    long product were within 6e-5), and no (H, S * S) matrix of unit rows is made (12 MiB a layer at 512 tokens).
    """
    w = weights.detach().to(_working_dtype(weights))
    gram = torch.bmm(w.transpose(0, 1), w.permute(1, 2, 0)).sum(dim=0)  # (S, H, S_k) x (S, S_k, H) -> (H, H)
    norms = gram.diagonal().sqrt().clamp_min(1e-12)  # (H,)
    return gram / (norms[:, None] * norms[None, :])


def _working_dtype(t: Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


_ranks: dict[int, tuple[weakref.ref[AttentionWeights], list[int]]] = {}  # id -> (the weights, their ranks)


def qk_ranks(w: AttentionWeights) -> list[int]:
    """Per query head h: the rank of W_Q^h (W_K^g)^T, g its K/V group.

    The product is D x D; its singular values are those of R_Q R_K^T (d_head x d_head), where W = Q R is a
    reduced QR decomposition, so no D x D matrix is formed. A trained model's layers keep their weights, so
    the ranks are worked out once per weights object (0.85 s of MiniLM's stats at 420 tokens otherwise).
    """
    kept = _ranks.get(id(w))
    if kept is not None and kept[0]() is w:
        return list(kept[1])
    ranks = _qk_ranks(w)
    _ranks[id(w)] = (weakref.ref(w), ranks)
    weakref.finalize(w, _ranks.pop, id(w), None)  # a per-request model's weights take their entry with them
    return list(ranks)


def _qk_ranks(w: AttentionWeights) -> list[int]:
    per_group = w.n_heads // w.n_kv_heads
    r_q = torch.linalg.qr(w.W_Q.detach().double().cpu(), mode="r").R  # (H, d_head, d_head)
    r_k = torch.linalg.qr(w.W_K.detach().double().cpu(), mode="r").R  # (G, d_head, d_head)
    r_k = r_k.repeat_interleave(per_group, dim=0)  # (H, d_head, d_head)
    sv = torch.linalg.svdvals(r_q @ r_k.transpose(-1, -2))  # (H, d_head)
    top = sv[:, :1].clamp_min(1e-300)
    return [int(n) for n in ((sv > RANK_RTOL * top) & (sv > 0)).sum(dim=-1).tolist()]


def qk_symmetric(w: AttentionWeights) -> list[bool]:
    """Per query head: W_Q^h = W_K^g and b_Q^h = b_K^g, so q_i . k_j = q_j . k_i and the scores are symmetric."""
    per_group = w.n_heads // w.n_kv_heads
    out = []
    for h in range(w.n_heads):
        g = h // per_group
        same = torch.equal(w.W_Q[h], w.W_K[g])
        if w.b_Q is not None or w.b_K is not None:
            same = same and w.b_Q is not None and w.b_K is not None and torch.equal(w.b_Q[h], w.b_K[g])
        out.append(same)
    return out


def head_stats(
    scores: Tensor,
    weights: Tensor,
    eligible: Tensor,
    w: AttentionWeights | None = None,
    similarity: Tensor | None = None,
    broken: Mapping[str, str] | None = None,
    sinks: Sequence[int] = (0,),
    sink_weight: Tensor | None = None,
) -> list[HeadStats]:
    """scores, weights (H, S, S) for one sequence; eligible (S, S); w the layer's projections (for ranks);
    similarity: head_similarity(weights), when the caller has it already; broken: the assumptions that do not
    hold for the model (AttentionModel.breaks), whose statistics are None with the reason in `refused`;
    sinks: the key positions sink_mass counts (engine/analysis/sinks.py); sink_weight (H, S): each row's learned
    sink weight in a layer with sink logits (the module docstring), None without.

    Every figure is computed for all heads at once; the loop at the end only reads them out.
    """
    dtype = _working_dtype(weights)  # float32 work for float32 runs, float64 for float64 ones
    scores = scores.detach().to(dtype)
    weights = weights.detach().to(dtype)
    n_heads, s, _ = weights.shape
    masked = ~eligible
    any_masked = bool(masked.any())
    live = eligible.any(dim=-1)  # (S,)
    live_rows = live.nonzero().flatten()
    has_live = live_rows.numel() > 0

    entropy = row_entropy(weights)  # (H, S)
    sink = None if sink_weight is None else sink_weight.detach().to(dtype)  # (H, S)
    if sink is not None:  # the sink is one more outcome of the row's softmax
        entropy = entropy + row_entropy(sink[..., None])
    if any_masked:
        unmasked = torch.softmax(scores, dim=-1)  # what the softmax would give with no mask
        masked_share = torch.where(masked, unmasked, 0.0).sum(dim=-1).double()  # (H, S)
        masked_abs = torch.where(masked, weights.abs(), 0.0)
        masked_weight = masked_abs.sum(dim=-1).double()  # (H, S)
        max_masked = masked_abs.amax(dim=(-1, -2))
    else:  # nothing masked: nothing removed, nothing left on a masked key
        masked_share = masked_weight = torch.zeros(n_heads, s, dtype=torch.float64)
        max_masked = torch.zeros(n_heads, dtype=torch.float64)
    row_sum = weights.sum(dim=-1) if sink is None else weights.sum(dim=-1) + sink
    row_sum_err = (row_sum.double() - 1).abs()  # (H, S)
    distance = row_distance(weights)  # (H, S)
    kl = kl_from_uniform(weights, eligible, entropy, 0 if sink is None else 1)
    similarity = head_similarity(weights) if similarity is None else similarity
    similar = similarity >= IDENTICAL_SIMILARITY  # (H, H)
    refused = refusals(broken or {})
    fixed_qk = w if w is not None and FIXED_QK.name not in (broken or {}) else None
    ranks = qk_ranks(fixed_qk) if fixed_qk is not None else None
    symmetric = qk_symmetric(fixed_qk) if fixed_qk is not None else None
    zero_rows = [int(i) for i in (~live).nonzero().flatten().tolist()]
    any_eligible = bool(eligible.any())
    score_min = scores.amin(dim=(-1, -2)).tolist()
    score_max = scores.amax(dim=(-1, -2)).tolist()
    if any_masked:
        eligible_min = torch.where(eligible, scores, torch.inf).amin(dim=(-1, -2)).tolist()
        eligible_max = torch.where(eligible, scores, -torch.inf).amax(dim=(-1, -2)).tolist()
    else:
        eligible_min, eligible_max = score_min, score_max
    if has_live:
        mean_entropy = entropy[:, live_rows].mean(dim=-1).tolist()
        max_row_sum_error = row_sum_err[:, live_rows].amax(dim=-1).tolist()
        mean_distance = distance[:, live_rows].mean(dim=-1).tolist()
    else:
        mean_entropy = max_row_sum_error = mean_distance = [0.0] * n_heads
    mean_sink: list[float | None] = [None] * n_heads
    if sink is not None:
        mean_sink = sink[:, live_rows].double().mean(dim=-1).tolist() if has_live else [0.0] * n_heads
    entropy_rows, share_rows, weight_rows = entropy.tolist(), masked_share.tolist(), masked_weight.tolist()
    max_masked_list = max_masked.tolist()
    kl_list = kl.tolist() if kl is not None else None
    sink_list = sink_mass(weights, sinks, eligible).tolist()

    out = []
    for h in range(n_heads):
        kl_h = kl_list[h] if kl_list is not None else None
        out.append(
            HeadStats(
                entropy=entropy_rows[h],
                mean_entropy=mean_entropy[h],
                masked_share=share_rows[h],
                masked_weight=weight_rows[h],
                max_masked_weight=max_masked_list[h],
                max_row_sum_error=max_row_sum_error[h],
                zero_rows=zero_rows,
                score_min=score_min[h],
                score_max=score_max[h],
                eligible_score_min=eligible_min[h] if any_eligible else None,
                eligible_score_max=eligible_max[h] if any_eligible else None,
                mean_distance=mean_distance[h],
                kl_from_uniform=kl_h,
                dead=kl_h is not None and kl_h < DEAD_KL,
                identical_to=[int(o) for o in similar[h].nonzero().flatten().tolist() if o != h],
                qk_rank=ranks[h] if ranks is not None else None,
                qk_rank_max=None if fixed_qk is None else (fixed_qk.head_widths or [fixed_qk.d_head] * n_heads)[h],
                qk_symmetric=symmetric[h] if symmetric is not None else None,
                sink_mass=sink_list[h],
                mean_sink_weight=mean_sink[h],
                refused=dict(refused),
            )
        )
    return out
