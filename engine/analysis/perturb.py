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
(source_boundary). This module is the one-sequence case and the way in to all three; what they share (the change,
the runs' differences, the mask checks) is engine/analysis/perturb_kernel.py.

`bug` runs one of the chapter's classic bugs in every layer of both runs, as the view beside it does, so a bug
that lets a later position reach an earlier one fails the causal claim here too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from engine.analysis.perturb_batch import perturb_batch
from engine.analysis.perturb_kernel import (
    REACH_THRESHOLD,
    Case,
    Change,
    Check,
    PerturbResult,
    blocked_queries,
    final_delta,
    final_name,
    layer_deltas,
    mask_checks,
    perturbed_run,
    reach,
    require_finite_deltas,
    span,
)
from engine.analysis.perturb_source import perturb_source
from engine.errors import InputError
from engine.models.base import ModelRun


def perturb(
    case: Case,
    position: int,
    change: Change,
    *,
    item: int | None = None,
    side: Literal["query", "source"] = "query",
    base: ModelRun | None = None,
) -> PerturbResult:
    """Run the case's input as given and with `change` at `position` (both with its bug, if any); report what moved
    and which mask claims hold. A batch (`item`: the item changed) or a source (`side`: which sequence `position` is
    in) also test their own boundaries (engine/analysis/perturb_batch.py). `base`: the run as given (with `bug`),
    where the caller has it already (one sequence or a batch), so it is not computed again."""
    enc = case.enc
    if enc.batch is not None or enc.source is not None:
        if enc.source is not None:
            if item is not None:
                raise InputError("item", "item names a batch item: give texts (a source takes one sequence)")
            return perturb_source(case, position, change, side=side)
        if side != "query":
            raise InputError("side", "side source perturbs a cross-attention source position: give source")
        return perturb_batch(case, position, change, item=item, base=base)
    if item is not None:
        raise InputError("item", "item names a batch item: give texts")
    if side != "query":
        raise InputError("side", "side source perturbs a cross-attention source position: give source")
    s = len(enc.tokens)
    if not 0 <= position < s:
        raise InputError("position", f"got position {position}: the sequence has {s} positions, 0..{s - 1}")
    if base is None:
        base = case.run()
    after = perturbed_run(case, position, change)
    deltas = layer_deltas(base, after)
    final = final_delta(base, after)
    require_finite_deltas([*deltas, final], case.dtype)
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
        bug=case.bug,
    )


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
        parts.append(f"positions {span(everywhere)} exactly unchanged through {through} and {final_name(run)}")
    blocked = next((c for c in held if c.name == "blocked"), None)
    if blocked is not None:  # its claim is about layer 0 only; later layers may carry the change on
        qs = blocked_queries(run.masks, p)
        who = f"queries {span(qs)}" if len(qs) > 1 else f"query {qs[0]}"
        parts.append(
            f"{who} exactly unchanged in layer 0, where {'their cells' if len(qs) > 1 else 'its cell'} "
            f"to key {p} {'are' if len(qs) > 1 else 'is'} blocked"
        )
    return (
        f"{names[0].upper()}{names[1:]} masking {'holds' if len(held) == 1 else 'hold'}: changing {where} left "
        f"{', and '.join(parts)}; the largest change is {final[moved]:.3g}, at position {moved}."
    )
