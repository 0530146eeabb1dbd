"""Schemas of the chapter's mechanics: /api/decode, /api/cost, /api/scale-sweep."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from server.schemas.attention import AttentionRequest, Strict


class DecodeRequest(AttentionRequest):
    """The /api/attention body for a causal model (random, induction, textbook, custom); every layer decodes."""


class NextToken(BaseModel):
    token: str
    p: float


class DecodeStepOut(BaseModel):
    position: int
    token: str
    weights: list[list[list[float]]] = Field(description="per layer, per head: the new query's weights, t + 1 keys")
    cache_length: int
    cache_bytes: int = Field(description="bytes of every layer's K and V after this step")
    next_token: NextToken | None = Field(description="the most likely next token (models that predict tokens)")


class CacheOut(BaseModel):
    bytes_per_token: int
    formula: str


class DecodeResult(BaseModel):
    model: str
    tokens: list[str]
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    d_v: int
    dtype: str
    steps: list[DecodeStepOut]
    max_diff_vs_full: float = Field(description="largest |cached - full recomputation| of any weight or output")
    cache: CacheOut


class CostRequest(Strict):
    batch: int = Field(1, ge=1, le=1_000_000)
    heads: int = Field(12, ge=1, le=1_000_000)
    kv_heads: int | None = Field(None, ge=1, le=1_000_000, description="K/V groups; omitted: one per head")
    seq_len: int = Field(128, ge=1, le=10_000_000)
    d_model: int = Field(384, ge=1, le=1_000_000)
    layers: int = Field(6, ge=1, le=100_000)
    dtype: Literal["float64", "float32", "bfloat16", "float16"] = "float32"
    measure: bool = Field(False, description="also run one layer here and measure peak memory and time (bounded)")


class CurvePointOut(BaseModel):
    seq_len: int
    score_bytes: int
    kv_cache_bytes: int


class MeasuredOut(BaseModel):
    peak_bytes: int
    ms: float
    method: str
    tokens_per_s: float | None = Field(description="B x S / (ms x layers)")
    measured_dtype: str = Field(description="the dtype the layer ran in: float32 for float16 and bfloat16 on a CPU")
    note: str | None = Field(description="why measured_dtype differs from the query's dtype")


class CostResult(BaseModel):
    query: CostRequest
    d_head: int
    bytes_per_value: int
    score_elements: int = Field(description="B x H x S^2 per layer")
    score_bytes: int
    score_bytes_all_layers: int
    kv_cache_bytes: int = Field(description="2 x B x layers x kv_heads x S x d_head x bytes")
    params_one_head: int = Field(description="attention projections of one head of width D, per layer: 4 D^2")
    params_heads: int = Field(description="the same for H heads with kv_heads K/V groups, per layer")
    params_all_layers: int
    flops: dict[str, int]
    curve: list[CurvePointOut]
    measured: MeasuredOut | None
    tokens_per_s: float | None
    limits: dict[str, Any] = Field(description="this server's max_tokens, device and memory")
    note: str


class ScaleSweepRequest(Strict):
    widths: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], min_length=1, max_length=32
    )
    samples: int = Field(2000, ge=10, le=20_000, description="query rows per width")
    keys: int = Field(16, ge=2, le=256, description="keys per row")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    variance: float = Field(1.0, gt=0, le=100, allow_inf_nan=False, description="per-coordinate variance of q and k")


class SweepRowOut(BaseModel):
    d_k: int
    std_unscaled: float
    std_scaled: float
    expected_std_unscaled: float
    expected_std_scaled: float
    entropy_unscaled: float
    entropy_scaled: float
    max_weight_unscaled: float
    max_weight_scaled: float


class ScaleSweepResult(BaseModel):
    variance: float
    samples: int
    keys: int
    uniform_entropy: float = Field(description="ln(keys): the entropy of a uniform row")
    widths: list[SweepRowOut]
