"""/api/intervene: ablate heads and edit single attention weights, through the same forward as /api/attention
(engine/analysis/intervene.py, engine/interventions.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

from engine.analysis.intervene import InterventionResult as EngineResult
from engine.analysis.intervene import intervene
from engine.interventions import EdgeEdit as EngineEdgeEdit
from engine.interventions import HeadAblation, Interventions
from server.analyses.perturb import INDUCTION, LayerDelta
from server.declare import Analysis, Context
from server.plan import make_plan
from server.refusals import refuse_fields
from server.schemas.attention import AttentionRequest, AttentionResult, Strict
from server.schemas.ints import Index
from server.serialize import layer_delta_list


class Ablation(Strict):
    layer: Index
    head: Index
    mode: Literal["zero", "mean"] = Field("zero", description="contexts set to 0, or to their mean over positions")


class EdgeEdit(Strict):
    layer: Index
    head: Index
    query: Index
    key: Index = Field(description="must be eligible for the query")
    weight: float = Field(ge=0, le=1, allow_inf_nan=False, description="the new weight; the row's others rescale")


class InterveneRequest(AttentionRequest):
    """The /api/attention body (`layer` and `include` shape `before` and `after`) plus the interventions."""

    ablate: list[Ablation] = Field(default_factory=list, max_length=4096)
    edit: list[EdgeEdit] = Field(default_factory=list, max_length=4096)
    top_k: int = Field(5, ge=1, le=50, description="next-token predictions listed per position (induction)")


class PredictionOut(BaseModel):
    token: str
    p: float


class PredictionsOut(BaseModel):
    before: list[list[PredictionOut]]
    after: list[list[PredictionOut]]


class InterventionResult(BaseModel):
    model: str
    tokens: list[str]
    ablate: list[Ablation]
    edit: list[EdgeEdit]
    before: AttentionResult
    after: AttentionResult
    final: str
    layers: list[LayerDelta]
    final_delta: list[float]
    predictions: PredictionsOut | None
    loss_before: float | None = Field(description="mean next-token loss over the sequence, nats")
    loss_after: float | None
    losses_before: list[float] | None = Field(description="per position t: -ln p(token t + 1)")
    losses_after: list[float] | None


def intervene_route(req: InterveneRequest, ctx: Context) -> dict[str, Any]:
    """Runs every layer twice: as given (`before`) and with the heads in `ablate` zeroed or mean-ablated and the
    weights in `edit` set (the row's other eligible weights rescaled to keep the sum 1) (`after`). `layer` and
    `include` shape `before` and `after` as in /api/attention. `layers[i].delta` and `final_delta` are the largest
    change per position; models that predict tokens (induction) also return top-k predictions and the mean
    next-token loss before and after."""
    settings, runtime = ctx.settings, ctx.runtime
    refuse_fields(req, ("texts", "source"), "intervene runs one sequence")
    prepared = make_plan(req, settings, ctx.models, runtime, results=2, accept=ctx.accept)
    interventions = Interventions(
        ablate=tuple(HeadAblation(a.layer, a.head, a.mode) for a in req.ablate),
        edit=tuple(EngineEdgeEdit(e.layer, e.head, e.query, e.key, e.weight) for e in req.edit),
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
    before = prepared.body(result.before)
    after = prepared.body(result.after)
    return intervention_body(result, before, after, interventions)


def intervention_body(
    result: EngineResult, before: dict[str, Any], after: dict[str, Any], interventions: Interventions
) -> dict[str, Any]:
    p = result.predictions
    return {
        "model": result.before.model,
        "tokens": result.before.tokens,
        "ablate": [dataclasses.asdict(a) for a in interventions.ablate],
        "edit": [dataclasses.asdict(e) for e in interventions.edit],
        "before": before,
        "after": after,
        "final": result.final,
        "layers": layer_delta_list(result.layers),
        "final_delta": result.final_delta,
        "predictions": {"before": p.before, "after": p.after} if p is not None else None,
        "loss_before": p.loss_before if p is not None else None,
        "loss_after": p.loss_after if p is not None else None,
        "losses_before": p.losses_before if p is not None else None,
        "losses_after": p.losses_after if p is not None else None,
    }


INTERVENE = Analysis(
    name="intervene",
    request=InterveneRequest,
    answer=InterventionResult,
    run=intervene_route,
    summary="Ablate heads and edit single attention weights; see the change in every layer and the predictions",
    examples={
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
            "value": {"model": "textbook", "edit": [{"layer": 0, "head": 0, "query": 2, "key": 0, "weight": 0.9}]},
        },
    },
    forms=("json", "arrays", "npz"),
    panel="intervene",
)
ANALYSES = (INTERVENE,)
