"""Per-head statistics of one sequence's attention: the numbers a person checks a head by."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from engine.attention import masked_softmax


@dataclass(frozen=True)
class HeadStats:
    entropy: list[float]  # per query, nats, over the weights row (0 for an all-masked row)
    mean_entropy: float
    masked_mass: list[float]  # per query: share of the unmasked softmax that the masks removed
    max_masked_weight: float  # largest weight on an ineligible key (0 by construction)
    max_row_sum_error: float  # max |row sum - 1| over rows with at least one eligible key
    zero_rows: list[int]  # rows with no eligible key (all weights 0 under the `zero` policy)
    score_min: float  # over every cell, masked or not
    score_max: float
    eligible_score_min: float | None  # over eligible cells only; None when nothing is eligible
    eligible_score_max: float | None
    mean_distance: float  # mean over live queries of sum_k weight * |q - k|


def head_stats(scores: Tensor, weights: Tensor, eligible: Tensor) -> list[HeadStats]:
    """scores, weights (H, S, S) for one sequence; eligible (S, S). One HeadStats per head."""
    scores = scores.detach().double()
    weights = weights.detach().double()
    n_heads, s, _ = weights.shape
    live = eligible.any(dim=-1)  # (S,)
    live_rows = live.nonzero().flatten()

    plogp = torch.where(weights > 0, weights * weights.clamp_min(1e-300).log(), torch.zeros_like(weights))
    entropy = 0.0 - plogp.sum(dim=-1)  # (H, S); 0.0 - so an all-zero row reads 0, not -0
    unmasked = masked_softmax(scores, torch.ones_like(eligible))
    masked_mass = (unmasked * (~eligible).double()).sum(dim=-1)  # (H, S)
    row_sum_err = (weights.sum(dim=-1) - 1).abs()  # (H, S)
    pos = torch.arange(s, device=weights.device, dtype=weights.dtype)
    distance = (weights * (pos[:, None] - pos[None, :]).abs()).sum(dim=-1)  # (H, S)
    zero_rows = [int(i) for i in (~live).nonzero().flatten().tolist()]

    out = []
    for h in range(n_heads):
        eligible_scores = scores[h][eligible]
        has_live = live_rows.numel() > 0
        out.append(
            HeadStats(
                entropy=entropy[h].tolist(),
                mean_entropy=float(entropy[h][live_rows].mean()) if has_live else 0.0,
                masked_mass=masked_mass[h].tolist(),
                max_masked_weight=float(weights[h][~eligible].abs().max()) if (~eligible).any() else 0.0,
                max_row_sum_error=float(row_sum_err[h][live_rows].max()) if has_live else 0.0,
                zero_rows=zero_rows,
                score_min=float(scores[h].min()),
                score_max=float(scores[h].max()),
                eligible_score_min=float(eligible_scores.min()) if eligible_scores.numel() else None,
                eligible_score_max=float(eligible_scores.max()) if eligible_scores.numel() else None,
                mean_distance=float(distance[h][live_rows].mean()) if has_live else 0.0,
            )
        )
    return out


def head_similarity(weights: Tensor) -> Tensor:
    """(H, S, S) -> (H, H) cosine similarity between heads' flattened weight matrices."""
    flat = weights.detach().double().flatten(start_dim=1)
    norms = flat.norm(dim=1).clamp_min(1e-12)
    unit = flat / norms[:, None]
    return unit @ unit.T
