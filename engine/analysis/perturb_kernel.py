"""What every perturbation shares: the change, the two runs' differences, the claims and their checks.

engine/analysis/perturb.py dispatches a request to the one-sequence case (there), a batch
(engine/analysis/perturb_batch.py) or a cross-attention source (engine/analysis/perturb_source.py); each of them
builds on this module, which imports none of them. The claims and the reach threshold are described in
engine/analysis/perturb.py's docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import torch

from engine.errors import InputError, NonFiniteError
from engine.interventions import NO_INTERVENTIONS, ClassicBug, InputShift, Interventions, ValueShift
from engine.masks import MaskSpec
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput

REACH_THRESHOLD = 1e-3  # the changed position's final output must move by at least 0.1% of its size


@dataclass(frozen=True)
class Case:
    """One input under analysis: the model, the input as given and as encoded once, where and in what dtype it
    runs, and the classic bug (if any) that every run of it computes, as the view beside it does."""

    model: AttentionModel
    inp: RunInput
    enc: Encoded
    device: torch.device
    dtype: torch.dtype
    bug: ClassicBug | None = None

    def run(
        self,
        changes: Interventions = NO_INTERVENTIONS,
        *,
        inp: RunInput | None = None,
        enc: Encoded | None = None,
    ) -> ModelRun:
        """The case's forward with its bug and `changes` (an input shift, a value shift); `inp` and `enc`: a changed
        input in place of the case's own (`enc` None with `inp` given: encoded by the model)."""
        encoded = enc if enc is not None else (self.enc if inp is None else None)
        interventions = replace(changes, bug=self.bug)
        given = inp if inp is not None else self.inp
        return self.model.run(given, self.device, self.dtype, interventions=interventions, encoded=encoded)


@dataclass(frozen=True)
class Change:
    kind: Literal["direction", "shift", "token", "value"]
    amount: float = 1.0  # shift: added to every feature of the input vector; direction, value: the direction's norm
    token: str | None = None  # token: the replacement
    seed: int = 0  # direction, value: seeds the random direction


@dataclass(frozen=True)
class Leak:
    layer: int | None  # None: in the final output
    position: int
    delta: float
    item: int | None = None  # the batch item it showed in (batch: another item); None: the changed sequence


@dataclass(frozen=True)
class Check:
    name: str  # causal | window | padding | blocked; a batch: batch, padding_invariance; a source: source_boundary
    claim: str
    holds: bool | None  # None: inconclusive, the change did not reach the model and nothing moved
    max_delta: float  # the largest change at a protected position (0.0 when the claim holds)
    protected: list[int]  # positions the claim says cannot move (after the last layer)
    tested: bool  # False: the change at this position puts nothing under this claim
    first_leak: Leak | None = None  # the first protected position that moved, layer by layer
    protected_by_layer: list[list[int]] = field(default_factory=list)  # per layer: the positions it cannot move


@dataclass(frozen=True)
class PerturbResult:
    tokens: list[str]
    tokens_after: list[str]
    position: int
    layers: list[list[float]]  # per layer, per position: max |change| of the layer's output
    final: str  # what final_delta measures, in words
    final_delta: list[float]
    reach: float  # how far the changed position moved in the final output, relative to its size
    checks: list[Check]
    verdict: str
    bug: ClassicBug | None = None
    item: int | None = None  # a batch: the item changed (tokens and deltas are that item's)
    side: Literal["query", "source"] = "query"  # source: `position` is a cross-attention source position
    batch_tokens: list[list[str]] | None = None  # a batch: every item's labels, padded
    item_delta: list[float] | None = None  # a batch: per item, the largest change in the final output
    source_tokens: list[str] | None = None  # cross-attention: the source's labels, before and after the change
    source_tokens_after: list[str] | None = None
    padding_tolerance: float | None = None  # a batch: padding_invariance's tolerance, relative


def layer_deltas(a: ModelRun, b: ModelRun, item: int = 0) -> list[list[float]]:
    """Per layer, per position: max over features of |b - a| in the layer's output (of batch item `item`)."""
    return [
        (tb.resid_out[item].double() - ta.resid_out[item].double()).abs().amax(dim=-1).tolist()
        for ta, tb in zip(a.layers, b.layers, strict=True)
    ]


def final_delta(a: ModelRun, b: ModelRun, item: int = 0) -> list[float]:
    return (b.result.final[item].double() - a.result.final[item].double()).abs().amax(dim=-1).tolist()


def reach(a: ModelRun, final: list[float], position: int, item: int = 0) -> float:
    """max |after - before| / max |before| of the final output at `position` (0.0 when both are 0)."""
    size = float(a.result.final[item, position].double().abs().max())
    moved = final[position]
    return moved / size if size > 0 else (math.inf if moved > 0 else 0.0)


def final_name(run: ModelRun) -> str:
    return "the logits (next-token scores)" if run.logits is not None else "the last layer's output"


