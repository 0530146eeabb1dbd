"""Request and response schemas of /api/attention, /api/models and /api/health, and the types every body shares.

Numbers must be finite; matrices must be rectangular.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from engine.interventions import ClassicBug
from engine.models.declare import able, reading
from server.schemas.audit import AuditRecord
from server.schemas.ints import INT64_MAX, Count, Index, Int64

Include = Literal[
    "scores",
    "weights",
    "contexts",
    "output",
    "stats",
    "qkv",
    "audit",
    "final",
    "rollout",
    "attention_flow",
    "value_norms",
    "head_contributions",
    "eligibility",
    "experts",
]
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


def _unicode(text: str) -> str:
    """JSON can spell a lone UTF-16 surrogate (\\ud800), which is not text: no tokenizer or encoder can read it."""
    for i, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            raise ValueError(f"holds a lone UTF-16 surrogate (U+{ord(ch):04X}) at character {i}: not valid Unicode")
    return text


Text = Annotated[str, AfterValidator(_unicode)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Length caps far above any limit a server sets, checked before the items are: a body of a million items in one
# list gets one error at once instead of a million (the real limits come after, with their settings' names).
MAX_ITEMS = 65_536
Matrix = Annotated[
    list[Annotated[list[FiniteFloat], Field(max_length=MAX_ITEMS)]],
    Field(max_length=MAX_ITEMS),
    AfterValidator(_rectangular),
]
# An image's base64 characters, checked before anything is decoded: 4 for every 3 bytes of a file of up to 64 MiB,
# far above ATTNLAB_MAX_IMAGE_BYTES's default of 5 MiB (the server's own limit is checked after, by its name).
MAX_IMAGE_CHARS = 4 * -(-64 * 1024 * 1024 // 3)
MAX_SAMPLE_CHARS = 64


class Strict(BaseModel):
    """Request bodies: unknown fields are a 422, and so is every coercion ("scale": "no", "heads": "2", a string
    in x): a value must already be of its field's JSON type. Integers are accepted where numbers are."""

    model_config = ConfigDict(extra="forbid", strict=True)


# A position a mask names: any 64-bit integer, so that a cell outside the sequence reaches the mask's own check
# ("outside the 3 x 3 grid", with the numbers) and a number past 64 bits, which no tensor or JSON writer can hold,
# is a 422 naming it (masks.blocked[0][1]) before anything keys a run on it.
Position = Int64


