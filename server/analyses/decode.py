"""/api/decode: causal decoding one token at a time with a KV cache (engine/analysis/decode.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field

from engine.analysis.decode import CacheFormula, DecodeStep, decode
from engine.analysis.generate import GeneratedToken, Sampling
from server.declare import Analysis, Context, Limit, answer_of
from server.errors import ApiError
from server.plan import make_plan
from server.refusals import ONE_SEQUENCE, refuse_fields
from server.schemas.attention import AttentionRequest
from server.schemas.ints import Count, Index
from server.serialize import check_result_size

INDUCTION = "red ball king river frog clock red ball king river frog clock"


class GenerateRequest(BaseModel):
    """Tokens to generate after the input, each fed back through the KV cache (models that predict tokens)."""

    tokens: Count = Field(description="how many tokens to generate; at most ATTNLAB_MAX_GENERATE_TOKENS")
    sampling: Literal["greedy", "sample"] = Field("greedy", description="the most likely token, or one drawn")
    seed: Index = Field(0, description="sample: the seed of the torch.Generator that draws")
    temperature: float = Field(1.0, gt=0, le=1000, description="sample: the logits are divided by it")
    top_k: Count | None = Field(None, description="sample: among the k most likely tokens only")


class DecodeRequest(AttentionRequest):
    """The /api/attention body for a causal model that decodes (capabilities.decode in GET /api/models); every layer
    decodes. `generate` adds new tokens after the input."""

    generate: GenerateRequest | None = None


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
GeneratedTokenOut = answer_of(
    GeneratedToken,
    "GeneratedTokenOut",
    p=Field(description="the model's probability of this token at the position before (temperature 1)"),
    weights=Field(description="per layer, per head: this token's query's weights over position + 1 keys"),
)


class DecodeResult(BaseModel):
    model: str
    tokens: list[str]
    special: list[bool] | None = Field(
        None, description="per token: a special token the tokenizer added; null: not known"
    )
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    d_v: int
    dtype: str
    steps: list[DecodeStepOut]  # type: ignore[valid-type]
    max_diff_vs_full: float = Field(description="largest |cached - full recomputation| of any weight or output")
    cache: CacheOut  # type: ignore[valid-type]
    generated: list[GeneratedTokenOut] | None = Field(  # type: ignore[valid-type]
        None, description="the tokens generated after the input (when `generate` was given)"
    )


def decode_route(req: DecodeRequest, ctx: Context) -> dict[str, Any]:
    """Adds one position at a time: each step projects only the new token, appends its K and V to every layer's
    cache and attends from the new query over all cached keys. Returns per step the new query row of every head,
    the cache size after it and (induction) the predicted next token; `max_diff_vs_full` compares every step with
    the full pass (~0); `cache` gives bytes per token and the formula. Needs causal masking. With `generate`, N
    new tokens follow, each chosen from the last logits (greedy, or sampled from the seed) and fed back through the
    cache: `generated` gives each one's id, label, probability and attention row per layer and head."""
    settings, runtime = ctx.settings, ctx.runtime
    refuse_fields(req, ("layer", "include", "precision", *ONE_SEQUENCE), "decode runs every layer of one sequence")
    gen = req.generate
    limit = settings.limit("max_generate_tokens")
    if gen is not None and gen.tokens > limit:
        raise ApiError(
            422,
            "too_large",
            f"got {gen.tokens} tokens to generate, limit {limit} (set by ATTNLAB_MAX_GENERATE_TOKENS on this "
            "server): generate fewer",
            "generate.tokens",
        )
    prepared = make_plan(req.model_copy(update={"include": [], "generate": None}), settings, ctx.models, runtime)
    model, s = prepared.model, len(prepared.encoded.tokens)
    field = "tokens" if req.tokens is not None else "x" if req.x is not None else "text"
    n = 0 if gen is None else gen.tokens
    rows = model.n_layers(prepared.inp) * model.n_heads(prepared.inp) * (s + n) * (s + n + 1) // 2  # each new row
    shorter = "generate fewer tokens or decode a shorter sequence" if n else "decode a shorter sequence"
    check_result_size(rows, settings.max_result_values, "generate.tokens" if n else field, shorter)
    sampling = None if gen is None else Sampling(gen.tokens, gen.sampling, gen.seed, gen.temperature, gen.top_k)
    with torch.inference_mode():
        result = decode(model, prepared.inp, prepared.encoded, runtime.device, runtime.dtype, sampling)
    w = result.full.layers[0].weights
    return {
        "model": model.info.name,
        "tokens": result.full.tokens,
        "special": None if prepared.encoded.special is None else list(prepared.encoded.special),
        "layers": len(result.full.layers),
        "heads": w.n_heads,
        "kv_heads": w.n_kv_heads,
        "d_head": w.d_head,
        "d_v": w.d_v,
        "dtype": str(runtime.dtype).removeprefix("torch."),
        "steps": [dataclasses.asdict(step) for step in result.steps],
        "max_diff_vs_full": result.max_diff_vs_full,
        "cache": dataclasses.asdict(result.cache),
        "generated": None if result.generated is None else [dataclasses.asdict(g) for g in result.generated],
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
        "generate": {
            "summary": "The induction model continues a repeat, greedily, for 6 tokens",
            "value": {
                "model": "induction",
                "text": "red ball king river frog clock red ball",
                "generate": {"tokens": 6},
            },
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
    limits=(
        Limit(
            "max_generate_tokens",
            64,
            "tokens one `/api/decode` may generate after its input (`generate.tokens`); the model's positions "
            "bound it too",
        ),
    ),
)
ANALYSES = (DECODE,)
