"""/api/perturb: change one position's input and see which positions move, with a check per mask
(engine/analysis/perturb.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, Field

from engine.analysis.perturb import REACH_THRESHOLD, Change, Check, Leak, perturb
from server.declare import Analysis, Context, answer_of
from server.prepare import prepare, refuse_fields
from server.schemas.attention import AttentionRequest, BugOut, Strict, Text
from server.serialize import bug_body, layer_delta_list

SENTENCE = "The animal didn't cross the street because it was too tired"
INDUCTION = "red ball king river frog clock red ball king river frog clock"


class DirectionChange(Strict):
    kind: Literal["direction"]
    norm: float = Field(
        1.0, gt=0, le=1000, allow_inf_nan=False, description="the length of the vector added to the position's input"
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds the random direction (its mean removed)")


class ShiftChange(Strict):
    kind: Literal["shift"]
    amount: float = Field(
        1.0, ge=-1000, le=1000, allow_inf_nan=False, description="added to every feature of the position's input"
    )


class ValueChange(Strict):
    kind: Literal["value"]
    norm: float = Field(
        1.0, gt=0, le=1000, allow_inf_nan=False, description="the length of the vector added to its value vector"
    )
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds the random direction (its mean removed)")


class TokenChange(Strict):
    kind: Literal["token"]
    token: Text = Field(min_length=1, max_length=200, description="the replacement token (a model that embeds tokens)")


class PerturbRequest(AttentionRequest):
    """The /api/attention body (every layer runs: no `layer`, no `include`) plus the position and the change."""

    position: int = Field(ge=0, description="the position whose input changes")
    change: Annotated[DirectionChange | ShiftChange | TokenChange | ValueChange, Field(discriminator="kind")] = Field(
        default_factory=lambda: DirectionChange(kind="direction"),
        description="add a seeded random direction of a given norm to its input vector (the default: it reaches "
        "every model), add the same amount to every feature (a LayerNorm removes it), swap its token, or move only "
        "its value vector in every layer (value: a seeded direction of a given norm after W_V)",
    )


class LayerDelta(BaseModel):
    index: int
    delta: list[float] = Field(description="per position: max |change| of the layer's output")


LeakOut = answer_of(Leak, "LeakOut", layer=Field(description="the layer it first showed in; null: the final output"))
CheckOut = answer_of(
    Check,
    "CheckOut",
    name=(Literal["causal", "window", "padding", "blocked"], ...),
    holds=Field(
        description="null: inconclusive, the change did not reach the model (reach under reach_threshold) and no "
        "protected position moved"
    ),
    max_delta=Field(description="largest change at a position the claim protects (0.0 when it holds)"),
    protected=Field(description="positions the claim says cannot move, after the last layer"),
    protected_by_layer=Field(
        description="per layer, the positions the claim says cannot move after that layer (a window's set shrinks "
        "layer by layer; a blocked cell protects its query in layer 0 only)"
    ),
    tested=Field(description="false: this change puts no position under the claim"),
    first_leak=(LeakOut | None, ...),
)


class PerturbResult(BaseModel):
    model: str
    tokens: list[str]
    tokens_after: list[str]
    position: int
    change: dict[str, Any]
    final: str = Field(description="what final_delta measures")
    layers: list[LayerDelta]
    final_delta: list[float]
    reach: float = Field(
        description="how far the changed position moved in the final output, relative to its size: "
        "max |after - before| / max |before| at that position"
    )
    reach_threshold: float = Field(description="under it the change did not reach the model: inconclusive")
    checks: list[CheckOut]  # type: ignore[valid-type]
    verdict: str
    demo_bug: BugOut | None = Field(None, description="the classic bug both runs computed, as in /api/attention")


def perturb_route(req: PerturbRequest, ctx: Context) -> PerturbResult:
    """Runs the model twice through every layer, residual, norm and feed-forward: as given, and with `change` at
    `position` (`shift`: add `amount` to every feature of its input vector; `token`: swap its token; `value`: move
    only its value vector, in every layer). Returns, per
    layer and for the final output, how far each position moved, a check per mask in force (causal: positions
    before the change read exactly 0) and a one-line verdict."""
    runtime = ctx.runtime
    refuse_fields(
        req,
        ("layer", "include", "precision", "texts", "source"),
        "perturb runs every layer of one sequence and returns changes",
    )
    prepared = prepare(req.model_copy(update={"include": []}), ctx.settings, ctx.models, runtime)
    c = req.change
    if c.kind == "direction":
        change = Change("direction", amount=c.norm, seed=c.seed)
    elif c.kind == "shift":
        change = Change("shift", amount=c.amount)
    elif c.kind == "value":
        change = Change("value", amount=c.norm, seed=c.seed)
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
    return PerturbResult(
        model=prepared.model.info.name,
        tokens=result.tokens,
        tokens_after=result.tokens_after,
        position=result.position,
        change=c.model_dump(),
        final=result.final,
        layers=[LayerDelta.model_validate(d) for d in layer_delta_list(result.layers)],
        final_delta=result.final_delta,
        reach=result.reach,
        reach_threshold=REACH_THRESHOLD,
        checks=[CheckOut.model_validate(check, from_attributes=True) for check in result.checks],
        verdict=result.verdict,
        demo_bug=bug_body(result.bug),
    )


PERTURB = Analysis(
    name="perturb",
    request=PerturbRequest,
    answer=PerturbResult,
    run=perturb_route,
    summary="Change one position's input and see which positions move, with a check per mask",
    examples={
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
    },
    panel="perturb",
)
ANALYSES = (PERTURB,)
