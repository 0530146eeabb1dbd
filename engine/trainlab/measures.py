"""What a snapshot measures, on the task's fixed probe and held-out set.

Per head, from the probe's weights W (H, T, T) and scores before the softmax (the causal mask's cells left out):

    entropy           engine/analysis/heads.py mean_entropy: mean over queries of -sum_k W ln W, in nats
    previous_token    heads.py previous_token_score: mean over queries of W[q, q - 1]
    induction         heads.py induction_score on a random segment of L words twice: mean of W[q, q - L + 1]
    bracket           engine/analysis/brackets.py bracket_match_score: closing bracket -> its opening one
                      (None for a task without brackets)
    similarity        within a layer, engine/stats.py head_similarity: the cosine similarity of two heads' whole
                      patterns, flattened                                                          [L][H][H]
    max_abs_score     the largest |score| before the softmax, over the cells the mask leaves
    softmax_jacobian  the Frobenius norm of the softmax's Jacobian diag(p) - p p^T, mean over the probe's rows:
                      ||J||^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2; 0 for a one-hot row (no gradient gets
                      through), 1/n - 1/n^2 for a uniform row over n keys

And for the model:

    held_out_loss     mean next-token loss over the held-out set's counted targets
    future_reliance   each held-out row predicts at one position t (spread over the row); the tokens after t are
                      replaced with others drawn from a fixed seed (the answer at t + 1 among them) and the loss at t
                      is read again: the mean increase. 0 with the causal mask (nothing after t is seen); a model
                      without it that reads the answer loses it and the figure is large
    grad_norm         the gradient's norm per parameter group (model.parameter_groups), from the step's backward
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.analysis.brackets import bracket_match_score
from engine.analysis.heads import induction_score, mean_entropy, previous_token_score
from engine.stats import head_similarity
from engine.trainlab.model import Record, TrainModel, mean_loss, next_token_losses, parameter_groups
from engine.trainlab.tasks import Batch, Probe

FUTURE_SEED = 60_757
Grid = list[list[float | None]]  # [layer][head]


def per_head(values: Tensor | None, heads: int) -> list[float | None]:
    return [None] * heads if values is None else [float(v) for v in values]


def similarity(weights: Tensor) -> list[list[float]]:
    """(H, T, T) -> [H][H]: engine/stats.py head_similarity, the cosine similarity of the heads' flattened patterns."""
    return head_similarity(weights).clamp(-1.0, 1.0).tolist()


def max_abs_score(scores: Tensor, eligible: Tensor | None) -> list[float]:
    """(H, T, T) -> [H]: the largest |score| among the cells the mask leaves."""
    found = scores.abs() if eligible is None else scores.abs().masked_fill(~eligible, 0.0)
    return found.amax(dim=(-1, -2)).tolist()


def softmax_jacobian(weights: Tensor) -> list[float]:
    """(H, T, T) -> [H]: mean over rows of the Frobenius norm of diag(p) - p p^T."""
    s2 = (weights**2).sum(dim=-1)
    s3 = (weights**3).sum(dim=-1)
    return (s2 - 2 * s3 + s2**2).clamp_min(0.0).sqrt().mean(dim=-1).tolist()


def head_measures(probe: Probe, record: Record, induction_record: Record, causal: bool) -> dict[str, Any]:
    """Every per-head measure of the probe's record (one row each); `induction_record` is the repeated probe's."""
    t = len(probe.ids)
    eligible = torch.ones(t, t, dtype=torch.bool).tril() if causal else None
    out: dict[str, Any] = {
        k: [] for k in ("entropy", "previous_token", "induction", "bracket", "similarity", "max_abs_score")
    }
    out["softmax_jacobian"] = []
    for (scores, weights), (_, repeated) in zip(record, induction_record, strict=True):
        w = weights[0].detach().double()  # (H, T, T)
        h = w.shape[0]
        out["entropy"].append(per_head(mean_entropy(w, eligible), h))
        out["previous_token"].append(per_head(previous_token_score(w, eligible), h))
        ind = induction_score(repeated[0].detach().double(), 0, probe.segment_len, eligible)
        out["induction"].append(per_head(ind, h))
        bracket = None if probe.brackets is None else bracket_match_score(w, probe.brackets, eligible)
        out["bracket"].append(per_head(bracket, h) if probe.brackets is not None else None)
        out["similarity"].append(similarity(w))
        out["max_abs_score"].append(max_abs_score(scores[0].detach().double(), eligible))
        out["softmax_jacobian"].append(softmax_jacobian(w))
    if probe.brackets is None:
        return {**out, "bracket": None}
    return out


def finite(value: float) -> float | None:
    """A JSON-able float: None where training diverged to inf or NaN."""
    return value if math.isfinite(value) else None


@torch.no_grad()
def held_out_measures(model: TrainModel, held: Batch, vocab: int) -> dict[str, float | None]:
    """held_out_loss and future_reliance on the task's held-out set (see the module's docstring)."""
    tokens = held.tokens
    b, t = tokens.shape
    losses = next_token_losses(model(tokens), tokens)  # (B, T - 1)
    at = (torch.arange(b) * (t - 1)) // b  # (B,): one predicted position per row, spread over the row
    changed = tokens.clone()
    gen = torch.Generator().manual_seed(FUTURE_SEED)
    later = torch.arange(t)[None, :] > at[:, None]  # (B, T): the tokens after each row's position
    changed[later] = torch.randint(vocab, (int(later.sum()),), generator=gen)
    perturbed = F.cross_entropy(model(changed)[torch.arange(b), at], tokens[torch.arange(b), at + 1], reduction="none")
    reliance = float((perturbed - losses[torch.arange(b), at]).mean())
    return {"held_out_loss": finite(float(mean_loss(losses, held.counted))), "future_reliance": finite(reliance)}


def grad_norms(model: TrainModel) -> dict[str, float | None]:
    """The gradient's norm per parameter group, from the last backward (0 where a group has no gradient)."""
    out: dict[str, float | None] = {}
    for name, params in parameter_groups(model).items():
        squares = [p.grad.detach().double().pow(2).sum() for p in params if p.grad is not None]
        out[name] = finite(float(torch.stack(squares).sum().sqrt())) if squares else 0.0
    return out
