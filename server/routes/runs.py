"""GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y} and /api/runs/{run}/rows/{layer}/{head}/{query}: a kept
long run's weights, recomputed on demand (engine/tiles.py), in JSON or the arrays form, with an ETag.

A tile or a row of one run never changes, but a client may post a new run under the same name, so the ETag names
the run's own making (its serial) as well as the tile: `Cache-Control: private, no-cache` has the browser ask
again, and an unchanged tile costs a 304. A tile or row that is computed takes a compute slot, as a POST does
(server/scheduling.py): a flood of them queues, waits at most ATTNLAB_QUEUE_TIMEOUT_S (a 503), and one whose client
has gone (a tile zoomed past) is withdrawn before it runs. `tile_of` and `row_of` check a request and make its
answer, here and for attnlab.tile and attnlab.row in a notebook's process (server/inprocess.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Annotated, Literal

import torch
from fastapi import APIRouter, Header, Path, Query
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from engine.long import LongRun
from engine.tiles import row, tile, tile_spec
from server.deps import Runtime, RuntimeDep
from server.errors import ApiError
from server.forms import answer
from server.progress import RunName
from server.scheduling import ComputePool, disconnected
from server.schemas.errors import ANY_ROUTE, errors
from server.schemas.ints import INT64_MAX, INT64_MIN

router = APIRouter(tags=["attention"], responses=errors(*ANY_ROUTE, 404, 422))
PathInt = Annotated[int, Path(ge=INT64_MIN, le=INT64_MAX)]  # checked against the run after
TOP = 10
Part = tuple[LongRun, Callable[[], dict]]  # a kept run, and the making of one answer read from it


class TileAnswer(BaseModel):
    """One 256 x 256 tile of a head's weights (fewer cells at the run's edge)."""

    z: int = Field(description="the zoom level: 0 is the whole map in one tile")
    x: int = Field(description="the tile's column (keys)")
    y: int = Field(description="the tile's row (queries)")
    q0: int = Field(description="the first query the tile covers")
    k0: int = Field(description="the first key the tile covers")
    cell: int = Field(description="positions per cell, each way: 1 at the deepest level (the exact weights)")
    agg: Literal["max", "mean"] = Field(description="how a cell of more than one position is summarised")
    weights: list[list[float]] = Field(description="the cells, queries by keys")


class TopKey(BaseModel):
    key: int
    token: str
    weight: float


class RowAnswer(BaseModel):
    """One query's exact weights over every key."""

    layer: int
    head: int
    query: int
    token: str = Field(description="the query's token")
    weights: list[float] = Field(description="the query's weight on each key (S)")
    top: list[TopKey] = Field(description=f"its {TOP} largest keys with a weight above 0, largest first")


def _held(runtime: Runtime, name: str, layer: int, head: int) -> LongRun:
    """The run kept under `name` (a 404 run_expired when it is not), with `layer` and `head` checked against it."""
    run = runtime.long_runs.get(name)
    if not 0 <= layer < len(run.layers):
        raise ApiError(
            422, "invalid_request", f"got layer {layer}; this run has layers 0 to {len(run.layers) - 1}", "layer"
        )
    if not 0 <= head < run.n_heads:
        raise ApiError(422, "invalid_request", f"got head {head}; this run has heads 0 to {run.n_heads - 1}", "head")
    return run


def none_match(if_none_match: str, etag: str) -> bool:
    """Whether If-None-Match names what `etag` tags (RFC 9110 13.1.2): `*`, which any current representation
    matches, or a list of entity-tags compared weakly, as a GET's are (W/"x" matches "x")."""
    if if_none_match.strip() == "*":
        return True
    return etag.removeprefix("W/") in (t.strip().removeprefix("W/") for t in if_none_match.split(","))


async def _cached(
    request: Request,
    run: LongRun,
    what: tuple[object, ...],
    accept: str | None,
    if_none_match: str | None,
    body: Callable[[], dict],
) -> Response:
    """`body()`'s answer, computed in a compute slot, with an ETag naming this making of the run and `what`; a 304,
    computing nothing, when the client already holds it (If-None-Match)."""
    etag = '"' + hashlib.sha256(repr((run.serial, accept, *what)).encode()).hexdigest()[:32] + '"'
    headers = {"ETag": etag, "Cache-Control": "private, no-cache", "Vary": "Accept"}
    if if_none_match is not None and none_match(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    pool: ComputePool = request.app.state.pool
    gone = asyncio.ensure_future(disconnected(request))
    try:
        response = await pool.run(lambda: answer(body(), accept), gone)
    finally:
        gone.cancel()
    response.headers.update(headers)
    return response


def tile_of(runtime: Runtime, run: str, layer: int, head: int, z: int, x: int, y: int, agg: str) -> Part:
    """The kept run and the making of one tile's answer, its run, layer, head and place checked first (a 404 for a
    run not kept, a 422 naming the field out of range)."""
    kept = _held(runtime, run, layer, head)
    s = len(kept.tokens)
    spec = tile_spec(s, s, z, x, y)
    if isinstance(spec, str):
        raise ApiError(422, "invalid_request", spec, spec.split(":", 1)[0])

    def body() -> dict:
        cells = tile(kept.layers[layer], head, spec, agg).numpy()
        return {"z": z, "x": x, "y": y, "q0": spec.q0, "k0": spec.k0, "cell": spec.cell, "agg": agg, "weights": cells}

    return kept, body


def row_of(runtime: Runtime, run: str, layer: int, head: int, query: int) -> Part:
    """The kept run and the making of one row's answer, checked as tile_of checks a tile."""
    kept = _held(runtime, run, layer, head)
    s = len(kept.tokens)
    if not 0 <= query < s:
        raise ApiError(422, "invalid_request", f"got query {query}; this run has positions 0 to {s - 1}", "query")

    def body() -> dict:
        w = row(kept.layers[layer], head, query)
        values, keys = torch.topk(w, min(TOP, s))
        top = [
            {"key": int(k), "token": kept.tokens[int(k)], "weight": float(v)}
            for v, k in zip(values, keys, strict=True)
            if float(v) > 0
        ]
        return {
            "layer": layer,
            "head": head,
            "query": query,
            "token": kept.tokens[query],
            "weights": w.numpy(),
            "top": top,
        }

    return kept, body


@router.get("/api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}", response_model=TileAnswer)
async def run_tile(
    request: Request,
    run: RunName,
    layer: PathInt,
    head: PathInt,
    z: PathInt,
    x: PathInt,
    y: PathInt,
    runtime: RuntimeDep,
    agg: Annotated[Literal["max", "mean"], Query()] = "max",
    accept: Annotated[str | None, Header()] = None,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """One 256 x 256 tile of a head's weights: exact at the deepest level, block maxima (or means) above it."""
    kept, body = tile_of(runtime, run, layer, head, z, x, y, agg)
    return await _cached(request, kept, ("tile", layer, head, z, x, y, agg), accept, if_none_match, body)


@router.get("/api/runs/{run}/rows/{layer}/{head}/{query}", response_model=RowAnswer)
async def run_row(
    request: Request,
    run: RunName,
    layer: PathInt,
    head: PathInt,
    query: PathInt,
    runtime: RuntimeDep,
    accept: Annotated[str | None, Header()] = None,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """One query's exact weights over every key, and its largest keys with their tokens."""
    kept, body = row_of(runtime, run, layer, head, query)
    return await _cached(request, kept, ("row", layer, head, query), accept, if_none_match, body)
