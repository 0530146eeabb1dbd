"""Head statistics against plain per-head, per-row formulas, and the W_Q W_K^T ranks against a direct rank."""

from __future__ import annotations

import gc
import math

import pytest
import torch

from engine.attention import AttentionWeights
from engine.masks import MaskSpec, eligibility
from engine.softmax import masked_softmax
from engine.stats import _ranks, head_stats, qk_ranks


def reference(scores: torch.Tensor, weights: torch.Tensor, eligible: torch.Tensor, h: int) -> dict[str, object]:
    """Head h's figures, one row at a time, straight from their definitions."""
    s = scores.shape[-1]
    live = [q for q in range(s) if bool(eligible[q].any())]
    entropy = [-sum(float(p) * math.log(float(p)) for p in weights[h, q] if p > 0) for q in range(s)]
    plain = torch.softmax(scores[h].double(), dim=-1)
    share = [sum(float(plain[q, k]) for k in range(s) if not eligible[q, k]) for q in range(s)]
    dist = [sum(float(weights[h, q, k]) * abs(q - k) for k in range(s)) for q in range(s)]
    allowed = [float(scores[h, q, k]) for q in range(s) for k in range(s) if eligible[q, k]]
    kl_rows = [math.log(int(eligible[q].sum())) - entropy[q] for q in range(s) if int(eligible[q].sum()) >= 2]
    return {
        "entropy": entropy,
        "mean_entropy": sum(entropy[q] for q in live) / len(live),
        "masked_share": share,
        "max_row_sum_error": max(abs(float(weights[h, q].sum()) - 1) for q in live),
        "score_min": float(scores[h].min()),
        "score_max": float(scores[h].max()),
        "eligible_score_min": min(allowed),
        "eligible_score_max": max(allowed),
        "mean_distance": sum(dist[q] for q in live) / len(live),
        "kl_from_uniform": max(0.0, sum(kl_rows) / len(kl_rows)),
        "zero_rows": [q for q in range(s) if q not in live],
    }


@pytest.mark.parametrize(
    "spec",
    [MaskSpec(), MaskSpec(causal=True), MaskSpec(causal=True, window=3, padding=(True,) * 5 + (False,) + (True,) * 2)],
)
def test_head_stats_match_the_row_by_row_definitions(spec: MaskSpec) -> None:
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(4, 8, 8, generator=g, dtype=torch.float64) * 2
    eligible = eligibility(spec, 8)
    weights = masked_softmax(scores, eligible)
    stats = head_stats(scores, weights, eligible)
    for h in range(4):
        want = reference(scores, weights, eligible, h)
        got = stats[h]
        for name, value in want.items():
            assert getattr(got, name) == pytest.approx(value, abs=1e-12), (h, name)
        assert got.masked_weight == [0.0] * 8 and got.max_masked_weight == 0.0


@pytest.mark.parametrize("spec", [MaskSpec(), MaskSpec(causal=True, padding=(True,) * 30 + (False,) * 2)])
def test_head_stats_of_a_float32_run_match_the_float64_definitions(spec: MaskSpec) -> None:
    """float32 runs are worked in float32 with float64 sums: the figures stay within float32's error."""
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 32, 32, generator=g, dtype=torch.float64) * 3
    eligible = eligibility(spec, 32)
    weights = masked_softmax(scores, eligible)
    stats = head_stats(scores.float(), weights.float(), eligible)
    for h in range(3):
        want = reference(scores, weights, eligible, h)
        for name, value in want.items():
            assert getattr(stats[h], name) == pytest.approx(value, rel=1e-5, abs=1e-5), (h, name)
        assert stats[h].masked_weight == [0.0] * 32 and stats[h].max_masked_weight == 0.0


def test_qk_ranks_are_the_ranks_of_the_products_and_are_kept_while_the_weights_live() -> None:
    g = torch.Generator().manual_seed(0)
    d, heads, d_head = 12, 3, 4
    w_q = torch.randn(heads, d, d_head, generator=g, dtype=torch.float64)
    w_k = torch.randn(heads, d, d_head, generator=g, dtype=torch.float64)
    w_q[1, :, 2:] = 0  # head 1: rank 2
    w_k[2, :, 1] = w_k[2, :, 0]  # head 2: rank 3
    w = AttentionWeights(w_q, w_k, torch.randn(heads, d, d_head, generator=g, dtype=torch.float64))
    direct = [int(torch.linalg.matrix_rank(w_q[h] @ w_k[h].T)) for h in range(heads)]
    assert direct == [4, 2, 3]
    assert qk_ranks(w) == direct
    assert qk_ranks(w) == direct and id(w) in _ranks  # the second call reads the kept ranks
    key = id(w)
    del w
    gc.collect()
    assert key not in _ranks  # a per-request model's weights take their entry with them
