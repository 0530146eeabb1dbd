"""Perturbation across the boundary a batch adds (engine/analysis/perturb.py is the one-sequence case and its mask
checks; engine/analysis/perturb_source.py the cross-attention one).

A batch (`texts`, each tokenised alone and padded to the longest, each item's padding mask filled in) runs as one
(B, S, D) forward. For a change at position p of item i, beside the mask checks computed on item i with its own
padding:

    batch               every other item j != i is exactly unchanged, in every layer and in the final output:
                        the items of a batch never read each other
    padding_invariance  item i as batched equals item i run alone, unpadded, at each of its real positions, in every
                        layer and in the final output, within PADDING_TOLERANCE[dtype] of that output's size
                        (max |batched - alone| <= tolerance x max |alone|): adding padding leaves every real row
                        unchanged. Two passes of different shapes may round differently, so this one is not exact;
                        it compares the unchanged input, so a change that does not reach the model leaves it tested
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from engine.analysis.perturb_kernel import (
    REACH_THRESHOLD,
    Case,
    Change,
    Check,
    Leak,
    PerturbResult,
    final_delta,
    final_name,
    layer_deltas,
    leak_place,
    mask_checks,
    perturbed_run,
    reach,
    require_finite_deltas,
    span,
)
from engine.errors import InputError, NonFiniteError
from engine.masks import MaskSpec
from engine.models.base import Encoded, ModelRun

# padding_invariance: max |batched - alone| allowed, relative to the output's largest |value| (rounding of two passes)
PADDING_TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
LABELS = {"batch": "batch independence", "padding_invariance": "padding invariance"}


def perturb_batch(
    case: Case, position: int, change: Change, *, item: int | None = None, base: ModelRun | None = None
) -> PerturbResult:
    """The case's batch as given and with `change` at `position` of item `item` (default 0), both with its bug:
    item i's mask checks, the batch check and padding invariance. `base`: the batch as given, where the caller has
    it."""
    enc, dtype = case.enc, case.dtype
    assert enc.batch_tokens is not None and enc.real is not None
    i, b, s = 0 if item is None else item, len(enc.batch_tokens), len(enc.tokens)
    if not 0 <= i < b:
        raise InputError("item", f"got item {i}: the batch has {b} texts, items 0..{b - 1}")
    if not 0 <= position < s:
        raise InputError("position", f"got position {position}: the batch is padded to {s} positions, 0..{s - 1}")
    if base is None:
        base = case.run()
    if change.kind == "token":
        assert change.token is not None
        after = case.run(enc=swap_item_token(case, i, position, change.token))
    else:
        after = perturbed_run(case, position, change, item=i)
    deltas, final = layer_deltas(base, after, i), final_delta(base, after, i)
    require_finite_deltas([*deltas, final], dtype)
    reached = reach(base, final, position, i)
    real = enc.real[i]
    masks = replace(base.masks, padding=None if all(real) else real)
    checks = [*mask_checks(masks, s, position, deltas, final), batch_check(base, after, i)]
    if reached < REACH_THRESHOLD:
        checks = [replace(c, holds=None) if c.tested and c.holds else c for c in checks]
    tolerance = PADDING_TOLERANCE.get(dtype, PADDING_TOLERANCE[torch.float32])
    checks.append(padding_check(case, base, i, tolerance))
    tokens = list(base.batch_tokens[i]) if base.batch_tokens is not None else base.tokens
    delta_items = (after.result.final.double() - base.result.final.double()).abs().flatten(1).amax(dim=1)
    return PerturbResult(
        tokens=tokens,
        tokens_after=list(after.batch_tokens[i]) if after.batch_tokens is not None else after.tokens,
        position=position,
        layers=deltas,
        final=final_name(base),
        final_delta=final,
        reach=reached,
        checks=checks,
        verdict=batch_verdict(tokens, i, position, len(deltas), final_name(base), final, checks, reached),
        bug=case.bug,
        item=i,
        batch_tokens=[list(t) for t in enc.batch_tokens],
        item_delta=delta_items.tolist(),
        padding_tolerance=tolerance,
    )


def swap_item_token(case: Case, item: int, position: int, token: str) -> Encoded:
    """The batch with item `item`'s token at `position` replaced, its row re-embedded and padded as encode_batch
    pads it (with the model's pad token, or zero vectors)."""
    model, inp, enc = case.model, case.inp, case.enc
    assert enc.batch_tokens is not None and enc.real is not None
    s, n = len(enc.tokens), sum(enc.real[item])
    if position >= n and model.pad_token is None:
        raise InputError(
            "position",
            f"position {position} of item {item} is padding, which {model.name} pads with zero vectors, not a token: "
            f"swap a real position (0..{n - 1}) or use a direction change",
        )
    tokens = list(enc.batch_tokens[item][:n]) + ([model.pad_token] * (s - n) if model.pad_token is not None else [])
    one = replace(inp, texts=None, text=None, tokens=tokens)
    swapped = model.swap_token(one, replace(enc, tokens=tokens), position, token)  # a 422 where x is not tokens
    try:
        row = model.encode(swapped)
    except InputError as err:  # the replacement is what the caller sent: name it
        raise InputError("change.token", err.message) from err
    x = enc.x.clone()
    x[item] = 0.0
    x[item, : row.x.shape[0]] = row.x.to(x.dtype)
    labels = [list(t) for t in enc.batch_tokens]
    labels[item][position] = row.tokens[position]
    return replace(enc, x=x, tokens=labels[0], batch_tokens=tuple(tuple(t) for t in labels))


def _outputs(run: ModelRun) -> list[tuple[int | None, Tensor]]:
    """(layer, output) for every layer's output and the final one (layer None), batch first."""
    return [*((t.index, t.resid_out) for t in run.layers), (None, run.result.final)]


def batch_check(base: ModelRun, after: ModelRun, item: int) -> Check:
    """Every item but `item` exactly unchanged, layer by layer and in the final output."""
    b = base.result.final.shape[0]
    others = [j for j in range(b) if j != item]
    worst, leak = 0.0, None
    if others:
        for (layer, before), (_, moved) in zip(_outputs(base), _outputs(after), strict=True):
            d = (moved[others].double() - before[others].double()).abs().amax(dim=-1)  # (B - 1, S)
            worst = max(worst, float(d.max()))
            hit = d.nonzero()
            if leak is None and len(hit):
                j, q = int(hit[0, 0]), int(hit[0, 1])
                leak = Leak(layer, q, float(d[j, q]), item=others[j])
    claim = (
        f"items {span(others)} are unchanged in every layer and in the final output: the items of a batch never "
        f"read each other, so a change in item {item} stays in item {item}"
        if others
        else "the batch has one text: no other item to protect (give two or more texts to test it)"
    )
    n = len(base.layers)
    return Check("batch", claim, worst == 0.0, worst, others, bool(others), leak, [list(others)] * n)


def _unpadded(masks: MaskSpec | None, n: int) -> MaskSpec | None:
    """The batch's masks for one item alone: blocked cells past its n real positions touch only its padding
    (padding keys are masked, padding queries read by no one), so they are left out."""
    if masks is None:
        return None
    return replace(masks, blocked=tuple((q, k) for q, k in masks.blocked if q < n and k < n))


def padding_check(case: Case, base: ModelRun, item: int, tolerance: float) -> Check:
    """Item `item` run alone, unpadded, against its rows in the batched run, over its real positions."""
    inp, dtype = case.inp, case.dtype
    assert inp.texts is not None and base.batch_padding is not None
    real = base.batch_padding[item]
    n = sum(real)
    alone_inp = replace(inp, texts=None, tokens=None, x=None, text=inp.texts[item], masks=_unpadded(inp.masks, n))
    alone = case.run(inp=alone_inp)
    worst, leak = 0.0, None
    for (layer, batched), (_, single) in zip(_outputs(base), _outputs(alone), strict=True):
        want = single[0].double()
        d = (batched[item, :n].double() - want).abs().amax(dim=-1)  # (n,)
        worst = max(worst, float(d.max()))
        over = (d > tolerance * float(want.abs().max())).nonzero()
        if leak is None and len(over):
            q = int(over[0, 0])
            leak = Leak(layer, q, float(d[q]), item=item)
    if not math.isfinite(worst):
        raise NonFiniteError("texts", f"item {item} overflowed {str(dtype).removeprefix('torch.')} inside the model")
    positions = list(range(n))
    pads = len(real) - n
    claim = (
        f"item {item} batched with {pads} padding position{'s' if pads != 1 else ''} equals item {item} run alone "
        f"at its real positions ({span(positions)}) in every layer and in the final output, within {tolerance:g} of "
        "each output's size: no real query reads a padding key"
        if pads
        else f"item {item} is the longest, so it has no padding: batched with the padded items it equals itself run "
        f"alone at every position, within {tolerance:g} of each output's size"
    )
    return Check(
        "padding_invariance", claim, leak is None, worst, positions, True, leak, [positions] * len(base.layers)
    )


def _label(name: str) -> str:
    return LABELS.get(name, f"{name} masking")


def batch_verdict(
    tokens: list[str],
    item: int,
    p: int,
    n: int,
    final_name_: str,
    final: list[float],
    checks: list[Check],
    reached: float,
) -> str:
    """One line: the first leak, or why the change tested nothing, or which claims hold."""
    where = f"item {item}'s position {p} “{tokens[p]}”"
    moved = max(range(len(final)), key=lambda q: final[q])
    for c in checks:
        leak = c.first_leak
        if not c.tested or c.holds is not False or leak is None:
            continue
        at = leak_place(leak, final_name_)
        if c.name == "batch":
            return (
                f"Leak: batch items are not independent. Changing {where} moved item {leak.item}'s position "
                f"{leak.position} by {leak.delta:.3g} {at}: no item may read another."
            )
        if c.name == "padding_invariance":
            return (
                f"Leak: padding is not invisible. Item {item} batched with padding differs from item {item} run alone "
                f"by {leak.delta:.3g} at position {leak.position} {at}, over the tolerance: a real query reads padding."
            )
        return (
            f"Leak: {c.name} masking does not hold. Changing {where} moved its position {leak.position} by "
            f"{leak.delta:.3g} {at}, which the {c.name} mask should protect."
        )
    held = [c for c in checks if c.tested]
    names = ", ".join(_label(c.name) for c in held[:-1]) + " and " + _label(held[-1].name) if len(held) > 1 else ""
    names = names or _label(held[0].name)
    through = "its one layer" if n == 1 else f"all {n} layers"
    invariance = next(c for c in checks if c.name == "padding_invariance")
    alone = f"item {item} is within {invariance.max_delta:.3g} of itself run alone, unpadded"
    if reached < REACH_THRESHOLD:
        return (
            f"Inconclusive: changing {where} moved its own output in {final_name_} by {final[p]:.3g}, {reached:.3g} "
            f"of its size (under the threshold {REACH_THRESHOLD:g}), so the change did not reach the model and tests "
            f"no mask or batch claim: use a direction change or swap the token. Padding invariance holds: {alone}."
        )
    parts = []
    everywhere = sorted(set().union(*(c.protected for c in held if c.name in ("causal", "window", "padding"))))
    if everywhere:
        its = f"its positions {span(everywhere)}" if len(everywhere) > 1 else f"its position {everywhere[0]}"
        parts.append(f"{its} exactly unchanged through {through} and {final_name_}")
    blocked = next((c for c in held if c.name == "blocked"), None)
    if blocked is not None:
        parts.append(f"its queries {span(blocked.protected_by_layer[0])} exactly unchanged in layer 0")
    others = next((c for c in held if c.name == "batch"), None)
    if others is not None:
        items = others.protected
        parts.append(f"{'items' if len(items) > 1 else 'item'} {span(items)} exactly unchanged")
    return (
        f"{names[0].upper()}{names[1:]} hold{'s' if len(held) == 1 else ''}: changing {where} left "
        f"{', and '.join(parts) or 'nothing protected'}, and {alone}; the largest change is {final[moved]:.3g}, at "
        f"position {moved}."
    )
