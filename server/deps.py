"""What routes receive: settings, the loaded models, and the runtime (device, dtype, compute slots)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Annotated

import torch
from fastapi import Depends, Request

from engine.models import AttentionModel
from server.config import Settings
from server.errors import ApiError
from server.observability import Metrics


@dataclass
class Runtime:
    device: torch.device
    dtype: torch.dtype
    max_concurrent: int
    queue_timeout_s: float
    metrics: Metrics | None = None  # queue depth and busy slots, when the app keeps metrics
    _slots: threading.BoundedSemaphore = field(init=False)

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_concurrent)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the max_concurrent compute slots; a 503 after queue_timeout_s of waiting."""
        m = self.metrics
        if m is not None:
            m.queue_depth.inc()
        try:
            got = self._slots.acquire(timeout=self.queue_timeout_s)
        finally:
            if m is not None:
                m.queue_depth.dec()
        if not got:
            raise ApiError(
                503,
                "busy",
                f"all {self.max_concurrent} compute slots stayed busy for {self.queue_timeout_s:g} s "
                "(ATTNLAB_MAX_CONCURRENT, ATTNLAB_QUEUE_TIMEOUT_S); try again shortly",
                headers={"Retry-After": str(max(1, round(self.queue_timeout_s)))},
            )
        if m is not None:
            m.busy_slots.inc()
        try:
            yield
        finally:
            self._slots.release()
            if m is not None:
                m.busy_slots.dec()


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
