"""Measured cost of a computation on this machine: wall time and peak memory, on CPU and on CUDA.

Peak memory is what the computation allocated above what was already allocated when it started:
    CUDA  torch.cuda.max_memory_allocated after torch.cuda.reset_peak_memory_stats (the caching allocator's
          own high-water mark), minus the bytes allocated before
    CPU   torch's profiler with profile_memory=True records every tensor allocation and free; the largest
          running total, in time order, is the peak (tensors only: not Python objects or the allocator's slack)
The time is taken on a separate run without the profiler, after a warm-up run, synchronised on CUDA.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

T = TypeVar("T")

CPU_METHOD = (
    "torch's profiler (profile_memory): the largest running total of CPU tensor allocations minus frees, in time order"
)
CUDA_METHOD = "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus the bytes allocated before"


@dataclass(frozen=True)
class Measurement:
    peak_bytes: int
    ms: float
    method: str  # how peak_bytes was measured, in words


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# torch's profiler is one per process: two threads profiling at once crash it (a segmentation fault, measured with
# two threads measuring a 300 x 300 product, every time), and one thread's allocations would count in the other's
# peak and time. The server measures on several compute threads (an audit and /api/cost at once), so one at a time.
_ONE_AT_A_TIME = threading.Lock()


def measure(fn: Callable[[], T], device: torch.device) -> tuple[T, Measurement]:
    """Run fn three times: a warm-up, a timed run, and a run whose peak memory is recorded; one measurement at a
    time in this process."""
    with _ONE_AT_A_TIME:
        return _measure(fn, device)


def _measure(fn: Callable[[], T], device: torch.device) -> tuple[T, Measurement]:
    fn()
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    ms = (time.perf_counter() - start) * 1000.0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        out = fn()
        _sync(device)
        return out, Measurement(torch.cuda.max_memory_allocated(device) - before, ms, CUDA_METHOD)
    with torch.autograd.profiler.profile(profile_memory=True, use_kineto=False) as prof:
        out = fn()
    running = peak = 0
    for event in sorted(prof.function_events, key=lambda e: e.time_range.start):
        running += event.self_cpu_memory_usage
        peak = max(peak, running)
    return out, Measurement(peak, ms, CPU_METHOD)
