"""/api/cost: score and KV-cache memory, parameters and FLOPs of attention, optionally measured here
(engine/analysis/cost.py)."""

from __future__ import annotations

import dataclasses
import os
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from engine.analysis.cost import Cost, CostQuery, CurvePoint, MeasuredLayer, cost, measure_cost
from engine.analysis.lengths import LengthPoint, Lengths, largest_scores, lengths_flops, measure_lengths
from server.config import Settings
from server.declare import Analysis, Context, Limit, answer_of
from server.errors import ApiError
from server.schemas.attention import Strict


class CostRequest(Strict):
    batch: int = Field(1, ge=1, le=1_000_000)
    heads: int = Field(12, ge=1, le=1_000_000)
    kv_heads: int | None = Field(None, ge=1, le=1_000_000, description="K/V groups; omitted: one per head")
    seq_len: int = Field(128, ge=1, le=10_000_000)
    d_model: int = Field(384, ge=1, le=1_000_000)
    layers: int = Field(6, ge=1, le=100_000)
    dtype: Literal["float64", "float32", "bfloat16", "float16"] = "float32"
    measure: bool = Field(False, description="also run one layer here and measure peak memory and time (bounded)")
    measure_lengths: list[Annotated[int, Field(ge=1, le=1_000_000)]] | None = Field(
        None,
        min_length=1,
        max_length=12,
        description="also measure dense and blockwise attention (heads, d_head, batch 1) at each of these lengths "
        "(bounded: ATTNLAB_MAX_LENGTHS_FLOPS, ATTNLAB_MAX_LENGTHS_SCORES)",
    )
    measure_block: int = Field(256, ge=16, le=4096, description="keys per block of the blockwise pass")


CurvePointOut = answer_of(CurvePoint, "CurvePointOut")
MeasuredOut = answer_of(
    MeasuredLayer,
    "MeasuredOut",
    tokens_per_s=Field(description="B x S / (ms x layers)"),
    measured_dtype=Field(description="the dtype the layer ran in: float32 for float16 and bfloat16 on a CPU"),
    note=Field(description="why measured_dtype differs from the query's dtype"),
)
LengthPointOut = answer_of(
    LengthPoint,
    "LengthPointOut",
    predicted_score_bytes=Field(description="H x S^2 x bytes: one layer's scores at batch 1"),
    max_abs_diff=Field(description="the largest |dense context - blockwise context|"),
)
LengthsOut = answer_of(Lengths, "LengthsOut", points=(list[LengthPointOut], ...))  # type: ignore[valid-type]
CostResult = answer_of(
    Cost,
    "CostResult",
    score_elements=Field(description="B x H x S^2 per layer"),
    kv_cache_bytes=Field(description="2 x B x layers x kv_heads x S x d_head x bytes"),
    params_one_head=Field(description="attention projections of one head of width D, per layer: 4 D^2"),
    params_heads=Field(description="the same for H heads with kv_heads K/V groups, per layer"),
    curve=(list[CurvePointOut], ...),  # type: ignore[valid-type]
    measured=(MeasuredOut | None, ...),
    tokens_per_s=(float | None, ...),
    lengths=(LengthsOut | None, Field(description="dense and blockwise attention measured at `measure_lengths`")),
    query=(CostRequest, ...),
    limits=(dict[str, Any], Field(description="this server's max_tokens, device, memory and measure_lengths bounds")),
    note=(str, ...),
)


