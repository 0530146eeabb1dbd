"""/api/compare: two runs of the same length and, per layer and head, B - A weights (engine/analysis/compare.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from pydantic import BaseModel, Field

from engine.analysis.compare import Change, Comparison, compare
from engine.errors import InputError
from engine.interventions import Interventions
from server.analyses.perturb import SENTENCE
from server.declare import Analysis, Context, answer_of
from server.errors import ApiError
from server.plan import make_plan
from server.refusals import refuse_fields
from server.schemas.attention import AttentionRequest, AttentionResult, Strict
from server.serialize import as_numpy, check_result_size, result_size


class CompareRequest(Strict):
    a: AttentionRequest
    b: AttentionRequest


class HeadDiffOut(BaseModel):
    index: int
    diff: list[list[float]] = Field(description="B - A weights, query x key")
    max_abs: float
    where: tuple[int, int] = Field(description="[query, key] of the largest |diff|")


class LayerDiffOut(BaseModel):
    index: int
    heads: list[HeadDiffOut]


ChangeOut = answer_of(Change, "ChangeOut")


class CompareResult(BaseModel):
    a: AttentionResult
    b: AttentionResult
    max_abs: float
    layers: list[LayerDiffOut]
    largest: list[ChangeOut]  # type: ignore[valid-type]


@contextmanager
def naming(prefix: str) -> Iterator[None]:
    """Errors about one of compare's two bodies name it: `b.masks.window`, not `masks.window`."""
    try:
        yield
    except InputError as err:
        raise InputError(f"{prefix}.{err.field}", err.message) from err
    except ApiError as err:
        field = f"{prefix}.{err.field}" if err.field else prefix
        raise ApiError(err.status, err.code, err.message, field) from err


def compare_route(req: CompareRequest, ctx: Context) -> dict[str, Any]:
    """Runs `a` and `b` (each an /api/attention body) and returns both results, B - A weights for every head of the
    layers they show (`layer`: both the same), the largest |B - A| per head, and the largest changes overall.
    Different token counts or head counts are a 422. Each side may set its own `demo_bug`: a classic bug against
    the correct code, cell by cell."""
    settings, models, runtime, accept = ctx.settings, ctx.models, ctx.runtime, ctx.accept
    if req.a.layer != req.b.layer:
        raise ApiError(
            422, "invalid_request", f"is {req.b.layer} but a.layer is {req.a.layer}: show one layer", "b.layer"
        )
    with naming("a"):
        refuse_fields(req.a, ("texts", "source", "precision"), "compare runs one sequence per side")
        pa = make_plan(req.a, settings, models, runtime, results=2, accept=accept)
    with naming("b"):
        refuse_fields(req.b, ("texts", "source", "precision"), "compare runs one sequence per side")
        pb = make_plan(req.b, settings, models, runtime, accept=accept)
    with naming("a"):
        ra = pa.run(Interventions(bug=req.a.demo_bug))
    with naming("b"):
        rb = pb.run(Interventions(bug=req.b.demo_bug))
    layers = [req.a.layer] if req.a.layer is not None else list(range(len(ra.layers)))
    if req.a.layer is None and len(ra.layers) != len(rb.layers):
        raise ApiError(422, "invalid_request", f"has {len(rb.layers)} layers but a has {len(ra.layers)}", "b.model")
    comparison = compare(ra, rb, layers)
    diff_values = sum(len(ld.heads) for ld in comparison.layers) * len(ra.tokens) ** 2
    total = result_size(ra, layers, req.a.include) + result_size(rb, layers, req.b.include) + diff_values
    check_result_size(total, settings.max_result_values)
    a, b = pa.body(ra), pb.body(rb)
    return compare_body(comparison, a, b)


def compare_body(comparison: Comparison, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    # the differences go out in the runs' own dtype, as their weights do (float32 unless the server runs float64)
    dtype = torch.float64 if a["config"]["dtype"] == "float64" else torch.float32
    return {
        "a": a,
        "b": b,
        "max_abs": comparison.max_abs,
        "layers": [
            {
                "index": ld.index,
                "heads": [
                    {
                        "index": hd.index,
                        "diff": as_numpy(hd.diff.to(dtype)),
                        "max_abs": hd.max_abs,
                        "where": list(hd.where),
                    }
                    for hd in ld.heads
                ],
            }
            for ld in comparison.layers
        ],
        "largest": [dataclasses.asdict(c) for c in comparison.largest],
    }


COMPARE = Analysis(
    name="compare",
    request=CompareRequest,
    answer=CompareResult,
    run=compare_route,
    summary="Two runs of the same length and, per layer and head, B - A weights",
    examples={
        "causal": {
            "summary": "What causal masking does to minilm's heads",
            "value": {
                "a": {"model": "minilm", "text": SENTENCE, "layer": 0},
                "b": {"model": "minilm", "text": SENTENCE, "layer": 0, "masks": {"causal": True}},
            },
        }
    },
    forms=("json", "arrays", "npz"),
    panel="compare",
)
ANALYSES = (COMPARE,)
