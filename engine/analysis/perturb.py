"""Perturbation: change one position's input and see which positions move, layer by layer.

"A perturbation test must include all code paths": the two runs go through the model's whole forward
(every layer, residual, LayerNorm and feed-forward), and the claims are read off what moved, not off
the mask matrix. For a change at position p, each mask in force makes a claim:

    causal    every position q < p is exactly unchanged, in every layer and in the final output
    window w  after layer l (0-based), every q with |q - p| > (l + 1)(w - 1) is exactly unchanged:
              a window lets a change travel w - 1 positions per layer, so L layers reach L(w - 1)
    padding   when p is padding, every other position is exactly unchanged (no query reads a padding key)
    blocked   in layer 0, every query q != p whose cell (q, p) is blocked is exactly unchanged (later
              layers may carry the change to q through other positions)

"Exactly" means a difference of 0.0: a mask that holds gives 0 weight, not a small one.

A claim is only tested if the change reaches the model. A uniform shift (the same amount on every feature) is
removed by the first LayerNorm of a pre-LN model, so nothing moves and every claim would "hold" on any engine.
The default change is therefore a seeded random direction with its mean removed, of norm 1. Whatever the change,
`reach` is how far the changed position itself moved in the final output, relative to that output's size
(max |after - before| / max |before|, both at the position); under REACH_THRESHOLD the change did not reach the
model, and a claim nothing broke is "inconclusive" (holds None), never "holds". A leak is a leak at any reach.

A batch (`texts`, `item`) and a cross-attention source (`side`) add their own boundaries and checks:
engine/analysis/perturb_batch.py (batch, padding_invariance) and engine/analysis/perturb_source.py
(source_boundary).

`bug` runs one of the chapter's classic bugs in every layer of both runs, as the view beside it does, so a bug
that lets a later position reach an earlier one fails the causal claim here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

import torch

from engine.errors import InputError, NonFiniteError
from engine.interventions import ClassicBug, InputShift, Interventions, ValueShift
from engine.masks import MaskSpec
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput

REACH_THRESHOLD = 1e-3  # the changed position's final output must move by at least 0.1% of its size


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


def perturbed_run(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    position: int,
    change: Change,
    device: torch.device,
    dtype: torch.dtype,
    bug: ClassicBug | None = None,
    item: int | None = None,
) -> ModelRun:
    """The run with `change` at `position` (of batch item `item` only, when given; a token swap: one sequence)."""
    if change.kind == "value":
        moved = Interventions(value=(ValueShift(position, change.amount, change.seed, item),), bug=bug)
        return model.run(inp, device, dtype, interventions=moved, encoded=enc)
    if change.kind in ("shift", "direction"):
        seed = change.seed if change.kind == "direction" else None
        shift = Interventions(shift=(InputShift(position, change.amount, seed, item),), bug=bug)
        return model.run(inp, device, dtype, interventions=shift, encoded=enc)
    assert change.token is not None
    swapped = model.swap_token(inp, enc, position, change.token)
    try:
        swapped_enc = model.encode(swapped)
    except InputError as err:  # the replacement is what the caller sent: name it
        raise InputError("change.token", err.message) from err
    return model.run(swapped, device, dtype, interventions=Interventions(bug=bug), encoded=swapped_enc)


def perturb(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    position: int,
    change: Change,
    device: torch.device,
    dtype: torch.dtype,
    bug: ClassicBug | None = None,
    *,
    item: int | None = None,
    side: Literal["query", "source"] = "query",
    base: ModelRun | None = None,
) -> PerturbResult:
    """Run the input as given and with `change` at `position` (both with `bug`, if any); report what moved and
    which mask claims hold. A batch (`item`: the item changed) or a source (`side`: which sequence `position` is
    in) also test their own boundaries (engine/analysis/perturb_batch.py). `base`: the run as given (with `bug`),
    where the caller has it already (one sequence or a batch), so it is not computed again."""
    if enc.batch is not None or enc.source is not None:
        from engine.analysis.perturb_batch import perturb_batch  # they build on this module
        from engine.analysis.perturb_source import perturb_source

        if enc.source is not None:
            if item is not None:
                raise InputError("item", "item names a batch item: give texts (a source takes one sequence)")
            return perturb_source(model, inp, enc, position, change, device, dtype, bug, side=side)
        if side != "query":
            raise InputError("side", "side source perturbs a cross-attention source position: give source")
        return perturb_batch(model, inp, enc, position, change, device, dtype, bug, item=item, base=base)
    if item is not None:
        raise InputError("item", "item names a batch item: give texts")
    if side != "query":
        raise InputError("side", "side source perturbs a cross-attention source position: give source")
    s = len(enc.tokens)
    if not 0 <= position < s:
        raise InputError("position", f"got position {position}: the sequence has {s} positions, 0..{s - 1}")
    if base is None:
        base = model.run(inp, device, dtype, interventions=Interventions(bug=bug), encoded=enc)
    after = perturbed_run(model, inp, enc, position, change, device, dtype, bug)
    deltas = layer_deltas(base, after)
    final = final_delta(base, after)
    if not all(math.isfinite(v) for row in [*deltas, final] for v in row):
        raise NonFiniteError(
            "change.amount",
            f"the changed input overflowed {str(dtype).removeprefix('torch.')} inside the model: use a smaller shift",
        )
    reached = reach(base, final, position)
    checks = mask_checks(base.masks, s, position, deltas, final)
    if reached < REACH_THRESHOLD:  # nothing broke, but nothing was tested either
        checks = [replace(c, holds=None) if c.tested and c.holds else c for c in checks]
    return PerturbResult(
        tokens=base.tokens,
        tokens_after=after.tokens,
        position=position,
        layers=deltas,
        final=final_name(base),
        final_delta=final,
        reach=reached,
        checks=checks,
        verdict=verdict(base, position, deltas, final, checks, reached),
        bug=bug,
    )


def _span(positions: list[int]) -> str:
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


def _check(
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
            f"positions before {p} ({_span(before)}) are unchanged in every layer: under causal masking no query "
            "sees a later key"
            if before
            else "no position comes before 0, so causal masking protects nothing from this change"
        )
        checks.append(_check("causal", claim, [before] * n, deltas, final))
    if m.window is not None:
        w = m.window
        by_layer = [[q for q in range(s) if abs(q - p) > (layer + 1) * (w - 1)] for layer in range(n)]
        claim = (
            f"a window of {w} lets a change travel {w - 1} position{'s' if w != 2 else ''} per layer: after layer l, "
            f"positions more than (l + 1) x {w - 1} away from {p} are unchanged "
            f"(after the last layer: {_span(by_layer[-1])})"
        )
        checks.append(_check("window", claim, by_layer, deltas, final))
    if m.padding is not None:
        if not m.padding[p]:
            others = [q for q in range(s) if q != p]
            claim = f"position {p} is padding: no query reads a padding key, so no other position changes"
            checks.append(_check("padding", claim, [others] * n, deltas, final))
        else:
            claim = (
                f"position {p} is a real token, so the padding mask protects nothing from this change: "
                "perturb a padding position to test it"
            )
            checks.append(_check("padding", claim, [[]] * n, deltas, final))
    blocked_q = _blocked_queries(m, p)  # p's own query changes with its input
    if blocked_q:
        by_layer = [blocked_q] + [[] for _ in range(n - 1)]
        who = (
            f"queries {_span(blocked_q)} have their cells"
            if len(blocked_q) > 1
            else f"query {blocked_q[0]} has its cell"
        )
        claim = (
            f"{who} to key {p} blocked, so layer 0 leaves {'them' if len(blocked_q) > 1 else 'it'} unchanged "
            "(later layers may carry the change through other positions)"
        )
        checks.append(_check("blocked", claim, by_layer, deltas, final))
    return checks


def verdict(
    run: ModelRun, p: int, deltas: list[list[float]], final: list[float], checks: list[Check], reached: float
) -> str:
    """One line in words: which claims hold, where the first leak is, or why nothing was tested."""
    where = f"position {p} “{run.tokens[p]}”"
    moved = max(range(len(final)), key=lambda q: final[q])
    leaks = [c for c in checks if c.tested and c.holds is False]
    if leaks:
        c = leaks[0]
        leak = c.first_leak
        assert leak is not None
        at = f"in layer {leak.layer}" if leak.layer is not None else f"in {final_name(run)}"
        return (
            f"Leak: {c.name} masking does not hold. Changing {where} moved position {leak.position} by "
            f"{leak.delta:.3g} {at}, which the {c.name} mask should protect."
        )
    held = [c for c in checks if c.tested]
    n = len(deltas)
    if not held:
        return (
            f"No mask in force protects any position from a change at {where}: every position may move "
            f"(largest change {final[moved]:.3g}, at position {moved})."
        )
    names = " and ".join(c.name for c in held)
    if reached < REACH_THRESHOLD:
        return (
            f"Inconclusive: changing {where} moved its own output in {final_name(run)} by {final[p]:.3g}, "
            f"{reached:.3g} of its size (under the threshold {REACH_THRESHOLD:g}), so the change did not reach the "
            f"model and nothing tests the {names} mask (a LayerNorm removes a uniform shift): use a direction "
            "change or swap the token."
        )
    through = "its one layer" if n == 1 else f"all {n} layers"
    parts = []
    everywhere = sorted(set().union(*(c.protected for c in held if c.name != "blocked")))
    if everywhere:
        parts.append(f"positions {_span(everywhere)} exactly unchanged through {through} and {final_name(run)}")
    blocked = next((c for c in held if c.name == "blocked"), None)
    if blocked is not None:  # its claim is about layer 0 only; later layers may carry the change on
        qs = _blocked_queries(run.masks, p)
        who = f"queries {_span(qs)}" if len(qs) > 1 else f"query {qs[0]}"
        parts.append(
            f"{who} exactly unchanged in layer 0, where {'their cells' if len(qs) > 1 else 'its cell'} "
            f"to key {p} {'are' if len(qs) > 1 else 'is'} blocked"
        )
    return (
        f"{names[0].upper()}{names[1:]} masking {'holds' if len(held) == 1 else 'hold'}: changing {where} left "
        f"{', and '.join(parts)}; the largest change is {final[moved]:.3g}, at position {moved}."
    )


def _blocked_queries(m: MaskSpec, p: int) -> list[int]:
    """Queries q != p whose cell (q, p) is blocked: the ones layer 0 must leave unchanged."""
    return sorted({q for q, k in m.blocked if k == p and q != p})
