"""Schemas of the analyses that test claims: /api/perturb, /api/intervene, /api/compare."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from server.schemas.attention import AttentionRequest, AttentionResult, BugOut, Strict, Text


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


class TokenChange(Strict):
    kind: Literal["token"]
    token: Text = Field(min_length=1, max_length=200, description="the replacement token (a model that embeds tokens)")


class PerturbRequest(AttentionRequest):
    """The /api/attention body (every layer runs: no `layer`, no `include`) plus the position and the change."""

    position: int = Field(ge=0, description="the position whose input changes")
    change: Annotated[DirectionChange | ShiftChange | TokenChange, Field(discriminator="kind")] = Field(
        default_factory=lambda: DirectionChange(kind="direction"),
        description="add a seeded random direction of a given norm to its input vector (the default: it reaches "
        "every model), add the same amount to every feature (a LayerNorm removes it), or swap its token",
    )


class LayerDelta(BaseModel):
    index: int
    delta: list[float] = Field(description="per position: max |change| of the layer's output")


class LeakOut(BaseModel):
    layer: int | None = Field(description="the layer it first showed in; null: the final output")
    position: int
    delta: float


class CheckOut(BaseModel):
    name: Literal["causal", "window", "padding", "blocked"]
    claim: str
    holds: bool | None = Field(
        description="null: inconclusive, the change did not reach the model (reach under reach_threshold) and no "
        "protected position moved"
    )
    max_delta: float = Field(description="largest change at a position the claim protects (0.0 when it holds)")
    protected: list[int] = Field(description="positions the claim says cannot move, after the last layer")
    protected_by_layer: list[list[int]] = Field(
        description="per layer, the positions the claim says cannot move after that layer (a window's set shrinks "
        "layer by layer; a blocked cell protects its query in layer 0 only)"
    )
    tested: bool = Field(description="false: this change puts no position under the claim")
    first_leak: LeakOut | None


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
    checks: list[CheckOut]
    verdict: str
    demo_bug: BugOut | None = Field(None, description="the classic bug both runs computed, as in /api/attention")


class Ablation(Strict):
    layer: int = Field(ge=0)
    head: int = Field(ge=0)
    mode: Literal["zero", "mean"] = Field("zero", description="contexts set to 0, or to their mean over positions")


class EdgeEdit(Strict):
    layer: int = Field(ge=0)
    head: int = Field(ge=0)
    query: int = Field(ge=0)
    key: int = Field(ge=0, description="must be eligible for the query")
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


class ChangeOut(BaseModel):
    layer: int
    head: int
    query: int
    key: int
    a: float
    b: float
    diff: float


class CompareResult(BaseModel):
    a: AttentionResult
    b: AttentionResult
    max_abs: float
    layers: list[LayerDiffOut]
    largest: list[ChangeOut]
