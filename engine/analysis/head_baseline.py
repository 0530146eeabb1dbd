"""A shuffled baseline for the head-type scores: is this head's score above chance for this input?

The control keeps everything about a head but where its weight goes. Each query row's weights are permuted at
random among the keys that row may attend to (its eligible keys; masked keys keep their 0), and the score is
measured again on the shuffled weights; `permutations` such shuffles, seeded, give the baseline's mean and
standard deviation. A row's weights still sum to 1 and keep their spread (one key at 0.9 stays one key at 0.9,
now on a random eligible key), so a sharp head and a diffuse one are each compared with themselves scattered.

    above = score - mean            z = above / std   (None where std is 0: every shuffle scores the same)

A previous-token head puts its weight on q - 1 and stands far above its shuffles; a uniform head's shuffles are
itself, so it stands at 0. The shuffles are drawn once per input and shared by every head and layer (each head
is measured against the same random placements). Entropy is left out: shuffling a row does not change it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

SHUFFLED = ("previous_token", "duplicate_token", "induction", "bracket_match", "mean_distance")
DEFAULT_PERMUTATIONS = 20

Score = Callable[[Tensor], Tensor | None]  # weights (H, S, S_k) -> (H,) or None


@dataclass(frozen=True)
class Shuffles:
    """`permutations` shuffles of one eligibility grid: row q's j-th eligible key (in key order, `slots[q, j]`)
    takes the weight of key `sources[p, q, j]`, a random eligible key of the same row."""

    slots: Tensor  # (S, S_k) each row's eligible keys first, ascending, then the others
    sources: Tensor  # (P, S, S_k) each row's eligible keys first, in random order, then the others


def draw_shuffles(eligible: Tensor, permutations: int, seed: int) -> Shuffles:
    """Shuffles of `eligible` (S, S_k), seeded: the same seed, the same shuffles, on any device."""
    gen = torch.Generator().manual_seed(seed)
    grid = eligible.cpu()
    slots = torch.argsort((~grid).to(torch.int8), dim=-1, stable=True)
    keys = torch.rand((permutations, *grid.shape), generator=gen, dtype=torch.float64).masked_fill(~grid, 2.0)
    sources = keys.argsort(dim=-1)
    return Shuffles(slots.to(eligible.device), sources.to(eligible.device))


def shuffled(weights: Tensor, slots: Tensor, sources: Tensor) -> Tensor:
    """weights (H, S, S_k) with each row's eligible weights moved as one shuffle (slots, sources: (S, S_k)) says."""
    moved = weights.gather(-1, sources.expand_as(weights))
    return torch.zeros_like(weights).scatter_(-1, slots.expand_as(weights), moved)


def baselines(scores: dict[str, Score], weights: Tensor, shuffles: Shuffles) -> dict[str, tuple[Tensor, Tensor] | None]:
    """Each score's mean and standard deviation (H,) over the shuffles (one shuffle of the weights serves every
    score); None where the score cannot be measured."""
    found: dict[str, list[Tensor] | None] = {name: [] for name in scores}
    for sources in shuffles.sources:
        moved = shuffled(weights, shuffles.slots, sources)
        for name, score in scores.items():
            value = score(moved)
            got = found[name]
            if got is not None:
                found[name] = None if value is None else [*got, value]
    out: dict[str, tuple[Tensor, Tensor] | None] = {}
    for name, got in found.items():
        values = torch.stack(got) if got else None  # (P, H)
        out[name] = None if values is None else (values.mean(dim=0), values.std(dim=0, correction=1))
    return out


def compare(score: float | None, mean: float, std: float) -> dict[str, float | None] | None:
    """A head's score against its shuffles: the baseline's mean and std, the score's distance above it and z."""
    if score is None:
        return None
    above = score - mean
    return {"mean": mean, "std": std, "above": above, "z": above / std if std > 1e-12 else None}
