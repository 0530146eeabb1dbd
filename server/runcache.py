"""Recent forward passes, kept so that one action costs one forward.

The page sends several requests for one change (the views, the head types, the top heads for a pair), and a person
often goes back and forth between two settings. Each of those asks for the same forward pass; this cache keeps the
passes (`ModelRun`, every intermediate tensor) under a key made of everything that decides them, least recently
used first out, within ATTNLAB_CACHE_BYTES. A run is read, never changed, once made, so one object serves every
request that asks for it. Runs with ablations, edits or shifts are not kept: they are one-off experiments.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from typing import Any

import orjson
import torch

from engine.interventions import Interventions
from engine.models import ModelRun, RunInput
from server.observability import Metrics


def _canonical(value: Any) -> Any:
    """A JSON-able form of a RunInput's parts: tensors by dtype, shape and a digest of their bytes."""
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous()
        digest = hashlib.sha256(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest()
        return ["tensor", str(data.dtype), list(data.shape), digest]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def run_key(model: str, inp: RunInput, interventions: Interventions, device: str, dtype: str) -> bytes:
    """Everything that decides a forward pass, as a digest: the same key, the same run."""
    parts = [model, _canonical(inp), _canonical(interventions), device, dtype]
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).digest()


def cacheable(interventions: Interventions) -> bool:
    return not (
        interventions.ablate or interventions.edit or interventions.shift or interventions.value or interventions.patch
    )


def run_bytes(run: ModelRun) -> int:
    """Bytes the run's tensors hold (each storage once: views of one tensor share it)."""
    seen: set[int] = set()
    total = 0
    for t in run.tensors():
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


class RunCache:
    """An LRU of ModelRuns bounded in bytes; safe to use from every compute thread."""

    def __init__(self, max_bytes: int, metrics: Metrics | None = None) -> None:
        self.max_bytes = max_bytes
        self.metrics = metrics
        self._runs: OrderedDict[bytes, tuple[ModelRun, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0

    def get(self, *keys: bytes, count: bool = True) -> ModelRun | None:
        """The run kept under the first of `keys` that has one. One lookup counts one hit or one miss (a miss is a
        forward to come); `count`: False for a look again before going on with a pass already counted."""
        found = None
        with self._lock:
            for key in keys:
                found = self._runs.get(key)
                if found is not None:
                    self._runs.move_to_end(key)
                    break
        if self.metrics is not None and count:
            self.metrics.cache.labels("hit" if found else "miss").inc()
        return found[0] if found is not None else None

    def put(self, key: bytes, run: ModelRun) -> None:
        size = run_bytes(run)
        if size > self.max_bytes:
            return  # larger than the whole cache: keeping it would evict everything for one run
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self._runs[key] = (run, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, (_, freed) = self._runs.popitem(last=False)
                self.nbytes -= freed
            held = self.nbytes
        if self.metrics is not None:
            self.metrics.cache_bytes.set(held)

    def __len__(self) -> int:
        return len(self._runs)