def machine_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_measurable(q: CostQuery, settings: Settings) -> None:
    """The measured layer's scores and its work, bounded before anything is allocated: a 422 naming the limit."""
    scores = q.batch * q.heads * q.seq_len**2
    if scores > settings.max_result_values:
        raise ApiError(
            422,
            "too_large",
            f"measuring holds batch x heads x seq_len^2 = {q.batch:,} x {q.heads:,} x {q.seq_len:,}^2 = {scores:,} "
            f"scores, limit {settings.max_result_values:,} (set by ATTNLAB_MAX_RESULT_VALUES on this server): "
            "a shorter seq_len, a smaller batch or fewer heads; or leave measure off",
            "seq_len",
        )
    flops = cost(q).flops["total"]
    limit = settings.limit("max_measure_flops")
    if flops > limit:
        raise ApiError(
            422,
            "too_large",
            f"one layer of batch {q.batch:,} x seq_len {q.seq_len:,} at d_model {q.d_model:,} is {flops:,} FLOPs, "
            f"limit {limit:,} (set by ATTNLAB_MAX_MEASURE_FLOPS on this server): "
            "a smaller batch, seq_len or d_model; or leave measure off",
            "measure",
        )


def check_here(req: CostRequest, settings: Settings, fields: tuple[str, ...], asked: str) -> None:
    """What runs here is within this server's limits: a 422 naming the field and the limit."""
    for field, limit, name in (
        ("seq_len", settings.max_tokens, "ATTNLAB_MAX_TOKENS"),
        ("d_model", settings.max_width, "ATTNLAB_MAX_WIDTH"),
        ("heads", settings.max_heads, "ATTNLAB_MAX_HEADS"),
        ("batch", settings.max_batch, "ATTNLAB_MAX_BATCH"),
    ):
        value = getattr(req, field)
        if field in fields and value > limit:
            raise ApiError(
                422,
                "too_large",
                f"{field} {value}: {asked} runs here, limit {limit} ({name}); or leave {asked} off",
                field,
            )


def check_lengths(q: CostQuery, lengths: list[int], settings: Settings) -> None:
    """The work of measuring both passes at every length, and the dense pass's scores at the longest, bounded
    before anything is allocated: a 422 naming measure_lengths and the limit."""
    flops, limit = lengths_flops(q, lengths), settings.limit("max_lengths_flops")
    if flops > limit:
        raise ApiError(
            422,
            "too_large",
            f"measure_lengths {lengths}: both passes at these lengths with {q.heads} heads of d_head {q.d_head} "
            f"is {flops:,} FLOPs, limit {limit:,} (set by ATTNLAB_MAX_LENGTHS_FLOPS on this server): "
            "fewer or shorter lengths, or fewer heads",
            "measure_lengths",
        )
    scores, limit = largest_scores(q, lengths), settings.limit("max_lengths_scores")
    if scores > limit:
        raise ApiError(
            422,
            "too_large",
            f"measure_lengths up to {max(lengths):,}: the dense pass there holds heads x S^2 = "
            f"{q.heads:,} x {max(lengths):,}^2 = {scores:,} scores, limit {limit:,} "
            "(set by ATTNLAB_MAX_LENGTHS_SCORES on this server): a shorter longest length, or fewer heads",
            "measure_lengths",
        )


