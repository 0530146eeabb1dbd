"""/api/decode: causal decoding one token at a time with a KV cache (engine/analysis/decode.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from pydantic import BaseModel, Field

from engine.analysis.decode import CacheFormula, DecodeStep, decode
from server.declare import Analysis, Context, answer_of
from server.prepare import ONE_SEQUENCE, prepare, refuse_fields
from server.schemas.attention import AttentionRequest
from server.serialize import check_result_size

INDUCTION = "red ball king river frog clock red ball king river frog clock"


class DecodeRequest(AttentionRequest):
    """The /api/attention body for a causal model that decodes (capabilities.decode in GET /api/models); every layer
    decodes."""


class NextToken(BaseModel):
    token: str
    p: float


DecodeStepOut = answer_of(
    DecodeStep,
    "DecodeStepOut",
    weights=Field(description="per layer, per head: the new query's weights, t + 1 keys"),
    cache_bytes=Field(description="bytes of every layer's K and V after this step"),
    next_token=(NextToken | None, Field(description="the most likely next token (models that predict tokens)")),
)
CacheOut = answer_of(CacheFormula, "CacheOut")


class DecodeResult(BaseModel):
    model: str
    tokens: list[str]
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    d_v: int
    dtype: str
    steps: list[DecodeStepOut]  # type: ignore[valid-type]
    max_diff_vs_full: float = Field(description="largest |cached - full recomputation| of any weight or output")
    cache: CacheOut  # type: ignore[valid-type]


def decode_route(req: DecodeRequest, ctx: Context) -> dict[str, Any]:
    """Adds one position at a time: each step projects only the new token, appends its K and V to every layer's
    cache and attends from the new query over all cached keys. Returns per step the new query row of every head,
    the cache size after it and (induction) the predicted next token; `max_diff_vs_full` compares every step with
    the full pass (~0); `cache` gives bytes per token and the formula. Needs causal masking."""
    settings, runtime = ctx.settings, ctx.runtime
    refuse_fields(req, ("layer", "include", "precision", *ONE_SEQUENCE), "decode runs every layer of one sequence")
    prepared = prepare(req.model_copy(update={"include": []}), settings, ctx.models, runtime)
    model, s = prepared.model, len(prepared.encoded.tokens)
    field = "tokens" if req.tokens is not None else "x" if req.x is not None else "text"
    rows = model.n_layers(prepared.inp) * model.n_heads(prepared.inp) * s * (s + 1) // 2  # every step's new row
    check_result_size(rows, settings.max_result_values, field, "decode a shorter sequence")
    with torch.inference_mode():
        result = decode(model, prepared.inp, prepared.encoded, runtime.device, runtime.dtype)
    w = result.full.layers[0].weights
    return {
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


DECODE = Analysis(
    name="decode",
    request=DecodeRequest,
    answer=DecodeResult,
    run=decode_route,
    summary="Causal decoding one token at a time with a KV cache, checked against the full pass",
    examples={
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
    },
    panel="decode",
    tags=("mechanics",),
)
ANALYSES = (DECODE,)
