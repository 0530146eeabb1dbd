"""Ablation importance beside attention: how much each head matters, measured, not read off its map.

For every head, the model runs its whole forward again with that head zero-ablated (its contexts set to 0 before
W_O, engine/interventions.py HeadAblation) and the effect is

    loss      mean next-token loss (nats) with the head ablated, minus without: decoders whose every input token
              is in their vocabulary (positive: the head helped predict)
    output    mean over positions of |final_ablated - final| (L2): encoders, and inputs a loss cannot score

A head can be looked at a lot and matter little (a sink head, a duplicate) or matter while its map looks plain, so
the effect sits next to the head-type scores with the Spearman rank correlation between them: a correlation near 0
says the attention score is no guide to what the head does on this input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.interventions import HeadAblation, Interventions
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput
from engine.vocab import token_ids


@dataclass(frozen=True)
class AblationEffects:
    metric: Literal["loss", "output"]
    baseline: float  # the unablated loss (nats), or 0.0 for output
    effects: list[list[float]]  # layers x heads: the change when that head alone is zero-ablated


def loss_targets(model: AttentionModel, run: ModelRun) -> Tensor | None:
    """The next-token ids of the run's tokens, when the model predicts tokens and knows every one of them."""
    vocab = model.info.vocab
    if run.logits is None or not vocab or len(run.tokens) < 2 or run.batch_tokens is not None:
        return None
    ids = token_ids(vocab, run.tokens[1:])
    return None if ids is None else torch.tensor(ids, device=run.logits.device)


def mean_loss(logits: Tensor, targets: Tensor) -> float:
    return float(F.cross_entropy(logits[0, :-1].double(), targets))


def ablation_effects(
    model: AttentionModel,
    inp: RunInput,
    base: ModelRun,
    device: torch.device,
    dtype: torch.dtype,
    encoded: Encoded | None = None,
) -> AblationEffects:
    """Every head's effect on `inp` when zero-ablated alone; `base` is the unablated run of the same input."""
    targets = loss_targets(model, base)
    n_layers, n_heads = len(base.layers), base.layers[0].attn.weights.shape[1]
    base_final = base.result.final.double()
    baseline = mean_loss(base.result.final, targets) if targets is not None else 0.0
    effects: list[list[float]] = []
    for layer in range(n_layers):
        row = []
        for head in range(n_heads):
            ablated = model.run(
                inp, device, dtype, interventions=Interventions(ablate=(HeadAblation(layer, head),)), encoded=encoded
            )
            final = ablated.result.final
            if targets is not None:
                row.append(mean_loss(final, targets) - baseline)
            else:
                row.append(float((final.double() - base_final).norm(dim=-1).mean()))
        effects.append(row)
    return AblationEffects("loss" if targets is not None else "output", baseline, effects)


def spearman(a: Sequence[float | None], b: Sequence[float | None]) -> float | None:
    """Spearman's rank correlation over the pairs where both are numbers (ties ranked by their mean rank); None
    with fewer than 3 pairs or a constant side."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    rx, ry = ranks([p[0] for p in pairs]), ranks([p[1] for p in pairs])
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((x - mx) * (y - my) for x, y in zip(rx, ry, strict=True))
    vx = sum((x - mx) ** 2 for x in rx)
    vy = sum((y - my) ** 2 for y in ry)
    if vx == 0 or vy == 0:
        return None
    return cov / (vx * vy) ** 0.5


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out
