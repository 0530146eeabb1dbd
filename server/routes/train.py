"""The training lab's routes: start a run, follow it, list, rename, cancel, delete and export runs.

POST   /api/train                    202 {id, events} at once; the run trains on a compute thread
GET    /api/train                    every run kept, newest first
GET    /api/train/{id}               its spec, status and snapshots' measures so far
GET    /api/train/{id}/events        server-sent events: status, one per snapshot (measures and the probe's
                                     weights), end; the stored ones first, then each as it comes
POST   /api/train/{id}/cancel        stopped at its next step, its snapshots kept
PATCH  /api/train/{id}               renamed
DELETE /api/train/{id}               stopped, then gone with its files
GET    /api/train/{id}/export?step=N the snapshot's checkpoint directory as a .zip (or .tar): it opens through
                                     the loader as anyone's checkpoint does
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import tarfile
import zipfile
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from engine.trainlab.spec import TrainSpecError
from server.errors import ApiError
from server.schemas.errors import ANY_ROUTE, BODY, errors
from server.schemas.train import (
    RenameRequest,
    RunDetail,
    RunList,
    RunOut,
    SnapshotOut,
    TrainRequest,
    TrainStarted,
    spec_of,
)
from server.trained import TrainedModels, trained_name
from server.training import Event, Trainer, settings_named, stored_events
from server.trainstore import RunNotFound, RunRecord

router = APIRouter(prefix="/api/train", tags=["training"], responses=errors(*ANY_ROUTE))
RUN_ID = "^[0-9a-f]{1,32}$"
RunId = Annotated[str, Path(pattern=RUN_ID, description="the run's id (POST /api/train answers it)")]


def get_trainer(request: Request) -> Trainer:
    trainer: Trainer = request.app.state.trainer
    return trainer


def get_trained(request: Request) -> TrainedModels:
    trained: TrainedModels = request.app.state.trained
    return trained


TrainerDep = Annotated[Trainer, Depends(get_trainer)]


def kept(trainer: Trainer, run_id: str) -> RunRecord:
    try:
        return trainer.store.get(run_id)
    except RunNotFound:
        raise ApiError(404, "not_found", f"no training run {run_id!r} is kept on this server", "run_id") from None


def run_out(record: RunRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "status": record.status,
        "spec": record.spec,
        "created": record.created,
        "updated": record.updated,
        "error": record.error,
        "steps": list(record.steps),
    }


def default_name(body: Any) -> str:
    layers = f"{body.layers} layer" + ("s" if body.layers != 1 else "")
    heads = f"{body.heads} head" + ("s" if body.heads != 1 else "")
    return f"{body.task}, {layers} x {heads}, width {body.width}"


@router.post("", status_code=202, response_model=TrainStarted, responses=errors(*BODY, 429))
def start_run(body: TrainRequest, trainer: TrainerDep) -> TrainStarted:
    """Start a training run: its spec checked against this server's limits before anything is allocated, then
    queued for a compute slot; answered at once with its id."""
    spec = spec_of(body)
    try:
        trainer.check(spec)
    except TrainSpecError as err:
        raise ApiError(422, "invalid_request", settings_named(err.message), err.field) from err
    record = trainer.start(spec, body.name or default_name(body))  # type: ignore[attr-defined]
    return TrainStarted(id=record.id, name=record.name, status="queued", events=f"/api/train/{record.id}/events")


@router.get("", response_model=RunList)
def list_runs(trainer: TrainerDep) -> RunList:
    """Every run kept, newest first (without their measures: GET /api/train/{id})."""
    return RunList.model_validate({"runs": [run_out(r) for r in trainer.store.list()]})


@router.get("/{run_id}", response_model=RunDetail, responses=errors(404))
def get_run(run_id: RunId, trainer: TrainerDep) -> RunDetail:
    """One run: its spec, status and every snapshot's measures so far."""
    record = kept(trainer, run_id)
    snapshots = [
        SnapshotOut(step=s.step, measures=s.measures, model=trained_name(record.id, s.step)) for s in record.snapshots
    ]
    return RunDetail.model_validate({**run_out(record), "snapshots": snapshots})


