"""GET /api/progress/{run}: where a run that its client named (X-Attnlab-Run) is, while the client waits."""

from __future__ import annotations

from fastapi import APIRouter

from server.deps import RuntimeDep
from server.errors import ApiError
from server.progress import RunName
from server.schemas import ProgressResponse
from server.schemas.errors import ANY_ROUTE, errors

router = APIRouter(tags=["health"], responses=errors(*ANY_ROUTE, 404, 422))


@router.get("/api/progress/{run}", response_model=ProgressResponse)
async def progress(runtime: RuntimeDep, run: RunName) -> ProgressResponse:
    got = runtime.progress.get(run)
    if got is None:
        message = f"no run named {run!r} on this server (or not among its last {runtime.progress.keep})"
        raise ApiError(404, "unknown_run", message, "run")
    return ProgressResponse.model_validate(got)
