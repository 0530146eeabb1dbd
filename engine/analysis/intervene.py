"""Interventions on heads and edges: run once as given, once with the changes, and report what moved.

Ablating head h of layer l with mode "zero" sets its contexts to 0 before W_O, so the layer's attention
output changes by exactly -contexts_h W_O[h] (the rows of W_O that read head h); "mean" replaces them by
their mean over the live query positions. An edge edit sets one attention weight and rescales the row's
other eligible weights so that it still sums to 1. For models that predict tokens, the top-k next
tokens and the mean next-token loss (nats) before and after say what the change did to the output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from engine.analysis.perturb_kernel import final_delta, final_name, layer_deltas
from engine.interventions import Interventions
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput, top_predictions
from engine.vocab import token_ids


@dataclass(frozen=True)
class Predictions:
    before: list[list[dict[str, Any]]]  # per position, top-k [{token, p}]
    after: list[list[dict[str, Any]]]
    losses_before: list[float]  # per position t < S - 1: -ln p(token t + 1)
    losses_after: list[float]

    @property
    def loss_before(self) -> float | None:
        return _mean(self.losses_before)

    @property
    def loss_after(self) -> float | None:
        return _mean(self.losses_after)


@dataclass(frozen=True)
class InterventionResult:
    before: ModelRun
    after: ModelRun
    layers: list[list[float]]  # per layer, per position: max |change| of the layer's output
    final: str
    final_delta: list[float]
    predictions: Predictions | None  # models that predict tokens only


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def next_token_losses(logits: torch.Tensor, tokens: list[str], vocab: list[str]) -> list[float]:
    """logits (S, V) -> S - 1 losses: column t predicts token t + 1, in nats. One token has no next-token pair:
    no losses, and the mean loss is None (not NaN); nor has a run with a token outside the vocabulary."""
    ids = token_ids(vocab, tokens[1:]) if len(tokens) >= 2 else None
    if ids is None:
        return []
    targets = torch.tensor(ids, device=logits.device)
    return F.cross_entropy(logits[:-1].float(), targets, reduction="none").tolist()


def predictions(model: AttentionModel, before: ModelRun, after: ModelRun, top_k: int) -> Predictions | None:
    vocab = model.info.vocab
    if before.logits is None or after.logits is None or vocab is None:
        return None
    return Predictions(
        before=top_predictions(before.logits[0], vocab, top_k),
        after=top_predictions(after.logits[0], vocab, top_k),
        losses_before=next_token_losses(before.logits[0], before.tokens, vocab),
        losses_after=next_token_losses(after.logits[0], after.tokens, vocab),
    )


def intervene(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    interventions: Interventions,
    device: torch.device,
    dtype: torch.dtype,
    top_k: int = 5,
) -> InterventionResult:
    """Every layer, as given and with the interventions; the change per layer and in the final output. A classic
    bug in `interventions` (demo_bug) runs in both: the view's own code, before and after the heads are changed."""
    before = model.run(inp, device, dtype, interventions=Interventions(bug=interventions.bug), encoded=enc)
    after = model.run(inp, device, dtype, interventions=interventions, encoded=enc)
    return InterventionResult(
        before=before,
        after=after,
        layers=layer_deltas(before, after),
        final=final_name(before),
        final_delta=final_delta(before, after),
        predictions=predictions(model, before, after, top_k),
    )