def cost_route(req: CostRequest, ctx: Context) -> dict[str, Any]:
    """The formulas for B sequences of S tokens (score elements B x H x S^2 per layer, KV cache 2 x B x layers x
    kv_heads x S x d_head x bytes, projection parameters of 1 head vs H heads, FLOPs) and memory against S. With
    `measure: true` (S, width, heads and batch within this server's limits) one layer of the engine runs here and
    its peak memory and time are measured: on CUDA by torch.cuda.max_memory_allocated, on CPU by torch's
    profiler counting every tensor allocation and free. Its scores are bounded by ATTNLAB_MAX_RESULT_VALUES and its
    FLOPs by ATTNLAB_MAX_MEASURE_FLOPS; on a CPU float16 and bfloat16 are measured in float32 (`measured_dtype`,
    `note`). With `measure_lengths` (batch 1, this shape's heads and d_head) dense attention (the S x S scores held)
    and blockwise attention (the online softmax over `measure_block` keys at a time, engine/blockwise.py) run on
    the same random Q, K, V at each length: `lengths.points` has each one's peak bytes and ms, the predicted
    H x S^2 score bytes, and the largest difference of their contexts; bounded by ATTNLAB_MAX_LENGTHS_FLOPS and
    ATTNLAB_MAX_LENGTHS_SCORES."""
    settings, runtime = ctx.settings, ctx.runtime
    q = CostQuery(req.batch, req.heads, req.kv_heads, req.seq_len, req.d_model, req.layers, req.dtype)
    lengths = None
    if req.measure_lengths is not None:
        cost(q)  # the shape itself is valid (width divides by heads, heads by kv_heads) before any length runs
        check_here(req, settings, ("d_model", "heads"), "measure_lengths")
        check_lengths(q, req.measure_lengths, settings)
    if req.measure:
        check_here(req, settings, ("seq_len", "d_model", "heads", "batch"), "measure")
        check_measurable(q, settings)
        result = measure_cost(q, runtime.device)
    else:
        result = cost(q)
    if req.measure_lengths is not None:
        lengths = dataclasses.asdict(measure_lengths(q, req.measure_lengths, req.measure_block, runtime.device))
    body = dataclasses.asdict(result)
    body["lengths"] = lengths
    # the query as asked: without the lengths' fields when none were measured (the answer of every other query)
    body["query"] = req.model_dump(exclude=None if lengths else {"measure_lengths", "measure_block"})
    body["limits"] = {
        "max_tokens": settings.max_tokens,
        "device": str(runtime.device),
        "memory_bytes": machine_memory(runtime.device),
        "max_lengths_flops": settings.limit("max_lengths_flops"),
        "max_lengths_scores": settings.limit("max_lengths_scores"),
    }
    body["note"] = (
        f"Doubling S quadruples the scores: {q.seq_len} -> {2 * q.seq_len} tokens takes "
        f"{result.score_bytes:,} -> {4 * result.score_bytes:,} bytes per layer, and 1024 -> 8192 is 64x."
    )
    return body


COST = Analysis(
    name="cost",
    request=CostRequest,
    answer=CostResult,
    run=cost_route,
    summary="Score and KV-cache memory, parameters and FLOPs of attention; optionally measured here",
    examples={
        "minilm": {"summary": "MiniLM's shape at 512 tokens", "value": {"seq_len": 512}},
        "long": {
            "summary": "8192 tokens, 32 heads sharing 8 K/V groups, bfloat16",
            "value": {"seq_len": 8192, "heads": 32, "kv_heads": 8, "d_model": 4096, "layers": 32, "dtype": "bfloat16"},
        },
        "measure": {"summary": "Measure one layer on this server", "value": {"seq_len": 256, "measure": True}},
        "lengths": {
            "summary": "Dense against blockwise attention at five lengths",
            "value": {"heads": 4, "d_model": 64, "measure_lengths": [256, 512, 1024, 2048, 4096]},
        },
    },
    panel="cost",
    limits=(
        Limit(
            "max_measure_flops",
            20_000_000_000,
            "FLOPs of the one layer `/api/cost` measures (`measure: true`, three runs of it; minilm's shape at 512 "
            "tokens is about 1 GFLOP); on a CPU float16 and bfloat16 are measured in float32",
        ),
        Limit(
            "max_lengths_flops",
            40_000_000_000,
            "FLOPs of the dense and blockwise passes `/api/cost` measures at `measure_lengths` (4 H S^2 d_head a "
            "pass, three runs of each, summed over the lengths; 4 heads of 16 at 256 to 4096 tokens is about 34 G)",
        ),
        Limit(
            "max_lengths_scores",
            300_000_000,
            "score elements (heads x S^2) the dense pass of `/api/cost`'s `measure_lengths` holds at its longest "
            "length, as many again for its weights (300 M is 1.2 GB of float32 scores)",
        ),
    ),
    tags=("mechanics",),
)
ANALYSES = (COST,)
