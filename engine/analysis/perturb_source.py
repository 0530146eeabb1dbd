"""Perturbation across cross-attention's information boundary (engine/analysis/perturb.py is the one-sequence case).

With a source, keys and values come from the source in every layer and queries from the request's own input. The
engine never transforms the source (every layer reads the same one, as given), so the boundary is what a query
reads, and a change on either side makes one claim, `source_boundary`:

    side query    changing query p leaves every other query exactly unchanged, in every layer and in the final
                  output: a query reads the source, never another query
    side source   changing source position j leaves exactly unchanged every query whose cell (q, j) is masked (the
                  source's padding, blocked cells), in every layer and in the final output: a query reads a source
                  key only through its eligible cell

The masks of one sequence (causal, window) compare positions that do not line up across two sequences, and the
engine refuses them with a source; its padding is the source's own (`source.padding`).

On the query side `reach` is the changed query's own final output, as for one sequence. On the source side it is
how far source position j's keys and values moved in layer 0, relative to their size: the change reached the
attention even where the claim is that no query may see it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from engine.analysis.perturb_kernel import (
    REACH_THRESHOLD,
    Case,
    Change,
    Check,
    PerturbResult,
    claim_check,
    final_delta,
    final_name,
    layer_deltas,
    leak_place,
    perturbed_run,
    reach,
    require_finite_deltas,
    span,
)
from engine.errors import InputError
from engine.interventions import random_direction
from engine.models.base import Encoded, ModelRun, RunInput


def perturb_source(
    case: Case, position: int, change: Change, *, side: Literal["query", "source"] = "query"
) -> PerturbResult:
    """The case's run as given and with `change` at query `position` (side query) or source `position` (side
    source), both with its bug: the source_boundary check."""
    enc = case.enc
    assert enc.source is not None
    s_q, s_k = len(enc.tokens), len(enc.source.tokens)
    s = s_q if side == "query" else s_k
    if not 0 <= position < s:
        where = "the queries have" if side == "query" else "the source has"
        raise InputError("position", f"got position {position}: {where} {s} positions, 0..{s - 1} (side {side})")
    base = case.run()
    if side == "query":
        if change.kind == "value":
            raise InputError(
                "change.kind",
                "with a source, every value vector is a source position's: move one with side source",
            )
        after = perturbed_run(case, position, change)
    elif change.kind == "value":  # the value vectors are the source's: ValueShift moves source position j's
        after = perturbed_run(case, position, change)
    else:
        moved_inp, moved = changed_source(case, position, change)
        after = case.run(inp=moved_inp, enc=moved)
    deltas, final = layer_deltas(base, after), final_delta(base, after)
    require_finite_deltas([*deltas, final], case.dtype)
    n = len(deltas)
    if side == "query":
        reached = reach(base, final, position)
        others = [q for q in range(s_q) if q != position]
        claim = (
            f"queries {span(others)} are unchanged in every layer and in the final output: a query reads the "
            f"source, never another query, so a change at query {position} stays at query {position}"
            if others
            else "there is one query: no other query to protect"
        )
        check = claim_check("source_boundary", claim, [others] * n, deltas, final)
    else:
        reached = kv_reach(base, after, position)
        shut = [q for q in range(s_q) if not bool(base.eligible[q, position])]
        claim = (
            f"queries {span(shut)} have their cell to source position {position} masked, so they are unchanged in "
            "every layer and in the final output: a query reads a source key only through its eligible cell"
            if shut
            else f"every query's cell to source position {position} is eligible, so the boundary protects nothing "
            "from this change: mark it padding in source.padding, or block cells to it, to test it"
        )
        check = claim_check("source_boundary", claim, [shut] * n, deltas, final)
    if reached < REACH_THRESHOLD and check.tested and check.holds:
        check = replace(check, holds=None)
    source_after = after.source_tokens
    return PerturbResult(
        tokens=base.tokens,
        tokens_after=after.tokens,
        position=position,
        layers=deltas,
        final=final_name(base),
        final_delta=final,
        reach=reached,
        checks=[check],
        verdict=source_verdict(base, side, position, final, check, reached),
        bug=case.bug,
        side=side,
        source_tokens=base.source_tokens,
        source_tokens_after=source_after,
    )


def changed_source(case: Case, j: int, change: Change) -> tuple[RunInput, Encoded]:
    """The input with source position j's input vector moved (direction, shift) or its token swapped."""
    model, inp, enc = case.model, case.inp, case.enc
    src, given = enc.source, inp.source
    assert src is not None and given is not None
    if change.kind == "token":
        assert change.token is not None
        if not src.from_tokens:
            raise InputError(
                "change.kind",
                f"{model.name} reads the source as x, not token strings: a token swap changes nothing; "
                "shift the input instead",
            )
        tokens = list(src.tokens)
        tokens[j] = change.token
        swapped = replace(inp, source=replace(given, text=None, tokens=tokens, x=None))
        try:
            return swapped, model.encode(swapped)
        except InputError as err:  # the replacement is what the caller sent: name it
            raise InputError("change.token", err.message) from err
    x = src.x.clone()
    if change.kind == "shift":
        x[j] += change.amount
    else:
        x[j] += random_direction(x.shape[-1], change.seed, change.amount).to(x)
    return inp, replace(enc, source=replace(src, x=x))


