"""Test claims about attention: perturb an input, intervene on heads and edges, compare two runs.

Each takes the /api/attention body and runs through the same forward (engine.forward) as /api/attention,
with the change passed in as data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import torch
from fastapi import APIRouter, Body, Header
from fastapi.responses import Response

from engine.analysis.compare import compare
from engine.analysis.intervene import intervene
from engine.analysis.perturb import Change, perturb
from engine.errors import InputError
from engine.interventions import EdgeEdit, HeadAblation, Interventions
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.errors import ApiError
from server.forms import OTHER_FORMS, ORJSONResponse, answer
from server.prepare import prepare, refuse_fields, run_body
from server.scheduling import ComputeRoute
from server.schemas import (
    CompareRequest,
    CompareResult,
    InterveneRequest,
    InterventionResult,
    PerturbRequest,
    PerturbResult,
)
from server.schemas.errors import COMPUTE_ERRORS
from server.serialize import (
    check_result_size,
    compare_body,
    intervention_body,
    perturb_body,
    result_size,
)

router = APIRouter(prefix="/api", tags=["analysis"], route_class=ComputeRoute, responses=COMPUTE_ERRORS)

SENTENCE = "The animal didn't cross the street because it was too tired"
INDUCTION = "red ball king river frog clock red ball king river frog clock"


@router.post(
    "/perturb",
    response_model=PerturbResult,
    response_class=ORJSONResponse,
    summary="Change one position's input and see which positions move, with a check per mask",
)
def perturb_route(
    req: Annotated[
        PerturbRequest,
        Body(
            openapi_examples={
                "causal": {
                    "summary": "Prove causal masking on minilm: shift “it” (position 10, after [CLS])",
                    "value": {"model": "minilm", "text": SENTENCE, "masks": {"causal": True}, "position": 10},
                },
                "token": {
                    "summary": "Swap a word in the induction model's repeat",
                    "value": {
                        "model": "induction",
                        "text": INDUCTION,
                        "position": 7,
                        "change": {"kind": "token", "token": "moon"},
                    },
                },
            }
        ),
    ],
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
) -> ORJSONResponse:
    """Runs the model twice through every layer, residual, norm and feed-forward: as given, and with `change` at
    `position` (`shift`: add `amount` to every feature of its input vector; `token`: swap its token). Returns, per
    layer and for the final output, how far each position moved, a check per mask in force (causal: positions
    before the change read exactly 0) and a one-line verdict."""
    refuse_fields(
        req,
        ("layer", "include", "precision", "texts", "source"),
        "perturb runs every layer of one sequence and returns changes",
    )
    prepared = prepare(req.model_copy(update={"include": []}), settings, models, runtime)
    c = req.change
    if c.kind == "direction":
        change = Change("direction", amount=c.norm, seed=c.seed)
    elif c.kind == "shift":
        change = Change("shift", amount=c.amount)
    else:
        change = Change("token", token=c.token)
    with torch.inference_mode():
        result = perturb(
            prepared.model,
            prepared.inp,
            prepared.encoded,
            req.position,
            change,
            runtime.device,
            runtime.dtype,
            bug=req.demo_bug,
        )
    return ORJSONResponse(perturb_body(prepared.model.info.name, result, c.model_dump()))


@router.post(
    "/intervene",
    response_model=InterventionResult,
    response_class=ORJSONResponse,
    responses={200: OTHER_FORMS},
    summary="Ablate heads and edit single attention weights; see the change in every layer and the predictions",
)
def intervene_route(
    req: Annotated[
        InterveneRequest,
        Body(
            openapi_examples={
                "induction": {
                    "summary": "Ablate the induction model's layer-1 heads: the repeat is no longer predicted",
                    "value": {
                        "model": "induction",
                        "text": INDUCTION,
                        "ablate": [{"layer": 1, "head": h, "mode": "zero"} for h in range(4)],
                        "include": ["weights"],
                        "layer": 1,
                    },
                },
                "edit": {
                    "summary": "Move head 0's weight for query 2 onto key 0 (textbook)",
                    "value": {
                        "model": "textbook",
                        "edit": [{"layer": 0, "head": 0, "query": 2, "key": 0, "weight": 0.9}],
                    },
                },
            }
        ),
    ],
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Runs every layer twice: as given (`before`) and with the heads in `ablate` zeroed or mean-ablated and the
    weights in `edit` set (the row's other eligible weights rescaled to keep the sum 1) (`after`). `layer` and
    `include` shape `before` and `after` as in /api/attention. `layers[i].delta` and `final_delta` are the largest
    change per position; models that predict tokens (induction) also return top-k predictions and the mean
    next-token loss before and after."""
    refuse_fields(req, ("texts", "source"), "intervene runs one sequence")
    prepared = prepare(req, settings, models, runtime, results=2, accept=accept)
    interventions = Interventions(
        ablate=tuple(HeadAblation(a.layer, a.head, a.mode) for a in req.ablate),
        edit=tuple(EdgeEdit(e.layer, e.head, e.query, e.key, e.weight) for e in req.edit),
        bug=req.demo_bug,
    )
    with torch.inference_mode():
        result = intervene(
            prepared.model,
            prepared.every_layer(),
            prepared.encoded,
            interventions,
            runtime.device,
            runtime.dtype,
            req.top_k,
        )
    before = run_body(result.before, req, settings, runtime)
    after = run_body(result.after, req, settings, runtime)
    return answer(intervention_body(result, before, after, interventions), accept)


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


