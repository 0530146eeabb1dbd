"""/api/perturb: change one position's input and see which positions move, with a check per mask
(engine/analysis/perturb.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import BaseModel, Field

from engine.analysis.perturb import perturb
from engine.analysis.perturb_batch import PADDING_TOLERANCE
from engine.analysis.perturb_kernel import REACH_THRESHOLD, Change, Check, Leak
from server.declare import Analysis, Context, answer_of
from server.errors import ApiError
from server.plan import make_plan
from server.refusals import refuse_fields
from server.schemas.attention import AttentionRequest, BugOut, Strict, Text
from server.schemas.ints import Index
from server.serialize import bug_body, layer_delta_list

TOLERANCES = ", ".join(f"{str(t).removeprefix('torch.')} {v:g}" for t, v in PADDING_TOLERANCE.items())
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
    """The /api/attention body (every layer runs: no `layer`, no `include`) plus the position and the change.

    With `texts` the batch runs as one padded forward and `item` names the item that changes; with `source`
    (cross-attention) `side` says whether `position` is a query or a source position."""

    position: Index = Field(
        description="the position whose input changes: of the sequence; with texts, of item `item` (the batch is "
        "padded to the longest, so a padding position may be named); with source and side source, of the source",
    )
    item: int | None = Field(
        None,
        ge=0,
        le=1023,
        description="with texts: the batch item whose position changes (default 0); its mask checks use its own "
        "padding, `batch` checks every other item is exactly unchanged, and `padding_invariance` compares it with "
        "itself run alone, unpadded (within padding_tolerance). A 422 without texts",
    )
    side: Literal["query", "source"] = Field(
        "query",
        description="with source (cross-attention): query changes the request's own input at `position`, and "
        "`source_boundary` checks every other query is exactly unchanged; source changes source position "
        "`position` (its input vector, its token, or with change kind value its value vector), and "
        "`source_boundary` checks every query whose cell to it is masked (source.padding, masks.blocked) is "
        "exactly unchanged. A 422 without source",
    )
    change: Annotated[DirectionChange | ShiftChange | TokenChange | ValueChange, Field(discriminator="kind")] = Field(
        default_factory=lambda: DirectionChange(kind="direction"),
        description="add a seeded random direction of a given norm to its input vector (the default: it reaches "
        "every model), add the same amount to every feature (a LayerNorm removes it), swap its token, or move only "
        "its value vector in every layer (value: a seeded direction of a given norm after W_V)",
    )


class LayerDelta(BaseModel):
    index: int
    delta: list[float] = Field(description="per position: max |change| of the layer's output")


LeakOut = answer_of(
    Leak,
    "LeakOut",
    layer=Field(description="the layer it first showed in; null: the final output"),
    item=Field(description="the batch item it showed in (batch: another item); null: one sequence"),
)
CheckOut = answer_of(
    Check,
    "CheckOut",
    name=(Literal["causal", "window", "padding", "blocked", "batch", "padding_invariance", "source_boundary"], ...),
    holds=Field(
        description="null: inconclusive, the change did not reach the model (reach under reach_threshold) and no "
        "protected position moved (padding_invariance compares the unchanged input, so it is never null)"
    ),
    max_delta=Field(
        description="largest change at a position the claim protects (0.0 when it holds); padding_invariance: "
        "max |batched - alone| over the item's real positions, every layer and the final output"
    ),
    protected=Field(
        description="positions the claim says cannot move, after the last layer; batch: the other items (every "
        "position of each); source_boundary: queries"
    ),
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
    item: int | None = Field(None, description="with texts: the item changed; tokens and deltas are its own")
    side: Literal["query", "source"] = Field("query", description="with source: which sequence `position` is in")
    batch_tokens: list[list[str]] | None = Field(None, description="with texts: every item's tokens, padded")
    item_delta: list[float] | None = Field(
        None, description="with texts: per item, the largest change anywhere in its final output"
    )
    source_tokens: list[str] | None = Field(None, description="with source: the source's tokens")
    source_tokens_after: list[str] | None = Field(None, description="with source: after the change")
    padding_tolerance: float | None = Field(
        None,
        description="with texts: padding_invariance holds when max |batched - alone| <= padding_tolerance x max "
        f"|alone| in each layer's output and the final output ({TOLERANCES}: the rounding of two passes of "
        "different shapes)",
    )
    checks: list[CheckOut]  # type: ignore[valid-type]
    verdict: str
    demo_bug: BugOut | None = Field(None, description="the classic bug both runs computed, as in /api/attention")


def perturb_route(req: PerturbRequest, ctx: Context) -> PerturbResult:
    """Runs the model twice through every layer, residual, norm and feed-forward: as given, and with `change` at
    `position` (`shift`: add `amount` to every feature of its input vector; `token`: swap its token; `value`: move
    only its value vector, in every layer). Returns, per
    layer and for the final output, how far each position moved, a check per mask in force (causal: positions
    before the change read exactly 0) and a one-line verdict. With `texts` and `item`: the batch's own checks
    (batch: other items unchanged; padding_invariance: the item batched equals it alone); with `source` and
    `side`: source_boundary (a query reads the source, never another query; a masked cell stops a source key)."""
    runtime = ctx.runtime
    refuse_fields(req, ("layer", "include", "precision"), "perturb runs every layer and returns changes")
    if req.item is not None and req.texts is None:
        raise ApiError(422, "invalid_request", "item names a batch item: give texts, or leave item out", "item")
    if req.side != "query" and req.source is None:
        raise ApiError(422, "invalid_request", "side source perturbs a source position: give source", "side")
    prepared = make_plan(req.model_copy(update={"include": []}), ctx.settings, ctx.models, runtime)
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
        result = perturb(prepared.case(req.demo_bug), req.position, change, item=req.item, side=req.side)
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
        item=result.item,
        side=result.side,
        batch_tokens=result.batch_tokens,
        item_delta=result.item_delta,
        source_tokens=result.source_tokens,
        source_tokens_after=result.source_tokens_after,
        padding_tolerance=result.padding_tolerance,
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
        "batch": {
            "summary": "Batch independence and padding invariance on minilm: change item 1 of three",
            "value": {
                "model": "minilm",
                "texts": [SENTENCE, "it was tired", "a cat"],
                "masks": {"causal": True},
                "item": 1,
                "position": 3,
            },
        },
        "source": {
            "summary": "Cross-attention: a padding source key reaches no query",
            "value": {
                "model": "random",
                "text": "the cat sat",
                "source": {"text": "a dog ran far", "padding": [True, True, False, True]},
                "masks": {},
                "side": "source",
                "position": 2,
            },
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