def kv_reach(base: ModelRun, after: ModelRun, j: int) -> float:
    """max |after - before| / max |before| of source position j's keys and values in layer 0 (every head)."""
    a, b = base.layers[0].attn, after.layers[0].attn
    moved = max(
        float((tb[..., j, :].double() - ta[..., j, :].double()).abs().max()) for ta, tb in ((a.k, b.k), (a.v, b.v))
    )
    size = max(float(t[..., j, :].double().abs().max()) for t in (a.k, a.v))
    return moved / size if size > 0 else (float("inf") if moved > 0 else 0.0)


def source_verdict(run: ModelRun, side: str, p: int, final: list[float], check: Check, reached: float) -> str:
    """One line: the leak, why nothing was tested, or the boundary holding."""
    tokens = run.tokens if side == "query" else run.source_tokens
    assert tokens is not None
    where = f"{'query' if side == 'query' else 'source'} position {p} “{tokens[p]}”"
    moved = max(range(len(final)), key=lambda q: final[q])
    name = final_name(run)
    leak = check.first_leak
    if check.holds is False and leak is not None:
        why = (
            "a query reads the source, never another query"
            if side == "query"
            else "its cell to that source key is masked"
        )
        return (
            f"Leak: the cross-attention boundary does not hold. Changing {where} moved query {leak.position} by "
            f"{leak.delta:.3g} {leak_place(leak, name)}: {why}."
        )
    if not check.tested:
        return (
            f"Nothing is protected from a change at {where}: every query may move (largest change "
            f"{final[moved]:.3g}, at query {moved})."
        )
    if reached < REACH_THRESHOLD:
        what = "its own output" if side == "query" else "its keys and values in layer 0"
        return (
            f"Inconclusive: changing {where} moved {what} by {reached:.3g} of their size (under the threshold "
            f"{REACH_THRESHOLD:g}), so the change did not reach the model and nothing tests the boundary: use a "
            "direction change."
        )
    n = len(run.layers)
    through = "its one layer" if n == 1 else f"all {n} layers"
    qs = check.protected
    who = f"queries {span(qs)}" if len(qs) > 1 else f"query {qs[0]}"
    whose = (
        ""
        if side == "query"
        else f", whose cell{'s' if len(qs) > 1 else ''} to it {'are' if len(qs) > 1 else 'is'} masked,"
    )
    return (
        f"The cross-attention boundary holds: changing {where} left {who}{whose} exactly "
        f"unchanged through {through} and {name}; the largest change is {final[moved]:.3g}, at query {moved}."
    )
