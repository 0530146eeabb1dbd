"""Long runs a client zooms into, kept by name within ATTNLAB_RUN_BYTES, least recently used first out.

A run (engine/long.py) holds per layer Q, K, the row normalisers and the fine pyramid, O(S d) plus a bounded
pyramid: never S x S. The client names it (X-Attnlab-Run); every tile and row request reads it by that name. A run
that is gone (evicted, or this replica restarted) is a 404 `run_expired`: the client posts the run again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from engine.long import LongRun
from server.errors import ApiError


class RunStore:
    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self._runs: OrderedDict[str, LongRun] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(r.nbytes for r in self._runs.values())

    def put(self, name: str, run: LongRun) -> None:
        if run.nbytes > self.limit:
            raise ApiError(
                413,
                "too_large",
                f"this run keeps {run.nbytes:,} bytes, more than ATTNLAB_RUN_BYTES = {self.limit:,}: send fewer "
                "tokens or layers, or raise the setting",
                "text",
            )
        with self._lock:
            self._runs.pop(name, None)
            self._runs[name] = run
            total = sum(r.nbytes for r in self._runs.values())
            while total > self.limit:
                _, gone = self._runs.popitem(last=False)
                total -= gone.nbytes

    def holds(self, name: str) -> bool:
        with self._lock:
            return name in self._runs

    def get(self, name: str) -> LongRun:
        with self._lock:
            run = self._runs.get(name)
            if run is None:
                raise ApiError(
                    404,
                    "run_expired",
                    f"no run named {name!r} is kept here (evicted, or never made on this server): POST /api/runs "
                    "again with the same X-Attnlab-Run",
                    "run",
                )
            self._runs.move_to_end(name)
            return run
