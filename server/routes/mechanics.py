"""The chapter's mechanics, live: KV-cache decoding, cost and memory, and the score-scaling sweep."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Annotated, Any

import torch
from fastapi import APIRouter, Body

from engine.analysis.cost import CostQuery, cost, measure_cost
from engine.analysis.decode import decode
from engine.analysis.sweep import scale_sweep, sweep_values
from server.config import Settings
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.errors import ApiError
from server.forms import ORJSONResponse
from server.prepare import ONE_SEQUENCE, prepare, refuse_fields
from server.scheduling import ComputeRoute
from server.schemas import (
    CostRequest,
    CostResult,
    DecodeRequest,
    DecodeResult,
    ScaleSweepRequest,
    ScaleSweepResult,
)
from server.schemas.errors import COMPUTE_ERRORS
from server.serialize import check_result_size

router = APIRouter(prefix="/api", tags=["mechanics"], route_class=ComputeRoute, responses=COMPUTE_ERRORS)

INDUCTION = "red ball king river frog clock red ball king river frog clock"


@router.post(
    "/decode",
    response_model=DecodeResult,
    response_class=ORJSONResponse,
    summary="Causal decoding one token at a time with a KV cache, checked against the full pass",
)
def decode_route(
    req: Annotated[
        DecodeRequest,
        Body(
            openapi_examples={
                "induction": {
                    "summary": "The induction model, step by step",
                    "value": {"model": "induction", "text": INDUCTION},
                },
                "grouped": {
                    "summary": "A random layer with 8 heads sharing 2 K/V groups (a 4x smaller cache)",
                    "value": {
                        "model": "random",
                        "text": "the cat sat on the mat",
                        "options": {"d_model": 32, "heads": 8, "kv_heads": 2},
                        "masks": {"causal": True},
                    },
                },
            }
        ),
    ],
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
) -> ORJSONResponse:
    """Adds one position at a time: each step projects only the new token, appends its K and V to every layer's
    cache and attends from the new query over all cached keys. Returns per step the new query row of every head,
    the cache size after it and (induction) the predicted next token; `max_diff_vs_full` compares every step with
    the full pass (~0); `cache` gives bytes per token and the formula. Needs causal masking."""
    refuse_fields(req, ("layer", "include", "precision", *ONE_SEQUENCE), "decode runs every layer of one sequence")
    prepared = prepare(req.model_copy(update={"include": []}), settings, models, runtime)
    model, s = prepared.model, len(prepared.encoded.tokens)
    field = "tokens" if req.tokens is not None else "x" if req.x is not None else "text"
    rows = model.n_layers(prepared.inp) * model.n_heads(prepared.inp) * s * (s + 1) // 2  # every step's new row
    check_result_size(rows, settings.max_result_values, field, "decode a shorter sequence")
    with torch.inference_mode():
        result = decode(model, prepared.inp, prepared.encoded, runtime.device, runtime.dtype)
    w = result.full.layers[0].weights
    body: dict[str, Any] = {
        "model": model.info.name,
        "tokens": result.full.tokens,
        "layers": len(result.full.layers),
        "heads": w.n_heads,
        "kv_heads": w.n_kv_heads,
        "d_head": w.d_head,
        "d_v": w.d_v,
        "dtype": str(runtime.dtype).removeprefix("torch."),
        "steps": [dataclasses.asdict(step) for step in result.steps],
        "max_diff_vs_full": result.max_diff_vs_full,
        "cache": dataclasses.asdict(result.cache),
    }
    return ORJSONResponse(body)


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
    if flops > settings.max_measure_flops:
        raise ApiError(
            422,
            "too_large",
            f"one layer of batch {q.batch:,} x seq_len {q.seq_len:,} at d_model {q.d_model:,} is {flops:,} FLOPs, "
            f"limit {settings.max_measure_flops:,} (set by ATTNLAB_MAX_MEASURE_FLOPS on this server): "
            "a smaller batch, seq_len or d_model; or leave measure off",
            "measure",
        )


@router.post(
    "/cost",
    response_model=CostResult,
    response_class=ORJSONResponse,
    summary="Score and KV-cache memory, parameters and FLOPs of attention; optionally measured here",
)
def cost_route(
    req: Annotated[
        CostRequest,
        Body(
            openapi_examples={
                "minilm": {"summary": "MiniLM's shape at 512 tokens", "value": {"seq_len": 512}},
                "long": {
                    "summary": "8192 tokens, 32 heads sharing 8 K/V groups, bfloat16",
                    "value": {
                        "seq_len": 8192,
                        "heads": 32,
                        "kv_heads": 8,
                        "d_model": 4096,
                        "layers": 32,
                        "dtype": "bfloat16",
                    },
                },
                "measure": {"summary": "Measure one layer on this server", "value": {"seq_len": 256, "measure": True}},
            }
        ),
    ],
    settings: SettingsDep,
    runtime: RuntimeDep,
) -> ORJSONResponse:
    """The formulas for B sequences of S tokens (score elements B x H x S^2 per layer, KV cache 2 x B x layers x
    kv_heads x S x d_head x bytes, projection parameters of 1 head vs H heads, FLOPs) and memory against S. With
    `measure: true` (S, width, heads and batch within this server's limits) one layer of the engine runs here and
    its peak memory and time are measured: on CUDA by torch.cuda.max_memory_allocated, on CPU by torch's
    profiler counting every tensor allocation and free. Its scores are bounded by ATTNLAB_MAX_RESULT_VALUES and its
    FLOPs by ATTNLAB_MAX_MEASURE_FLOPS; on a CPU float16 and bfloat16 are measured in float32 (`measured_dtype`,
    `note`)."""
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
    return ORJSONResponse(body)


@router.post(
    "/scale-sweep",
    response_model=ScaleSweepResult,
    response_class=ORJSONResponse,
    summary="Why scores are divided by sqrt(d_k): the spread of q.k against d_k, unscaled and scaled",
)
def scale_sweep_route(
    req: Annotated[
        ScaleSweepRequest,
        Body(
            openapi_examples={
                "figure": {"summary": "The chapter's Figure 21.5", "value": {"widths": [1, 4, 16, 64, 256]}}
            }
        ),
    ],
    settings: SettingsDep,
) -> ORJSONResponse:
    """For random q and k with the given per-coordinate variance: the standard deviation of q.k (grows like
    sqrt(d_k)) and of q.k / sqrt(d_k) (stays flat), and what a softmax over `keys` such scores does: its entropy
    and its largest weight, unscaled and scaled. samples x keys x the sum of the widths is bounded by
    ATTNLAB_MAX_SWEEP_VALUES."""
    work = sweep_values(req.widths, req.samples, req.keys)
    if work > settings.max_sweep_values:
        raise ApiError(
            422,
            "too_large",
            f"samples x keys x sum of widths = {req.samples:,} x {req.keys:,} x {sum(req.widths):,} = {work:,} "
            f"q.k products, limit {settings.max_sweep_values:,} (set by ATTNLAB_MAX_SWEEP_VALUES on this server): "
            "ask for fewer or narrower widths, fewer samples or fewer keys",
            "widths",
        )
    rows = scale_sweep(req.widths, req.samples, req.seed, req.variance, req.keys)
    return ORJSONResponse(
        {
            "variance": req.variance,
            "samples": req.samples,
            "keys": req.keys,
            "uniform_entropy": math.log(req.keys),
            "widths": [dataclasses.asdict(r) for r in rows],
        }
    )