class Masks(Strict):
    causal: bool = Field(False, description="a query sees itself and earlier keys only")
    padding: list[bool] | None = Field(
        None,
        max_length=MAX_ITEMS,
        description="one flag per position: true = real token, false = padding (no query attends to it)",
    )
    padded: list[Position] | None = Field(
        None,
        max_length=MAX_ITEMS,
        description="the padding mask by position: these positions are padding (instead of `padding`'s flags, "
        "for a client that has not counted the tokens yet)",
    )
    window: int | None = Field(
        None, ge=1, le=INT64_MAX, description="a query sees keys fewer than `window` positions away"
    )
    blocked: list[Annotated[list[Position], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, description="single [query, key] cells switched off", max_length=100_000
    )


class Weights(Strict):
    w_q: Matrix = Field(description="D x (heads * d_k)")
    w_k: Matrix = Field(description="D x (kv_heads * d_k)")
    w_v: Matrix = Field(description="D x (kv_heads * d_v)")
    w_o: Matrix | None = Field(None, description="(heads * d_v) x d_out; without it the output is the concatenation")


class ModelOptions(Strict):
    """The options of the models that read them (each entry's `options` in GET /api/models says which it takes)."""

    d_model: Count | None = Field(None, description="width of the token vectors")
    heads: Count | None = Field(None, description="number of heads")
    kv_heads: Count | None = Field(None, description="K/V groups; must divide heads")
    seed: Index | None = Field(None, description="seeds weights and embeddings")
    positions: bool | None = Field(None, description="add sinusoidal position encodings")


class SourceRequest(Strict):
    """Cross-attention: keys and values come from this sequence; queries from the request's own input."""

    text: Text | None = Field(None, description="the source sequence, tokenised by the model")
    tokens: list[Text] | None = Field(
        None, max_length=MAX_ITEMS, description="the source tokens one by one (or labels for rows of x)"
    )
    x: Matrix | None = Field(None, description=f"an S_k x D source matrix (models that read x: {reading('x')})")
    padding: list[bool] | None = Field(
        None, max_length=MAX_ITEMS, description="one flag per source position: false = padding"
    )


class RolloutOptions(Strict):
    heads: Literal["mean", "max", "min"] = Field("mean", description="how each layer's heads are fused, cell by cell")
    residual: bool = Field(True, description="add the residual identity before normalising each layer's rows")


class SinksRequest(Strict):
    hide: Literal["first", "special"] | Annotated[list[Position], Field(max_length=MAX_ITEMS)] = Field(
        "first",
        description="the key columns to hide: the first position, the special tokens the tokenizer added ([CLS], "
        "[SEP], <|endoftext|>), or a list of positions",
    )
    renormalise: bool = Field(True, description="divide each row by the weight left once the hidden keys are out")


class AttentionRequest(Strict):
    model: Text | None = Field(None, description="a name from GET /api/models; optional when x is given")
    text: Text | None = Field(None, description="a sequence, tokenised by the model")
    texts: list[Text] | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="a batch: each text tokenised, padded to the longest, each item's padding mask filled in; "
        f"matrices gain a leading batch axis (models with capabilities.batches: {able('batches')})",
    )
    source: SourceRequest | None = Field(
        None,
        description="cross-attention: keys and values from this sequence "
        f"(models with capabilities.cross_attention: {able('cross_attention')})",
    )
    tokens: list[Text] | None = Field(
        None, max_length=MAX_ITEMS, description="tokens given one by one (or labels for the rows of x)"
    )
    image: str | None = Field(
        None,
        max_length=MAX_IMAGE_CHARS,
        description="a PNG or JPEG file as base64 (a `data:image/png;base64,` prefix and line breaks are allowed), "
        "for a model that reads pixels: decoded within ATTNLAB_MAX_IMAGE_BYTES and ATTNLAB_MAX_IMAGE_PIXELS, "
        "then resized and normalised as the model's preprocessor_config.json says; its tokens are [CLS] (and "
        f"[DIST], registers) then p(row,col) for each patch (models that read pixels: {reading('pixels')})",
    )
    sample: str | None = Field(
        None,
        max_length=MAX_SAMPLE_CHARS,
        description="an image attnlab ships, by name, in place of `image`: digit-0 ... digit-1796 (scikit-learn's "
        "8x8 handwritten digits, light ink on black) or the photographs china and flower (GET /api/models: each "
        "image model's `image.samples`)",
    )
    x: Matrix | None = Field(None, description="an S x D input matrix (needs weights unless the model has its own)")
    weights: Weights | None = None
    scores: Matrix | None = Field(
        None,
        description="an S x S score matrix typed in, in place of a model, x and weights: used as given (`scale` does "
        "not apply), the masks applied to it, then the softmax (model `given`)",
    )
    pattern: Matrix | None = Field(
        None,
        description="an S x S weight matrix typed in, used as given: each row at least 0 and summing to 1 (within "
        "0.001), 0 on every cell a mask excludes (model `given`)",
    )
    values: Matrix | None = Field(
        None, description="S x d_v value vectors for typed-in scores or pattern: contexts = weights @ values"
    )
    heads: Count | None = Field(None, description="how many heads the columns of the weights hold (default 1)")
    kv_heads: Count | None = Field(None, description="how many K/V groups w_k and w_v hold (default: heads)")
    head_widths: list[Int64] | None = Field(
        None,
        min_length=1,
        max_length=MAX_ITEMS,
        description="custom weights only: heads of unequal widths, each head's d_k, summing to w_q's (and w_k's) "
        "columns; head h scores with 1 / sqrt(head_widths[h]). w_v is split by the same widths when it has as many "
        "columns as w_q, else into equal widths; w_o has the value widths' sum of rows. One K/V group per head",
    )
    options: ModelOptions | None = None
    masks: Masks | None = Field(None, description="omit for the model's default masks")
    all_masked: Literal["error", "zero"] = Field(
        "error", description="a query row with no eligible key: a 422 naming the rows, or zero weights and context"
    )
    scale: bool = Field(True, description="divide scores by sqrt(d_k)")
    layer: Index | None = Field(None, description="one layer's index; all layers when absent")
    first_layer: Index | None = Field(
        None,
        description="every layer, this one first: the streamed form (Accept: application/vnd.attnlab.arrays-stream) "
        "sends it as soon as the forward has reached it, then the rest of the same forward; any other form is a 422",
    )
    precision: Literal["float32", "float16"] = Field(
        "float32",
        description="how the matrices go out: float16 halves the bytes (about 3 significant digits); "
        "in JSON, .npz (Accept: application/x-npz) and the arrays form (Accept: application/vnd.attnlab.arrays). "
        "Rounding for transport only, after the run: `dtype` is what the run computes in",
    )
    dtype: Literal["float32", "float64", "bfloat16", "float16"] | None = Field(
        None,
        description="the precision the forward pass computes in (default: the server's ATTNLAB_DTYPE; float16 and "
        "bfloat16 where the device runs them, else a 422). The answer's config gives `dtype` and "
        "`max_diff_vs_float32`, the largest |weight - the float32 run's weight| over the heads returned (0 for a "
        "float32 run; null when no dtype is named and the server's is not float32). /api/attention and "
        "/api/export only; other endpoints compute in the server's dtype",
    )
    include: list[Include] = Field(
        default_factory=lambda: list(DEFAULT_INCLUDE),
        description="what to return; `audit` adds the chapter's audit record (measured, so slower); `final` the "
        "model's last output: logits (S x V) for a model that predicts tokens, else the last layer's output (S x D); "
        "`rollout` each layer's attention rollout (S x S, Abnar & Zuidema 2020: J_l = rownorm(fuse_h A_l + I) "
        "J_l-1); `attention_flow` each layer's attention flow (S x S, the max-flow from each query after the layer "
        "to each input position through the fused maps as pipes, rows normalised; up to 64 positions); `value_norms` "
        "per head |a_ij v_j W_O^h| (S x S_k, Kobayashi et al. 2020: how much each key moves, "
        "not only how hard it is looked at); `head_contributions` per head |context_h W_O^h| at each query (S); "
        "`eligibility` the `eligible` and `reasons` grids, which come with scores, weights, value_norms, rollout "
        "and attention_flow anyway and are left out of an answer with none of these",
    )
    sinks: SinksRequest | None = Field(
        None,
        description="a view that looks past attention sinks: the hidden key columns come back as 0 in `weights` and "
        "each row is renormalised over the rest; stats' sink_mass is the weight that was on them",
    )
    rollout: RolloutOptions | None = Field(
        None,
        description="with include rollout or attention_flow: how the heads are fused and whether the residual "
        "identity is added",
    )
    demo_bug: ClassicBug | None = Field(
        None,
        description="compute one of the chapter's classic bugs on purpose, as a labelled demonstration: "
        "softmax over queries (columns sum to 1), a flipped mask (True read as blocked), or a normalisation over "
        "the sequence axis before attention (the map stays triangular; /api/perturb finds the leak)",
    )


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
    qk_rank: int | None = Field(
        description="rank of this head's W_Q W_K^T; null where the weights are not known or where its assumption "
        "(one fixed bilinear form per head) does not hold for the model: `refused` then says why"
    )
    qk_rank_max: int | None = Field(description="d_head, the most the rank can be (null with qk_rank)")
    qk_symmetric: bool | None = Field(
        description="W_Q = W_K for this head: its scores are symmetric; null where its assumption does not hold"
    )
    sink_mass: float = Field(
        description="mean over queries of the weight on the sink keys (the hidden ones with `sinks`, else the first "
        "position), from the weights as computed"
    )
    mean_sink_weight: float | None = Field(
        None,
        description="in a layer with learned sink logits (gpt-oss): mean over queries with a key of the weight the "
        "head's sink took, which has no value; each row's weights over the keys then sum to 1 minus its "
        "`sink`, and max_row_sum_error, entropy and kl_from_uniform count the sink as one more outcome. "
        "null in a layer without sinks",
    )
    refused: dict[str, str] = Field(
        default_factory=dict,
        description="the statistics left null because what they assume does not hold for this model, each with "
        "what it assumes and why that fails (qk_rank, qk_rank_max, qk_symmetric assume one fixed W_Q W_K^T per "
        "head, which rotary embeddings break); {} where every statistic holds",
    )


