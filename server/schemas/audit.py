"""The audit record's shape (`include: ["audit"]` on /api/attention; engine/analysis/audit.py makes it), so OpenAPI
and the answer check read every field of it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SoftmaxAxisOut(BaseModel):
    declared: Literal["keys"] = Field(description="the axis the engine's softmax runs over: keys (the last axis)")
    measured: Literal["keys", "queries", "neither"] = Field(
        description="read off the run's weights: keys when every row that holds weight sums to 1 within `tolerance`, "
        "queries when not but every column that holds weight does, neither when neither does"
    )
    row_sum_error: float | None = Field(
        description="largest |sum over keys - 1| of a query row that holds weight, over every layer, head and item"
    )
    column_sum_error: float | None = Field(
        description="largest |sum over queries - 1| of a key column that holds weight, over every layer, head and item"
    )
    tolerance: float = Field(description="the |sum - 1| a row or column may be off and still sum to 1 (by dtype)")


class HeadProjections(BaseModel):
    head: int
    W_Q: list[int] = Field(description="[d_model, this head's d_k]: the columns of W_Q it reads")
    W_K: list[int]
    W_V: list[int]
    W_O: list[int] | None = Field(description="[this head's d_v, d_out]: the rows of W_O its contexts meet")


class Projections(BaseModel):
    W_Q: list[int] = Field(description="[rows, columns] of the whole matrix")
    W_K: list[int]
    W_V: list[int]
    W_O: list[int] | None
    per_head: list[HeadProjections]


class ScaleOut(BaseModel):
    on: bool
    factor: float | None = Field(description="what every head's Q K^T is multiplied by; null when heads differ")
    per_head: list[float] = Field(description="each head's factor: 1 / sqrt(its own d_k) when scaling is on")


class RepeatedRowPair(BaseModel):
    layer: int
    head: int
    item: int | None = Field(description="the batch item; null for one sequence")
    queries: list[int] = Field(description="two query positions whose weight rows are identical")


class RepeatedRows(BaseModel):
    count: int = Field(description="rows equal to an earlier row of their head (k equal rows count k - 1)")
    heads: int = Field(description="heads (per layer and batch item) with at least one")
    examples: list[RepeatedRowPair] = Field(description="at most 8 pairs")


class AuditMasks(BaseModel):
    causal: bool
    padding: list[bool] | list[list[bool]] | None = Field(description="S flags; a batch: one list per text")
    window: int | None
    blocked: list[list[int]]


class PerturbationVerdict(BaseModel):
    mask: Literal["causal", "window", "padding"]
    item: int | None = Field(description="the batch item perturbed; null for one sequence")
    position: int
    holds: bool | None = Field(description="null: inconclusive, the change did not reach the model")
    max_delta: float
    reach: float
    verdict: str


class AuditRecord(BaseModel):
    d_model: int
    heads: int
    kv_heads: int
    d_k: int | None = Field(description="every head's d_k; null when heads differ (projections.per_head has each)")
    d_v: int | None
    layers: int
    projections: Projections
    scale: ScaleOut
    softmax_axis: SoftmaxAxisOut
    repeated_rows: RepeatedRows
    masks: AuditMasks
    all_masked: str
    dropout: float
    dtype: str
    device: str
    batch: int
    seq_len: int
    valid_tokens: int
    score_range: list[float] | None
    entropy: float
    max_masked_weight: float
    max_row_sum_error: float
    cache_policy: str
    peak_bytes: int
    peak_method: str
    ms: float
    tokens_per_s: float | None
    throughput: str
    sdpa_max_diff: float
    perturbation: list[PerturbationVerdict]
    perturbation_unchecked: list[int] = Field(
        description="a batch's texts (items) with no verdicts: past ATTNLAB_MAX_AUDIT_RUNS, counted before any ran"
    )
    perturbation_note: str | None = Field(
        description="which texts have verdicts, which do not, and how to check one; null when every text has them"
    )
