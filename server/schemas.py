"""Request and response schemas of the REST API. Numbers must be finite; matrices must be rectangular."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Include = Literal["scores", "weights", "contexts", "output", "stats", "qkv"]
DEFAULT_INCLUDE: list[Include] = ["scores", "weights", "stats"]


def _rectangular(m: list[list[float]]) -> list[list[float]]:
    if not m:
        raise ValueError("needs at least one row")
    width = len(m[0])
    if width == 0:
        raise ValueError("needs at least one column")
    for i, row in enumerate(m):
        if len(row) != width:
            raise ValueError(f"row {i} has {len(row)} numbers but row 0 has {width}: every row needs the same length")
    return m


FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Matrix = Annotated[list[list[FiniteFloat]], AfterValidator(_rectangular)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Masks(Strict):
    causal: bool = Field(False, description="a query sees itself and earlier keys only")
    padding: list[bool] | None = Field(
        None, description="one flag per position: true = real token, false = padding (no query attends to it)"
    )
    window: int | None = Field(
        None, ge=1, le=2**63 - 1, description="a query sees keys fewer than `window` positions away"
    )
    blocked: list[tuple[int, int]] = Field(
        default_factory=list, description="single [query, key] cells switched off", max_length=100_000
    )


class Weights(Strict):
    w_q: Matrix = Field(description="D x (heads * d_k)")
    w_k: Matrix = Field(description="D x (kv_heads * d_k)")
    w_v: Matrix = Field(description="D x (kv_heads * d_v)")
    w_o: Matrix | None = Field(None, description="(heads * d_v) x d_out; without it the output is the concatenation")


class ModelOptions(Strict):
    d_model: int | None = Field(None, ge=1, description="random: width of the token vectors")
    heads: int | None = Field(None, ge=1, description="random: number of heads")
    kv_heads: int | None = Field(None, ge=1, description="random: K/V groups; must divide heads")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="random: seeds weights and embeddings")
    positions: bool | None = Field(None, description="random: add sinusoidal position encodings")


class AttentionRequest(Strict):
    model: str | None = Field(None, description="a name from GET /api/models; optional when x is given")
    text: str | None = Field(None, description="a sequence, tokenised by the model")
    tokens: list[str] | None = Field(None, description="tokens given one by one (or labels for the rows of x)")
    x: Matrix | None = Field(None, description="an S x D input matrix (needs weights unless the model has its own)")
    weights: Weights | None = None
    heads: int | None = Field(None, ge=1, description="how many heads the columns of the weights hold (default 1)")
    kv_heads: int | None = Field(None, ge=1, description="how many K/V groups w_k and w_v hold (default: heads)")
    options: ModelOptions | None = None
    masks: Masks | None = Field(None, description="omit for the model's default masks")
    all_masked: Literal["error", "zero"] = Field(
        "error", description="a query row with no eligible key: a 422 naming the rows, or zero weights and context"
    )
    scale: bool = Field(True, description="divide scores by sqrt(d_k)")
    layer: int | None = Field(None, ge=0, description="one layer's index; all layers when absent")
    include: list[Include] = Field(default_factory=lambda: list(DEFAULT_INCLUDE))


class HeadStatsOut(BaseModel):
    entropy: list[float]
    mean_entropy: float
    masked_share: list[float] = Field(
        description="per query: share of the unmasked softmax that the masks removed (a property of the scores)"
    )
    masked_weight: list[float] = Field(description="per query: weight left on masked keys after masking (0)")
    max_masked_weight: float
    max_row_sum_error: float
    zero_rows: list[int]
    score_min: float
    score_max: float
    eligible_score_min: float | None
    eligible_score_max: float | None
    mean_distance: float
    kl_from_uniform: float | None = Field(description="nats from uniform over eligible keys; ~0: a dead head")
    dead: bool = Field(description="near-uniform over its eligible keys")
    identical_to: list[int] = Field(description="heads of the same layer with (near) identical weights")
    qk_rank: int | None = Field(description="rank of this head's W_Q W_K^T")
    qk_rank_max: int | None = Field(description="d_head, the most the rank can be")
    qk_symmetric: bool | None = Field(description="W_Q = W_K for this head: its scores are symmetric")


class HeadResult(BaseModel):
    index: int
    kv_group: int
    scores: list[list[float]] | None = None
    weights: list[list[float]] | None = None
    contexts: list[list[float]] | None = None
    q: list[list[float]] | None = None
    k: list[list[float]] | None = None
    v: list[list[float]] | None = None
    stats: HeadStatsOut | None = None


class LayerResult(BaseModel):
    index: int
    heads: list[HeadResult]
    output: list[list[float]] | None = None
    head_similarity: list[list[float]] | None = None


class AttentionResult(BaseModel):
    model: str
    tokens: list[str]
    config: dict[str, Any]
    masks: dict[str, Any]
    all_masked: str
    eligible: list[list[bool]]
    layers: list[LayerResult]
    shapes: dict[str, list[int]]
    timings_ms: dict[str, float]


class ModelEntry(BaseModel):
    name: str
    description: str
    layers: int
    heads: int
    kv_heads: int
    d_model: int
    d_head: int
    d_v: int
    max_tokens: int | None
    tokenizer: str
    default_text: str | None
    default_masks: dict[str, Any] | None
    options: dict[str, Any]
    vocab: list[str] | None = None


class ModelsResponse(BaseModel):
    models: list[ModelEntry]


class HealthResponse(BaseModel):
    status: str
    version: str
    device: str
    dtype: str
    torch: str
    cuda_available: bool
    models: list[str]


class HeadTypesRequest(AttentionRequest):
    """The /api/attention body (text, tokens or x are optional here) plus the induction probe's settings."""

    model: str | None = Field(None, description="a name from GET /api/models")
    segment_len: int = Field(24, ge=2, description="L: the induction probe is L random tokens, then the same L again")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds the probe's random tokens")