@router.post(
    "/compare",
    response_model=CompareResult,
    response_class=ORJSONResponse,
    responses={200: OTHER_FORMS},
    summary="Two runs of the same length and, per layer and head, B - A weights",
)
def compare_route(
    req: Annotated[
        CompareRequest,
        Body(
            openapi_examples={
                "causal": {
                    "summary": "What causal masking does to minilm's heads",
                    "value": {
                        "a": {"model": "minilm", "text": SENTENCE, "layer": 0},
                        "b": {"model": "minilm", "text": SENTENCE, "layer": 0, "masks": {"causal": True}},
                    },
                }
            }
        ),
    ],
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """Runs `a` and `b` (each an /api/attention body) and returns both results, B - A weights for every head of the
    layers they show (`layer`: both the same), the largest |B - A| per head, and the largest changes overall.
    Different token counts or head counts are a 422. Each side may set its own `demo_bug`: a classic bug against
    the correct code, cell by cell."""
    if req.a.layer != req.b.layer:
        raise ApiError(
            422, "invalid_request", f"is {req.b.layer} but a.layer is {req.a.layer}: show one layer", "b.layer"
        )
    with naming("a"):
        refuse_fields(req.a, ("texts", "source", "precision"), "compare runs one sequence per side")
        pa = prepare(req.a, settings, models, runtime, results=2, accept=accept)
    with naming("b"):
        refuse_fields(req.b, ("texts", "source", "precision"), "compare runs one sequence per side")
        pb = prepare(req.b, settings, models, runtime, accept=accept)
    with naming("a"):
        ra = pa.run(runtime, Interventions(bug=req.a.demo_bug))
    with naming("b"):
        rb = pb.run(runtime, Interventions(bug=req.b.demo_bug))
    layers = [req.a.layer] if req.a.layer is not None else list(range(len(ra.layers)))
    if req.a.layer is None and len(ra.layers) != len(rb.layers):
        raise ApiError(422, "invalid_request", f"has {len(rb.layers)} layers but a has {len(ra.layers)}", "b.model")
    comparison = compare(ra, rb, layers)
    diff_values = sum(len(ld.heads) for ld in comparison.layers) * len(ra.tokens) ** 2
    total = result_size(ra, layers, req.a.include) + result_size(rb, layers, req.b.include) + diff_values
    check_result_size(total, settings.max_result_values)
    a, b = run_body(ra, req.a, settings, runtime), run_body(rb, req.b, settings, runtime)
    return answer(compare_body(comparison, a, b), accept)
