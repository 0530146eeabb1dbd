from __future__ import annotations

import tomllib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch
from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from server.config import Settings
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.schemas import HealthResponse
from server.schemas.errors import ANY_ROUTE, errors

router = APIRouter(tags=["health"], responses=errors(*ANY_ROUTE))
# what one request may ask for: every max_* setting but the server-wide two (computations and connections at once),
# and every limit an analysis declares (server/declare.py Limit), so a new one is reported with no change here
LIMITS = tuple(
    n for n in Settings.model_fields if n.startswith("max_") and n not in ("max_concurrent", "max_connections")
)


@cache
def attnlab_version() -> str:
    """The installed package's version; a server run from a checkout that was never installed (PYTHONPATH set to
    it) reads the checkout's pyproject.toml instead of answering /api/health with a 500."""
    try:
        return version("attnlab")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text())["project"]["version"])


@router.get("/api/health", response_model=HealthResponse)
async def health(runtime: RuntimeDep, models: ModelsDep, settings: SettingsDep) -> HealthResponse:
    return HealthResponse(
        status="ok",
        version=attnlab_version(),
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        torch=torch.__version__,
        cuda_available=torch.cuda.is_available(),
        models=sorted(models),
        limits={**{name: getattr(settings, name) for name in LIMITS}, **settings.declared},
    )


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text format: requests, latency, errors, queue depth and busy slots of this server. Rendered on a
    thread, so that a scrape never holds the event loop (and every other request) while it writes."""
    registry = request.app.state.metrics.registry
    return Response(await run_in_threadpool(generate_latest, registry), media_type=CONTENT_TYPE_LATEST)
