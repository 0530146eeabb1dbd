"""The ready-made experiments: the seeds' claims about training attention, each one click on the page.

Each is data: an id, a title, the specs it compares (one or two, run side by side), the measure that shows the
claim, what to look at, and the claim as a check over the runs' measures. `check(runs)` takes each spec's
snapshots' measures in step order (runs[i] for specs[i]) and returns (held, figure): whether the claim held and
the number it read, so a page or a test can say "held: 0.93 >= 0.5".

    induction-head   the induction head forms in 2 layers and not in 1 (Olsson et al.'s phase change)
    no-scale         without 1/sqrt(d_k) the softmax starts concentrated (entropy near 0) and its Jacobian shrinks
    no-warmup        a high learning rate without warm-up: the entropy collapses early and the loss spikes
    shared-heads     heads that share their projections stay identical; independent heads part
    one-vs-four      one head against four at the same width
    no-causal        without the causal mask a next-token model reads the answer: the held-out loss falls towards
                     0 and future_reliance says it reads ahead
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.trainlab.spec import TrainSpec

Measures = dict[str, Any]
Check = Callable[[Sequence[Sequence[Measures]]], tuple[bool, float]]


@dataclass(frozen=True)
class Experiment:
    id: str
    title: str
    specs: tuple[TrainSpec, ...]  # 1 or 2, run side by side
    labels: tuple[str, ...]  # one per spec: what differs ("2 layers", "1 layer")
    measure: str  # the measure key that shows the claim
    look_at: str  # what to look at, one or two sentences
    claim: str  # the claim in words, as check() tests it
    check: Check


def grid_values(grid: Any) -> list[float]:
    """Every measured number of a [layer][head] (or [layer][head][head]) grid, None left out."""
    if grid is None:
        return []
    if isinstance(grid, int | float):
        return [float(grid)]
    return [v for row in grid for v in grid_values(row)]


def best(measures: Measures, key: str, layer: int | None = None) -> float:
    """The largest value of a [layer][head] measure (of one layer, or of every layer)."""
    grid = measures[key] if layer is None else [measures[key][layer]]
    values = grid_values(grid)
    return max(values) if values else float("nan")


def mean(measures: Measures, key: str) -> float:
    values = grid_values(measures[key])
    return sum(values) / len(values) if values else float("nan")


def lowest_similarity(measures: Measures) -> float:
    """The lowest similarity between two different heads of one layer."""
    grids = measures["similarity"]
    pairs = [row[j] for layer in grids for i, row in enumerate(layer) for j in range(len(row)) if j != i]
    return min(pairs) if pairs else 1.0


def induction_forms(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    two, one = best(runs[0][-1], "induction"), best(runs[1][-1], "induction")
    return two >= 0.5 and one < 0.2, two - one


def saturated_at_start(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    on, off = mean(runs[0][0], "entropy"), mean(runs[1][0], "entropy")
    ratio = off / on if on > 0 else float("inf")
    return ratio < 0.5, ratio


def collapse_without_warmup(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    """The run without warm-up reaches a lower mean entropy in its first snapshots than the one with warm-up."""
    early = 4  # snapshots after step 0

    def lowest(run: Sequence[Measures]) -> float:
        return min(mean(m, "entropy") for m in run[1 : early + 1])

    warm, cold = lowest(runs[0]), lowest(runs[1])
    return cold < warm, warm - cold


def shared_stay_identical(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    shared, independent = lowest_similarity(runs[0][-1]), lowest_similarity(runs[1][-1])
    return shared >= 0.9999 and independent < 0.9, independent


def four_heads_lower_loss(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    one, four = runs[0][-1]["held_out_loss"], runs[1][-1]["held_out_loss"]
    return four < one, one - four


def reads_ahead(runs: Sequence[Sequence[Measures]]) -> tuple[bool, float]:
    masked, unmasked = runs[0][-1], runs[1][-1]
    ratio = unmasked["held_out_loss"] / masked["held_out_loss"]
    return ratio < 0.5 and unmasked["future_reliance"] > 1.0 and abs(masked["future_reliance"]) < 1e-3, ratio


INDUCTION = TrainSpec(task="induction", layers=2, heads=4, width=64, positions=64, lr=3e-3, steps=1000)

EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        id="induction-head",
        title="The induction head forms",
        specs=(INDUCTION, TrainSpec(**{**INDUCTION.__dict__, "layers": 1})),
        labels=("2 layers", "1 layer"),
        measure="induction",
        look_at=(
            "Watch the induction score of the 2-layer run's second layer: flat near 0, then a jump within a few "
            "snapshots as the loss drops (the phase change); a previous-token head forms in layer 0 at the same "
            "time. The 1-layer run has no earlier layer to read 'the word before' from, and never gets there."
        ),
        claim="the 2-layer model's best induction score is at least 0.5 and the 1-layer model's stays under 0.2",
        check=induction_forms,
    ),
    Experiment(
        id="no-scale",
        title="Without 1/sqrt(d_k)",
        specs=(
            TrainSpec(task="induction", width=128, heads=4, steps=300),
            TrainSpec(task="induction", width=128, heads=4, steps=300, scale=False),
        ),
        labels=("scaled", "unscaled"),
        measure="entropy",
        look_at=(
            "At step 0 the unscaled heads' rows already sit on one or two keys: mean entropy about a quarter of the "
            "scaled run's, the largest |score| about six times as large. Without the scale the scores keep growing "
            "as it trains and the softmax's Jacobian falls below the scaled run's: less gradient reaches Q and K."
        ),
        claim="at step 0 the unscaled run's mean entropy is under half of the scaled run's",
        check=saturated_at_start,
    ),
    Experiment(
        id="no-warmup",
        title="No warm-up at a high learning rate",
        specs=(
            TrainSpec(task="induction", lr=2e-2, warmup=100, steps=300),
            TrainSpec(task="induction", lr=2e-2, warmup=0, steps=300),
        ),
        labels=("warm-up 100 steps", "no warm-up"),
        measure="entropy",
        look_at=(
            "In the first snapshots the run without warm-up takes full-size steps from random weights: its heads' "
            "entropy falls towards 0 (collapse) and its loss jumps, where the warmed-up run moves smoothly."
        ),
        claim="in its first four snapshots the run without warm-up reaches a lower mean entropy",
        check=collapse_without_warmup,
    ),
    Experiment(
        id="shared-heads",
        title="Heads that share projections stay identical",
        specs=(
            TrainSpec(task="induction", init="shared", steps=300),
            TrainSpec(task="induction", steps=300),
        ),
        labels=("shared q/k/v", "independent"),
        measure="similarity",
        look_at=(
            "With one set of W_Q, W_K and W_V for every head of a layer, the heads compute one pattern: their "
            "similarity is 1.0 at every step. Independent heads differ from the start and stay apart."
        ),
        claim="the shared run's heads keep similarity 1.0 while the independent run's fall below 0.9",
        check=shared_stay_identical,
    ),
    Experiment(
        id="one-vs-four",
        title="One head against four",
        specs=(
            TrainSpec(task="brackets", heads=1, steps=500),
            TrainSpec(task="brackets", heads=4, steps=500),
        ),
        labels=("1 head", "4 heads"),
        measure="held_out_loss",
        look_at=(
            "At the same width, four heads can attend to four things at once (the matching bracket, the previous "
            "token, ...), where one head must blend them in one pattern; compare their held-out losses and maps."
        ),
        claim="the four-head run ends with a lower held-out loss",
        check=four_heads_lower_loss,
    ),
    Experiment(
        id="no-causal",
        title="No causal mask: the model cheats",
        specs=(
            TrainSpec(task="induction", steps=300),
            TrainSpec(task="induction", steps=300, causal=False),
        ),
        labels=("causal", "no causal mask"),
        measure="held_out_loss",
        look_at=(
            "Without the mask each position can see the very token it is asked to predict: a head learns to look one "
            "step ahead and the loss falls towards 0. future_reliance (the loss added when later tokens are "
            "replaced) is 0 with the mask and large without."
        ),
        claim=(
            "the unmasked run's held-out loss is under half of the masked run's, and only it relies on the future "
            "(future_reliance above 1 nat, against under 0.001 with the mask)"
        ),
        check=reads_ahead,
    ),
)

BY_ID = {e.id: e for e in EXPERIMENTS}