Matrix2 = list[list[float]]
Matrices = Matrix2 | list[Matrix2]  # a batch adds a leading axis


class HeadResult(BaseModel):
    index: int
    kv_group: int
    scores: Matrices | None = None
    weights: Matrices | None = None
    contexts: Matrices | None = None
    q: Matrices | None = None
    k: Matrices | None = None
    v: Matrices | None = None
    value_norms: Matrices | None = Field(None, description="with include value_norms: |a_ij v_j W_O^h|, S x S_k")
    sink: list[float] | list[list[float]] | None = Field(
        None,
        description="with include weights, in a layer with learned sink logits (gpt-oss): the weight each query "
        "gave the head's sink (S; B x S for a batch), the softmax's last column, which has no value; the row's "
        "weights over the keys sum to 1 minus it. null in a layer without sinks",
    )
    contribution: list[float] | list[list[float]] | None = Field(
        None, description="with include head_contributions: |context_h W_O^h| per query (S; B x S for a batch)"
    )
    stats: HeadStatsOut | list[HeadStatsOut] | None = Field(None, description="a list, one per item, for a batch")


class LayerResult(BaseModel):
    index: int
    heads: list[HeadResult]
    window: int | None = Field(
        None,
        description="this layer's own window (a local layer, as Gemma's): its queries see keys with |q - k| < "
        "window, ANDed with the request's masks; null: a global layer, which sees the request's masks alone",
    )
    eligible: list[list[bool]] | list[list[list[bool]]] | None = Field(
        None,
        description="a local layer's own eligibility, the answer's `eligible` narrowed by its window (sent with "
        "that grid); null for a global layer, whose eligibility is the answer's `eligible`",
    )
    output: Matrices | None = None
    head_similarity: Matrices | None = None
    rollout: Matrices | None = Field(
        None,
        description="with include rollout: J_l after this layer, S x S (B x S x S for a batch); row q is the share "
        "of position q's state traced back to each input position",
    )
    attention_flow: Matrices | None = Field(
        None,
        description="with include attention_flow: F_l after this layer, S x S (B x S x S for a batch); row q is the "
        "max-flow from position q after this layer to each input position, divided by the row's sum",
    )
    experts: ExpertsOut | None = Field(
        None,
        description="with include experts, in a layer whose feed-forward is a mixture of experts: the experts each "
        "position used and their weights; null in a dense layer (Qwen3-MoE's mlp_only_layers)",
    )


