"""What routes receive: settings, the loaded models, and the runtime (device, dtype, compute slots)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch
from fastapi import Depends, Request

from engine.models import AttentionModel
from server.config import Settings
from server.progress import ProgressBoard
from server.runcache import RunCache
from server.scheduling import ComputePool


@dataclass
class Runtime:
    device: torch.device
    dtype: torch.dtype
    pool: ComputePool  # the compute threads every computing route runs on (server/scheduling.py)
    runs: RunCache  # recent forward passes (server/runcache.py)
    progress: ProgressBoard = field(default_factory=ProgressBoard)  # where named runs are (server/progress.py)


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_models(request: Request) -> dict[str, AttentionModel]:
    models: dict[str, AttentionModel] = request.app.state.models
    return models


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


SettingsDep = Annotated[Settings, Depends(get_settings)]
ModelsDep = Annotated[dict[str, AttentionModel], Depends(get_models)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