def sse(kind: str, data: dict[str, Any]) -> bytes:
    if not kind:  # a keep-alive: a comment line, which an EventSource ignores
        return b": still training\n\n"
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@router.get(
    "/{run_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {"description": "server-sent events: status, snapshot, end", "content": {"text/event-stream": {}}},
        **errors(404),
    },
)
async def run_events(run_id: RunId, trainer: TrainerDep) -> StreamingResponse:
    """The run's events as server-sent events: `status` ({status}), `snapshot` ({step, measures, probe: the probe's
    attention weights for every head, float16 little-endian in base64, with shape and tokens}) and `end`
    ({status, error}), after which the stream closes. What is stored comes first, then each event as it comes."""
    live = trainer.live.get(run_id)
    events: AsyncIterator[Event]
    if live is not None:
        events = live.follow()
    else:
        await asyncio.to_thread(kept, trainer, run_id)  # the 404, before the stream starts
        events = stored_events(trainer.store, run_id)

    async def stream() -> AsyncIterator[bytes]:
        async for kind, data in events:
            yield sse(kind, data)

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # nginx passes each event on as it comes
    return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)


@router.post("/{run_id}/cancel", status_code=202, response_model=RunOut, responses=errors(*BODY, 404))
def cancel_run(run_id: RunId, trainer: TrainerDep) -> RunOut:
    """Stop the run at its next step; it is kept as cancelled with its snapshots. An ended run is left as it is."""
    kept(trainer, run_id)
    try:
        record = trainer.cancel(run_id)
    except RunNotFound:
        record = kept(trainer, run_id)
    return RunOut.model_validate(run_out(record))


@router.patch("/{run_id}", response_model=RunOut, responses=errors(*BODY, 404))
def rename_run(run_id: RunId, body: RenameRequest, trainer: TrainerDep) -> RunOut:
    """Rename the run."""
    kept(trainer, run_id)
    try:
        return RunOut.model_validate(run_out(trainer.store.rename(run_id, body.name)))
    except RunNotFound:
        raise ApiError(404, "not_found", f"no training run {run_id!r} is kept on this server", "run_id") from None


@router.delete("/{run_id}", status_code=204, response_class=Response, responses=errors(404))
def delete_run(run_id: RunId, trainer: TrainerDep, trained: Annotated[TrainedModels, Depends(get_trained)]) -> Response:
    """Stop the run if it trains, then delete it with its snapshots' files."""
    kept(trainer, run_id)
    stopping = trainer.stop_for_delete(run_id)
    if stopping is not None:
        stopping.result(timeout=60)  # its thread writes no more files
    with contextlib.suppress(RunNotFound):  # deleted by another request meanwhile
        trainer.store.delete(run_id)
    trained.forget(run_id)
    return Response(status_code=204)


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")[:60] or "run"


@router.get(
    "/{run_id}/export",
    response_class=Response,
    responses={
        200: {
            "description": "the snapshot's checkpoint directory",
            "content": {"application/zip": {}, "application/x-tar": {}},
        },
        **errors(404, 409, 422),
    },
)
def export_run(
    run_id: RunId,
    trainer: TrainerDep,
    step: Annotated[int | None, Query(ge=0, le=2**31, description="the snapshot's step (default: the last)")] = None,
    format: Annotated[Literal["zip", "tar"], Query(description="the archive's kind")] = "zip",
) -> Response:
    """A snapshot's checkpoint directory as an archive: config.json, model.safetensors, tokenizer.json (and the
    probe and measures), which attnlab's loader opens as any checkpoint (ATTNLAB_MODELS=NAME=DIR)."""
    record = kept(trainer, run_id)
    if not record.snapshots:
        raise ApiError(409, "not_ready", f"run {run_id} has no snapshot yet", "step")
    chosen = record.snapshots[-1] if step is None else record.snapshot(step)
    if chosen is None:
        steps = ", ".join(str(s.step) for s in record.snapshots)
        raise ApiError(404, "not_found", f"run {run_id} has no snapshot at step {step}; its steps: {steps}", "step")
    folder = f"{slug(record.name)}-{record.id}-step{chosen.step}"
    files = sorted(p for p in chosen.directory.iterdir() if p.is_file())
    out = io.BytesIO()
    if format == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, f"{folder}/{path.name}")
    else:
        with tarfile.open(fileobj=out, mode="w") as archive:
            for path in files:
                archive.add(path, f"{folder}/{path.name}")
    kind = "application/zip" if format == "zip" else "application/x-tar"
    disposition = f'attachment; filename="{folder}.{format}"'
    return Response(out.getvalue(), media_type=kind, headers={"Content-Disposition": disposition})
