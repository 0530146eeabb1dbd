"""Wall-clock timings of engine steps, synchronised on CUDA so a step's time is its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def timed(timings: dict[str, float], name: str, device: torch.device) -> Iterator[None]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timings[name] = (time.perf_counter() - start) * 1000.0