class ExpertsOut(BaseModel):
    count: int = Field(description="experts in the layer")
    top_k: int = Field(description="experts each position uses")
    ids: list[list[int]] | list[list[list[int]]] = Field(
        description="per position the experts it used, the most probable first: S x top_k (B x S x top_k for a batch)"
    )
    gates: Matrices = Field(
        description="each chosen expert's weight in the position's sum, in the order of `ids`: S x top_k "
        "(B x S x top_k for a batch)"
    )


class SinksOut(BaseModel):
    hidden: list[int]
    renormalised: bool


class BugOut(BaseModel):
    name: ClassicBug
    wrong: Literal[True]
    note: str


class AttentionResult(BaseModel):
    model: str
    tokens: list[str] = Field(description="the queries' tokens (for a batch: the first item's, padded)")
    config: dict[str, Any]
    masks: dict[str, Any]
    all_masked: str
    eligible: list[list[bool]] | list[list[list[bool]]] | None = Field(
        None,
        description="S x S_k; B x S x S for a batch; null when include asks for no grid (scores, weights, "
        "value_norms, rollout, attention_flow or eligibility)",
    )
    layers: list[LayerResult]
    shapes: dict[str, list[int]]
    timings_ms: dict[str, float]
    pairs: dict[str, int] | None = Field(None, description="eligible (query, key) pairs per mask, and in all")
    reasons: dict[str, list[list[bool]] | list[list[list[bool]]]] | None = Field(
        None,
        description="why each cell is masked: one grid of eligible's shape per mask in force (causal, window, "
        "padding, blocked), true = that mask excludes the (query, key) cell; a cell is eligible when no grid marks "
        "it. S x S; B x S x S for a batch (each item's own padding); S x S_k with a source (its padding and "
        "blocked cells)",
    )
    batch_tokens: list[list[str]] | None = None
    batch_padding: list[list[bool]] | None = None
    source_tokens: list[str] | None = None
    demo_bug: BugOut | None = None
    sinks: SinksOut | None = Field(None, description="with `sinks`: the key positions hidden from `weights`")
    audit: AuditRecord | None = Field(None, description="with include audit: the chapter's audit record")
    final: Matrices | None = Field(
        None,
        description="with include final: logits (S x V) for a model that predicts tokens, else the last layer's "
        "output (S x D); B x ... for a batch",
    )


class ProgressResponse(BaseModel):
    run: str = Field(description="the name the client gave its run in the X-Attnlab-Run header")
    stage: Literal["queued", "layers", "writing", "done", "failed"] = Field(
        description="queued: waiting for a compute slot, behind `ahead` other requests; layers: the forward pass, "
        "`done` of `total` layers; writing: the answer is being written; done or failed: the answer is on its way"
    )
    done: int = Field(description="layers computed so far (in the stage layers)")
    total: int = Field(description="layers in this pass (0 before the pass knows)")
    ahead: int | None = Field(
        None,
        description="while queued: how many requests (anyone's) wait for a compute slot before this one; "
        "0 = next in line; null in the other stages",
    )
    elapsed_ms: float = Field(description="since the server received the request")


class HealthResponse(BaseModel):
    status: str
    version: str
    device: str
    dtype: str
    torch: str
    cuda_available: bool
    models: list[str]
    limits: dict[str, int] = Field(
        description="what one request may ask for on this server, by setting name without ATTNLAB_ "
        "(max_tokens, max_batch, max_width, max_heads, max_text_chars, max_body_bytes, max_result_values), "
        "so a client can warn before it sends"
    )