def perturbed_run(case: Case, position: int, change: Change, item: int | None = None) -> ModelRun:
    """The run with `change` at `position` (of batch item `item` only, when given; a token swap: one sequence)."""
    if change.kind == "value":
        return case.run(Interventions(value=(ValueShift(position, change.amount, change.seed, item),)))
    if change.kind in ("shift", "direction"):
        seed = change.seed if change.kind == "direction" else None
        return case.run(Interventions(shift=(InputShift(position, change.amount, seed, item),)))
    assert change.token is not None
    swapped = case.model.swap_token(case.inp, case.enc, position, change.token)
    try:
        swapped_enc = case.model.encode(swapped)
    except InputError as err:  # the replacement is what the caller sent: name it
        raise InputError("change.token", err.message) from err
    return case.run(inp=swapped, enc=swapped_enc)


def span(positions: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0–2, 5, 7–8"."""
    if not positions:
        return "none"
    runs: list[list[int]] = []
    for q in positions:
        if runs and q == runs[-1][-1] + 1:
            runs[-1].append(q)
        else:
            runs.append([q])
    return ", ".join(f"{r[0]}" if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs)


def claim_check(
    name: str, claim: str, protected_by_layer: list[list[int]], deltas: list[list[float]], final: list[float]
) -> Check:
    """The largest change at a protected position, layer by layer and in the final output (last layer's set),
    and where it first appeared."""
    rows = [*zip(protected_by_layer, deltas, strict=True), (protected_by_layer[-1], final)]
    worst, leak = 0.0, None
    for layer, (protected, row) in enumerate(rows):
        for q in protected:
            if row[q] > worst:
                worst = row[q]
            if row[q] != 0.0 and leak is None:
                leak = Leak(layer if layer < len(deltas) else None, q, row[q])
    return Check(
        name,
        claim,
        worst == 0.0,
        worst,
        protected_by_layer[-1],
        tested=any(protected_by_layer),
        first_leak=leak,
        protected_by_layer=[list(p) for p in protected_by_layer],
    )


def mask_checks(m: MaskSpec, s: int, p: int, deltas: list[list[float]], final: list[float]) -> list[Check]:
    """A check per mask in force for a change at `p` of a sequence of `s` positions (a batch item's own masks)."""
    n = len(deltas)
    checks = []
    if m.causal:
        before = list(range(p))
        claim = (
            f"positions before {p} ({span(before)}) are unchanged in every layer: under causal masking no query "
            "sees a later key"
            if before
            else "no position comes before 0, so causal masking protects nothing from this change"
        )
        checks.append(claim_check("causal", claim, [before] * n, deltas, final))
    if m.window is not None:
        w = m.window
        by_layer = [[q for q in range(s) if abs(q - p) > (layer + 1) * (w - 1)] for layer in range(n)]
        claim = (
            f"a window of {w} lets a change travel {w - 1} position{'s' if w != 2 else ''} per layer: after layer l, "
            f"positions more than (l + 1) x {w - 1} away from {p} are unchanged "
            f"(after the last layer: {span(by_layer[-1])})"
        )
        checks.append(claim_check("window", claim, by_layer, deltas, final))
    if m.padding is not None:
        if not m.padding[p]:
            others = [q for q in range(s) if q != p]
            claim = f"position {p} is padding: no query reads a padding key, so no other position changes"
            checks.append(claim_check("padding", claim, [others] * n, deltas, final))
        else:
            claim = (
                f"position {p} is a real token, so the padding mask protects nothing from this change: "
                "perturb a padding position to test it"
            )
            checks.append(claim_check("padding", claim, [[]] * n, deltas, final))
    blocked_q = blocked_queries(m, p)  # p's own query changes with its input
    if blocked_q:
        by_layer = [blocked_q] + [[] for _ in range(n - 1)]
        who = (
            f"queries {span(blocked_q)} have their cells"
            if len(blocked_q) > 1
            else f"query {blocked_q[0]} has its cell"
        )
        claim = (
            f"{who} to key {p} blocked, so layer 0 leaves {'them' if len(blocked_q) > 1 else 'it'} unchanged "
            "(later layers may carry the change through other positions)"
        )
        checks.append(claim_check("blocked", claim, by_layer, deltas, final))
    return checks


def blocked_queries(m: MaskSpec, p: int) -> list[int]:
    """Queries q != p whose cell (q, p) is blocked: the ones layer 0 must leave unchanged."""
    return sorted({q for q, k in m.blocked if k == p and q != p})


def require_finite_deltas(rows: list[list[float]], dtype: torch.dtype) -> None:
    if not all(math.isfinite(v) for row in rows for v in row):
        raise NonFiniteError(
            "change.amount",
            f"the changed input overflowed {str(dtype).removeprefix('torch.')} inside the model: use a smaller shift",
        )


def leak_place(leak: Leak, final: str) -> str:
    return f"in layer {leak.layer}" if leak.layer is not None else f"in {final}"
