from __future__ import annotations

from importlib.metadata import version

import torch
from fastapi import APIRouter

from server.deps import ModelsDep, RuntimeDep
from server.schemas import HealthResponse

router = APIRouter(prefix="/api", tags=["health"])


@router.get("/health", response_model=HealthResponse)
async def health(runtime: RuntimeDep, models: ModelsDep) -> HealthResponse:
    return HealthResponse(
        status="ok",
        version=version("attnlab"),
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        torch=torch.__version__,
        cuda_available=torch.cuda.is_available(),
        models=sorted(models),
    )
