"""POST /api/runs: one forward over a long sequence, kept by name so that its tiles and rows can be asked for.

Every layer's attention runs blockwise (engine/long.py): the run keeps Q, K and the row normalisers, never an
S x S tensor, and answers each head's summary, grid x grid block maxima and means. GET
/api/runs/{run}/tiles/... and /rows/... (server/routes/runs.py) recompute any part exactly from what it kept.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, Field

from engine.long import RunShape, long_run, run_shape, sink_mass
from engine.tiles import PYRAMID_BYTES
from server.declare import Analysis, Context, Limit
from server.errors import ApiError
from server.plan import to_run_input
from server.refusals import check_limits, choose_model
from server.schemas import AttentionRequest

# the fields of the /api/attention body a long run reads; any other one set is a 422 that names it
READ = {"model", "text", "tokens", "x", "weights", "heads", "kv_heads", "options", "masks", "all_masked", "scale"}
READ |= {"layer", "grid"}
CHARS_PER_TOKEN = 16  # characters of text a long run's token limit allows per token
MAX_BLOCKED = 4096  # single blocked cells a long run takes (each block of the pass checks them)


class RunsRequest(AttentionRequest):
    grid: int = Field(256, ge=8, le=1024, description="each head's summary is grid x grid blocks of the weights")


class HeadSummary(BaseModel):
    grid: int
    block: int = Field(description="positions per block, each way")
    max: list[list[float]] = Field(description="each block's largest weight")
    mean: list[list[float]] = Field(description="each block's mean weight (masked cells count as 0)")


class RunHead(BaseModel):
    index: int
    summary: HeadSummary
    sink_mass: float = Field(description="mean over queries with a key of the weight on key 0")


class RunLayer(BaseModel):
    index: int
    heads: list[RunHead]


class RunsResult(BaseModel):
    run: str = Field(description="the run's name (X-Attnlab-Run, or one the server chose): its tiles and rows")
    model: str
    tokens: list[str]
    config: dict[str, Any]
    layers: list[RunLayer]
    timings_ms: dict[str, float]


def refuse_unread(req: RunsRequest) -> None:
    for name in sorted(req.model_fields_set - READ):
        raise ApiError(
            422, "not_supported", f"a long run does not read {name!r}; it reads {', '.join(sorted(READ))}", name
        )
    if req.masks is not None and len(req.masks.blocked) > MAX_BLOCKED:
        raise ApiError(
            422,
            "too_large",
            f"got {len(req.masks.blocked)} blocked cells; a long run takes {MAX_BLOCKED}",
            "masks.blocked",
        )


def check_run_cost(shape: RunShape, req: RunsRequest, ctx: Context, field: str, pyramid: int) -> None:
    """Refuse, before the forward, a run whose work passes ATTNLAB_MAX_RUN_WORK (a 422) or that would keep more than
    ATTNLAB_RUN_BYTES (a 413, as the store would refuse it once made), each naming `field` and the setting."""
    work, most = shape.work(), ctx.settings.limit("max_run_work")
    if work > most:
        raise ApiError(
            422,
            "too_large",
            f"a run of {shape.s:,} tokens through {shape.layers} layers of {shape.heads} heads of width {shape.d_head} "
            f"is {work:,} q.k products, limit {most:,} (set by ATTNLAB_MAX_RUN_WORK on this server): send fewer "
            "tokens, or a model with fewer or narrower heads",
            field,
        )
    size, room = shape.kept_bytes(req.grid, pyramid), ctx.runtime.long_runs.limit
    if size > room:
        raise ApiError(
            413,
            "too_large",
            f"this run would keep {size:,} bytes, more than ATTNLAB_RUN_BYTES = {room:,}: send fewer tokens or "
            "layers, or raise the setting",
            field,
        )


def compute_runs(req: RunsRequest, ctx: Context) -> dict[str, Any]:
    """Up to ATTNLAB_MAX_RUN_TOKENS tokens (and the model's own positions). The summaries come in JSON or the arrays
    form; name the run with X-Attnlab-Run to find it again (a name the server chose comes back in `run`)."""
    refuse_unread(req)
    model = choose_model(req, ctx.models)
    inp = to_run_input(req)
    limit = ctx.settings.limit("max_run_tokens")
    field = "tokens" if req.tokens is not None else "x" if req.x is not None else "text"

    def within(n: int) -> None:
        if n > limit:
            message = f"got {n} tokens, limit {limit} (set by ATTNLAB_MAX_RUN_TOKENS on this server)"
            raise ApiError(422, "too_large", message, field)

    within(model.count_tokens(inp))  # words or rows, before anything is tokenised or embedded
    # /api/attention's checks, each naming its field, with the long run's token limit (and text long enough for it)
    chars = max(ctx.settings.max_text_chars, limit * CHARS_PER_TOKEN)
    check_limits(req, ctx.settings.model_copy(update={"max_tokens": limit, "max_text_chars": chars}), ctx.runtime.dtype)
    kept = ctx.runtime.long_runs
    pyramid = min(PYRAMID_BYTES, kept.limit // 8)
    device, dtype = ctx.runtime.device, ctx.runtime.dtype

    def bounded(n: int) -> None:  # the run's work and what it would keep, at n tokens
        check_run_cost(run_shape(model, inp, n, device, dtype), req, ctx, field, pyramid)

    bounded(model.count_tokens(inp))
    encoded = model.encode(inp)
    within(len(encoded.tokens))  # a tokenizer's pieces can outnumber the words
    bounded(len(encoded.tokens))
    start = time.perf_counter()
    run = long_run(model, inp, device, dtype, req.grid, pyramid, encoded)
    ms = (time.perf_counter() - start) * 1000
    name = ctx.run_name or uuid.uuid4().hex
    kept.put(name, run)
    layers = []
    for i, (keep, (smax, smean)) in enumerate(zip(run.layers, run.summaries, strict=True)):
        sinks = sink_mass(keep)
        heads = [
            {
                "index": h,
                "summary": {"grid": run.grid, "block": run.block, "max": smax[h].numpy(), "mean": smean[h].numpy()},
                "sink_mass": sinks[h],
            }
            for h in range(run.n_heads)
        ]
        layers.append({"index": req.layer if req.layer is not None else i, "heads": heads})
    return {
        "run": name,
        "model": run.model,
        "tokens": run.tokens,
        "config": {
            "seq_len": len(run.tokens),
            "n_layers": len(run.layers),
            "n_heads": run.n_heads,
            "d_head": run.d_head,
            "grid": run.grid,
            "block": run.block,
            "tile": 256,
            "levels": run.levels,
            "fine": run.layers[0].fine,
            "bytes": run.nbytes,
        },
        "layers": layers,
        "timings_ms": {"run": ms},
    }


RUNS = Analysis(
    name="runs",
    request=RunsRequest,
    answer=RunsResult,
    run=compute_runs,
    summary="A long run, kept by name: every head's block summary, then tiles and rows on demand",
    forms=("json", "arrays"),
    examples={
        "small": {
            "summary": "A short run of the random model, summarised in 8 x 8 blocks per head",
            "value": {"model": "random", "text": "the cat sat on the mat and the dog sat on the log", "grid": 8},
        }
    },
    tags=("attention",),
    limits=(
        Limit("max_run_tokens", 32_768, "tokens one POST /api/runs may hold (and the model's own positions)"),
        Limit(
            "max_run_work",
            300_000_000_000,
            "q.k products one POST /api/runs may ask for (layers x heads x S^2 x d_head), counted before it runs: "
            "bench-long's run at 32,768 tokens (2 heads of 64: 1.4e11) passes",
        ),
        Limit(
            "run_bytes",
            2 << 30,
            "bytes the long runs kept for tiles and rows may hold in all, least recently used first out (a run of "
            "S tokens keeps about 2 S d_head bytes per head and layer in float32, plus its block pyramid)",
        ),
    ),
)
ANALYSES = (RUNS,)
