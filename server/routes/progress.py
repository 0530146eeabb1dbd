"""GET /api/progress/{run}: where a run that its client named (X-Attnlab-Run) is, while the client waits."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server.deps import RuntimeDep, SettingsDep
from server.errors import ApiError
from server.progress import RunName
from server.schemas import ProgressResponse
from server.schemas.errors import ANY_ROUTE, errors

router = APIRouter(tags=["health"], responses=errors(*ANY_ROUTE, 404, 422))


@router.get("/api/progress/{run}", response_model=ProgressResponse)
async def progress(
    runtime: RuntimeDep,
    settings: SettingsDep,
    run: RunName,
    wait_ms: Annotated[
        int,
        Query(
            ge=0,
            le=60_000,  # the setting's own bound (server/config.py)
            description="How long to wait for a run not on the board yet (its request sent from another "
            "connection, not yet arrived) before answering 404; 0 answers at once. At most the server's "
            "ATTNLAB_MAX_PROGRESS_WAIT_MS (10000 by default).",
        ),
    ] = 0,
) -> ProgressResponse:
    if wait_ms > settings.max_progress_wait_ms:
        message = f"at most {settings.max_progress_wait_ms} ms (ATTNLAB_MAX_PROGRESS_WAIT_MS), got {wait_ms}"
        raise ApiError(422, "invalid_request", message, "wait_ms")
    got = await runtime.progress.arrival(run, wait_ms)
    if got is None:
        waited = f" after waiting {wait_ms} ms for it" if wait_ms else ""
        message = f"no run named {run!r} on this server{waited} (or not among its last {runtime.progress.keep})"
        raise ApiError(404, "unknown_run", message, "run")
    return ProgressResponse.model_validate(got)
