"""/api/scale-sweep: why scores are divided by sqrt(d_k), measured on random q and k (engine/analysis/sweep.py) and,
for the models named in `models`, on each trained head's own q and k (engine/analysis/scale_trained.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch
from pydantic import BaseModel, Field

from engine.analysis.scale_trained import TrainedHeadScale, trained_scales
from engine.analysis.sweep import SweepRow, scale_sweep, sweep_values
from server.declare import Analysis, Context, Limit, answer_of
from server.errors import ApiError
from server.plan import Plan, make_plan
from server.refusals import choose_model
from server.schemas.attention import AttentionRequest, Strict, Text

MAX_TRAINED = 8  # models one sweep may measure


class ScaleSweepRequest(Strict):
    widths: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], min_length=1, max_length=32
    )
    samples: int = Field(2000, ge=10, le=20_000, description="query rows per width")
    keys: int = Field(16, ge=2, le=256, description="keys per row")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    variance: float = Field(1.0, gt=0, le=100, allow_inf_nan=False, description="per-coordinate variance of q and k")
    models: list[Text] = Field(
        default_factory=list,
        max_length=MAX_TRAINED,
        description="models from GET /api/models whose every head's raw q.k spread is measured on `text` beside the "
        "random vectors' (`trained`)",
    )
    text: Text | None = Field(None, description="the text the models are run on; omitted: each model's default text")


SweepRowOut = answer_of(SweepRow, "SweepRowOut")  # the engine's row, field for field
TrainedHeadOut = answer_of(TrainedHeadScale, "TrainedHeadScale")


class TrainedScale(BaseModel):
    model: str
    text: str = Field(description="the text the model ran on")
    tokens: int
    heads: list[TrainedHeadOut] = Field(description="every layer's every head, layer by layer")  # type: ignore[valid-type]


class ScaleSweepResult(BaseModel):
    variance: float
    samples: int
    keys: int
    uniform_entropy: float = Field(description="ln(keys): the entropy of a uniform row")
    widths: list[SweepRowOut]  # type: ignore[valid-type]
    trained: list[TrainedScale] = Field(description="one entry per name in `models`, in order")


def scale_sweep_route(req: ScaleSweepRequest, ctx: Context) -> ScaleSweepResult:
    """For random q and k with the given per-coordinate variance: the standard deviation of q.k (grows like
    sqrt(d_k)) and of q.k / sqrt(d_k) (stays flat), and what a softmax over `keys` such scores does: its entropy
    and its largest weight, unscaled and scaled. samples x keys x the sum of the widths is bounded by
    ATTNLAB_MAX_SWEEP_VALUES. For each of `models`: every head's raw q.k spread over the cells its masks leave
    eligible (on `text`, else the model's default text), beside the random-vector prediction from the measured
    per-coordinate means and variances of its q and k, and their ratio."""
    limit = ctx.settings.limit("max_sweep_values")
    work = sweep_values(req.widths, req.samples, req.keys)
    if work > limit:
        raise ApiError(
            422,
            "too_large",
            f"samples x keys x sum of widths = {req.samples:,} x {req.keys:,} x {sum(req.widths):,} = {work:,} "
            f"q.k products, limit {limit:,} (set by ATTNLAB_MAX_SWEEP_VALUES on this server): "
            "ask for fewer or narrower widths, fewer samples or fewer keys",
            "widths",
        )
    # every model is checked before anything runs: a refused one costs no sweep and no other model's run
    planned = [trained_plan(name, i, req.text, ctx) for i, name in enumerate(req.models)]
    rows = scale_sweep(req.widths, req.samples, req.seed, req.variance, req.keys)
    return ScaleSweepResult(
        variance=req.variance,
        samples=req.samples,
        keys=req.keys,
        uniform_entropy=math.log(req.keys),
        widths=[SweepRowOut.model_validate(r, from_attributes=True) for r in rows],
        trained=[trained_scale(p) for p in planned],
    )


@dataclass(frozen=True)
class TrainedPlan:
    """One of `models`, checked and planned: its name as the server lists it, the text it runs on (None: its own
    numbers) and the plan that runs it."""

    name: str
    text: str | None
    plan: Plan


def trained_plan(name: str, i: int, text: str | None, ctx: Context) -> TrainedPlan:
    """One trained model's run on `text` (its default text when None), with its default masks, planned; any
    refusal (an unknown model, one without weights of its own, a text over the limits) names models[i] or text."""
    try:
        model = choose_model(AttentionRequest(model=name), ctx.models)
    except ApiError as e:
        raise ApiError(e.status, e.code, e.message, f"models[{i}]") from e
    if model.needs_input and model.info.default_text is None:
        raise ApiError(
            422,
            "invalid_request",
            f"{name} has no q or k of its own (it projects with the weights a request gives): name a model with "
            "weights of its own, such as minilm or pycode",
            f"models[{i}]",
        )
    given = text if text is not None or not model.needs_input else model.info.default_text
    req = AttentionRequest(model=name, text=given)  # a model that needs no input runs on its own numbers
    try:
        prepared = make_plan(req, ctx.settings, ctx.models, ctx.runtime)
    except ApiError as e:
        field = "text" if text is not None and e.field in ("text", "tokens") else f"models[{i}]"
        raise ApiError(e.status, e.code, f"{name}: {e.message}", field) from e
    return TrainedPlan(model.info.name, given, prepared)


def trained_scale(planned: TrainedPlan) -> TrainedScale:
    """Every head of a planned model's run: its raw q.k spread against the random-vector prediction."""
    with torch.inference_mode():
        run = planned.plan.run()
        heads = trained_scales(run)
    return TrainedScale(
        model=planned.name,
        text=planned.text or " ".join(run.tokens),
        tokens=len(run.tokens),
        heads=[TrainedHeadOut.model_validate(h, from_attributes=True) for h in heads],
    )


SCALE_SWEEP = Analysis(
    name="scale-sweep",
    request=ScaleSweepRequest,
    answer=ScaleSweepResult,
    run=scale_sweep_route,
    summary="Why scores are divided by sqrt(d_k): the spread of q.k against d_k, unscaled and scaled",
    examples={
        "figure": {"summary": "The chapter's Figure 21.5", "value": {"widths": [1, 4, 16, 64, 256]}},
        "trained": {
            "summary": "Figure 21.5 beside MiniLM's and pycode's heads",
            "value": {"widths": [8, 16, 32, 64], "models": ["minilm", "pycode"]},
        },
    },
    panel="sweep",
    tags=("mechanics",),
    limits=(
        Limit(
            "max_sweep_values",
            64_000_000,
            "q.k products of one `/api/scale-sweep` (samples x keys x the sum of its widths): Figure 21.5 and the "
            "default widths pass",
        ),
    ),
)
ANALYSES = (SCALE_SWEEP,)