class HeadTypeRow(BaseModel):
    layer: int
    head: int
    previous_token: float | None
    duplicate_token: float | None
    induction: float | None
    mean_distance: float | None
    entropy: float | None


class HeadTypesResult(BaseModel):
    model: str
    scored_on: Literal["probe", "input"]
    probe_tokens: list[str] | None
    segment_len: int
    seed: int
    n_layers: int
    n_heads: int
    heads: list[HeadTypeRow]


class TopHeadsRequest(AttentionRequest):
    query: int = Field(ge=0, description="query position (a row)")
    key: int = Field(ge=0, description="key position (a column)")
    k: int = Field(10, ge=1, le=1000, description="how many heads to return")


class TopHead(BaseModel):
    layer: int
    head: int
    weight: float


class TopHeadsResult(BaseModel):
    model: str
    tokens: list[str]
    query: int
    key: int
    heads: list[TopHead]


# ---- analyses: perturb, intervene, compare ------------------------------------------------------------------------


class ShiftChange(Strict):
    kind: Literal["shift"]
    amount: float = Field(
        1.0, ge=-1000, le=1000, allow_inf_nan=False, description="added to every feature of the position's input"
    )


class TokenChange(Strict):
    kind: Literal["token"]
    token: str = Field(min_length=1, max_length=200, description="the replacement token (a model that embeds tokens)")


class PerturbRequest(AttentionRequest):
    """The /api/attention body (every layer runs: no `layer`, no `include`) plus the position and the change."""

    position: int = Field(ge=0, description="the position whose input changes")
    change: Annotated[ShiftChange | TokenChange, Field(discriminator="kind")] = Field(
        default_factory=lambda: ShiftChange(kind="shift"), description="shift its vector, or swap its token"
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
    holds: bool
    max_delta: float = Field(description="largest change at a position the claim protects (0.0 when it holds)")
    protected: list[int] = Field(description="positions the claim says cannot move, after the last layer")
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
    checks: list[CheckOut]
    verdict: str


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
