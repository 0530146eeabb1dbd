"""The scaling argument (Figure 21.5) checked on a trained model: the spread of each head's raw scores q.k against
what random vectors with the same coordinate statistics would give.

For each head, over the cells its masks leave eligible: the standard deviation of the raw (unscaled) score q.k,
whatever the run's `scale` (the scores the softmax read are q.k times the run's factor; this divides nothing
back, it recomputes q.k from the q and k the scores read: after rotary where the layer has it, each K/V group
serving its query heads).

The prediction treats q and k as independent random vectors with independent coordinates, each coordinate with
the mean and variance measured on this input, over the same cells (a query counted once per eligible key, a key
once per eligible query). Then q.k = sum_i q_i k_i has

    Var(q.k) = sum_i [ Var(q_i) Var(k_i) + Var(q_i) E[k_i]^2 + E[q_i]^2 Var(k_i) ]

(`predicted_std` is its square root). With zero means and one variance per side this is Figure 21.5's
sigma_q sigma_k sqrt(d_k) (`isotropic_std`, from the mean coordinate variances). `ratio` = measured / predicted:
near 1, the head's scores spread as random vectors' would; far from 1, q and k are not independent (the head
matches queries to keys, or its coordinates move together).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from engine.attention import expand_groups
from engine.models.base import ModelRun


@dataclass(frozen=True)
class TrainedHeadScale:
    layer: int
    head: int
    d_k: int
    cells: int  # eligible (query, key) cells the spread is measured over
    std_raw: float  # std of the raw score q.k over those cells
    std_scaled: float  # std of q.k / sqrt(d_k)
    var_q: float  # the mean over coordinates of Var(q_i), over the same cells
    var_k: float  # likewise for k
    predicted_std: float  # sqrt(sum_i Var q_i Var k_i + Var q_i E[k_i]^2 + E[q_i]^2 Var k_i)
    isotropic_std: float  # sqrt(d_k * var_q * var_k): Figure 21.5's prediction for these variances
    ratio: float | None  # std_raw / predicted_std; None where the prediction is 0 (one key, constant q or k)


def weighted_moments(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """Per-coordinate mean and (population) variance of rows x (S, d) weighted by w (S,)."""
    total = w.sum()
    mean = (w[:, None] * x).sum(0) / total
    var = (w[:, None] * (x - mean) ** 2).sum(0) / total
    return mean, var


def head_scale(layer: int, head: int, q: Tensor, k: Tensor, eligible: Tensor) -> TrainedHeadScale:
    """One head: q (S, d), k (S_k, d), eligible (S, S_k) bool; computed in float64."""
    q, k = q.double(), k.double()
    d = q.shape[-1]
    raw = q @ k.T
    cells = raw[eligible]
    n = int(cells.numel())
    std = float(cells.std(correction=0)) if n else 0.0
    mq, vq = weighted_moments(q, eligible.sum(1).double())
    mk, vk = weighted_moments(k, eligible.sum(0).double())
    predicted = math.sqrt(float((vq * vk + vq * mk**2 + mq**2 * vk).sum()))
    var_q, var_k = float(vq.mean()), float(vk.mean())
    return TrainedHeadScale(
        layer=layer,
        head=head,
        d_k=d,
        cells=n,
        std_raw=std,
        std_scaled=std / math.sqrt(d),
        var_q=var_q,
        var_k=var_k,
        predicted_std=predicted,
        isotropic_std=math.sqrt(d * var_q * var_k),
        ratio=std / predicted if predicted > 0 else None,
    )


def trained_scales(run: ModelRun) -> list[TrainedHeadScale]:
    """Every layer's every head of one sequence's run (batch item 0), layer by layer."""
    out = []
    for trace in run.layers:
        a = trace.attn
        eligible = (a.eligible if a.eligible.dim() == 2 else a.eligible[0]).cpu()  # the layer's own: a local window
        q = a.q[0].cpu()  # (H, S, d)
        k = expand_groups(a.k, a.q.shape[1])[0].cpu()  # (H, S_k, d)
        out += [head_scale(trace.index, h, q[h], k[h], eligible) for h in range(q.shape[0])]
    return out
