"""What routes receive: settings, the loaded models, and the runtime (device, dtype, the run cache, progress).

The compute threads are the app's (app.state.pool, server/scheduling.py), not the runtime's: a Runtime runs a
request in whatever thread holds it, as attnlab.run does in the caller's (server/inprocess.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import torch
from fastapi import Depends, Request

from engine.models import AttentionModel
from server.config import Settings
from server.progress import ProgressBoard
from server.runcache import RunCache
from server.runstore import RunStore


@dataclass
class Runtime:
    device: torch.device
    dtype: torch.dtype
    runs: RunCache  # recent forward passes (server/runcache.py)
    progress: ProgressBoard = field(default_factory=ProgressBoard)  # where named runs are (server/progress.py)
    # long runs kept for their tiles and rows (server/runstore.py), within ATTNLAB_RUN_BYTES (app.py sets it)
    long_runs: RunStore = field(default_factory=lambda: RunStore(2 << 30))


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
