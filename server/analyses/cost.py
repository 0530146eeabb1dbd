"""/api/cost: score and KV-cache memory, parameters and FLOPs of attention, optionally measured here
(engine/analysis/cost.py)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

import torch
from pydantic import Field

from engine.analysis.cost import Cost, CostQuery, CurvePoint, MeasuredLayer, cost, measure_cost
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


CurvePointOut = answer_of(CurvePoint, "CurvePointOut")
MeasuredOut = answer_of(
    MeasuredLayer,
    "MeasuredOut",
    tokens_per_s=Field(description="B x S / (ms x layers)"),
    measured_dtype=Field(description="the dtype the layer ran in: float32 for float16 and bfloat16 on a CPU"),
    note=Field(description="why measured_dtype differs from the query's dtype"),
)
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
    query=(CostRequest, ...),
    limits=(dict[str, Any], Field(description="this server's max_tokens, device and memory")),
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


def cost_route(req: CostRequest, ctx: Context) -> dict[str, Any]:
    """The formulas for B sequences of S tokens (score elements B x H x S^2 per layer, KV cache 2 x B x layers x
    kv_heads x S x d_head x bytes, projection parameters of 1 head vs H heads, FLOPs) and memory against S. With
    `measure: true` (S, width, heads and batch within this server's limits) one layer of the engine runs here and
    its peak memory and time are measured: on CUDA by torch.cuda.max_memory_allocated, on CPU by torch's
    profiler counting every tensor allocation and free. Its scores are bounded by ATTNLAB_MAX_RESULT_VALUES and its
    FLOPs by ATTNLAB_MAX_MEASURE_FLOPS; on a CPU float16 and bfloat16 are measured in float32 (`measured_dtype`,
    `note`)."""
    settings, runtime = ctx.settings, ctx.runtime
    q = CostQuery(req.batch, req.heads, req.kv_heads, req.seq_len, req.d_model, req.layers, req.dtype)
    if req.measure:
        for field, value, limit, name in (
            ("seq_len", req.seq_len, settings.max_tokens, "ATTNLAB_MAX_TOKENS"),
            ("d_model", req.d_model, settings.max_width, "ATTNLAB_MAX_WIDTH"),
            ("heads", req.heads, settings.max_heads, "ATTNLAB_MAX_HEADS"),
            ("batch", req.batch, settings.max_batch, "ATTNLAB_MAX_BATCH"),
        ):
            if value > limit:
                raise ApiError(
                    422,
                    "too_large",
                    f"got {value}: measure runs here, limit {limit} ({name}); or leave measure off",
                    field,
                )
        check_measurable(q, settings)
        result = measure_cost(q, runtime.device)
    else:
        result = cost(q)
    body = dataclasses.asdict(result)
    body["query"] = req.model_dump()
    body["limits"] = {
        "max_tokens": settings.max_tokens,
        "device": str(runtime.device),
        "memory_bytes": machine_memory(runtime.device),
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
    },
    panel="cost",
    limits=(
        Limit(
            "max_measure_flops",
            20_000_000_000,
            "FLOPs of the one layer `/api/cost` measures (`measure: true`, three runs of it; minilm's shape at 512 "
            "tokens is about 1 GFLOP); on a CPU float16 and bfloat16 are measured in float32",
        ),
    ),
    tags=("mechanics",),
)
ANALYSES = (COST,)
