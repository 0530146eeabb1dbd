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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from engine.errors import InputError, NonFiniteError
from engine.interventions import InputShift, Interventions
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput


@dataclass(frozen=True)
class Change:
    kind: Literal["shift", "token"]
    amount: float = 1.0  # shift: added to every feature of the position's input vector
    token: str | None = None  # token: the replacement


@dataclass(frozen=True)
class Leak:
    layer: int | None  # None: in the final output
    position: int
    delta: float


@dataclass(frozen=True)
class Check:
    name: str  # causal | window | padding | blocked
    claim: str
    holds: bool
    max_delta: float  # the largest change at a protected position (0.0 when the claim holds)
    protected: list[int]  # positions the claim says cannot move (after the last layer)
    tested: bool  # False: the change at this position puts nothing under this claim
    first_leak: Leak | None = None  # the first protected position that moved, layer by layer


@dataclass(frozen=True)
class PerturbResult:
    tokens: list[str]
    tokens_after: list[str]
    position: int
    layers: list[list[float]]  # per layer, per position: max |change| of the layer's output
    final: str  # what final_delta measures, in words
    final_delta: list[float]
    checks: list[Check]
    verdict: str


def layer_deltas(a: ModelRun, b: ModelRun) -> list[list[float]]:
    """Per layer, per position: max over features of |b - a| in the layer's output (first batch item)."""
    return [
        (tb.resid_out[0].double() - ta.resid_out[0].double()).abs().amax(dim=-1).tolist()
        for ta, tb in zip(a.layers, b.layers, strict=True)
    ]


def final_delta(a: ModelRun, b: ModelRun) -> list[float]:
    return (b.result.final[0].double() - a.result.final[0].double()).abs().amax(dim=-1).tolist()


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
) -> ModelRun:
    if change.kind == "shift":
        shift = Interventions(shift=(InputShift(position, change.amount),))
        return model.run(inp, device, dtype, interventions=shift, encoded=enc)
    assert change.token is not None
    swapped = model.swap_token(inp, enc, position, change.token)
    try:
        swapped_enc = model.encode(swapped)
    except InputError as err:  # the replacement is what the caller sent: name it
        raise InputError("change.token", err.message) from err
    return model.run(swapped, device, dtype, encoded=swapped_enc)


def perturb(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    position: int,
    change: Change,
    device: torch.device,
    dtype: torch.dtype,
) -> PerturbResult:
    """Run the input as given and with `change` at `position`; report what moved and which mask claims hold."""
    s = len(enc.tokens)
    if not 0 <= position < s:
        raise InputError("position", f"got position {position}: the sequence has {s} positions, 0..{s - 1}")
    base = model.run(inp, device, dtype, encoded=enc)
    after = perturbed_run(model, inp, enc, position, change, device, dtype)
    deltas = layer_deltas(base, after)
    final = final_delta(base, after)
    if not all(math.isfinite(v) for row in [*deltas, final] for v in row):
        raise NonFiniteError(
            "change.amount",
            f"the changed input overflowed {str(dtype).removeprefix('torch.')} inside the model: use a smaller shift",
        )
    checks = mask_checks(base, position, deltas, final)
    return PerturbResult(
        tokens=base.tokens,
        tokens_after=after.tokens,
        position=position,
        layers=deltas,
        final=final_name(base),
        final_delta=final,
        checks=checks,
        verdict=verdict(base, position, deltas, final, checks),
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
        name, claim, worst == 0.0, worst, protected_by_layer[-1], tested=any(protected_by_layer), first_leak=leak
    )


def mask_checks(run: ModelRun, p: int, deltas: list[list[float]], final: list[float]) -> list[Check]:
    m, s, n = run.masks, len(run.tokens), len(deltas)
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
    blocked_q = sorted({q for q, k in m.blocked if k == p and q != p})  # p's own query changes with its input
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


def verdict(run: ModelRun, p: int, deltas: list[list[float]], final: list[float], checks: list[Check]) -> str:
    """One line in words: which claims hold, or where the first leak is."""
    where = f"position {p} “{run.tokens[p]}”"
    moved = max(range(len(final)), key=lambda q: final[q])
    leaks = [c for c in checks if c.tested and not c.holds]
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
    safe = sorted(set().union(*(c.protected for c in held)))
    through = "its one layer" if n == 1 else f"all {n} layers"
    return (
        f"{names[0].upper()}{names[1:]} masking {'holds' if len(held) == 1 else 'hold'}: changing {where} left "
        f"positions {_span(safe)} exactly unchanged through {through} and {final_name(run)}; the largest change is "
        f"{final[moved]:.3g}, at position {moved}."
    )
