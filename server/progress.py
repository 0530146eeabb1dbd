"""Where each run a client named is: waiting for a compute slot behind `ahead` other jobs (queued), at layer i of n,
writing the answer, done or failed.

A client that wants to show progress names its run with the X-Attnlab-Run header (8 to 64 letters, digits, - or _)
and asks GET /api/progress/{run} while it waits. It asks on another connection than the run's, so its first ask can
reach the server before the run does; `wait_ms` on the ask bridges that (`arrival`). The board keeps the newest
`keep` runs only, so a client that never asks costs a few bytes, and runs are not listed: only whoever chose the
name can ask for it.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Path

from server.errors import ApiError

HEADER = "x-attnlab-run"
# a run's name, the one definition the header and every /api/.../{run} path check: anchored, since a path's
# pattern is searched for, not matched whole
RUN_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")
RunName = Annotated[str, Path(pattern=RUN_ID.pattern)]
FINAL = ("done", "failed")
ARRIVAL_POLL_S = 0.02  # how often a waiting ask looks for its run


@dataclass
class Run:
    stage: str = "queued"
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.monotonic)
    ahead: Callable[[], int | None] | None = None  # while queued: how many jobs wait before it (the pool's count)


class ProgressBoard:
    """The runs clients named, newest last, at most `keep` of them."""

    def __init__(self, keep: int = 1024) -> None:
        self.keep = keep
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, run_id: str, ahead: Callable[[], int | None] | None = None) -> Run:
        """The run is in (its body read) and waits for a compute slot; `ahead()` says behind how many other jobs.
        What comes back is the run itself, for `move`: a later run of the same name is a new one."""
        run = Run(ahead=ahead)
        with self._lock:
            self._runs[run_id] = run
            self._runs.move_to_end(run_id)
            while len(self._runs) > self.keep:
                self._runs.popitem(last=False)
        return run

    def move(self, run: Run, stage: str, done: int = 0, total: int = 0) -> None:
        """Move the run to `stage`; a stage with no count (writing, done, failed) keeps the layers' count. Done and
        failed are final: a run whose client left is failed, and its thread, still finishing a layer, does not move
        it back to "layers"."""
        with self._lock:
            if run.stage in FINAL:
                return
            run.stage = stage
            run.ahead = None
            if total:
                run.done, run.total = done, total

    def set(self, run_id: str, stage: str, done: int = 0, total: int = 0) -> None:
        """`move` the run of that name, if the board still holds it."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None:
            self.move(run, stage, done, total)

    def get(self, run_id: str) -> dict[str, object] | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return None
            elapsed = (time.monotonic() - run.started) * 1000
            ahead = run.ahead() if run.ahead is not None else None
            return {
                "run": run_id,
                "stage": run.stage,
                "done": run.done,
                "total": run.total,
                "ahead": ahead,
                "elapsed_ms": elapsed,
            }

    async def arrival(self, run_id: str, wait_ms: int) -> dict[str, object] | None:
        """`get`, after waiting up to `wait_ms` for a run not on the board yet to arrive (its request sent, its
        body still on the way); None when it has not arrived by then. Looks every ARRIVAL_POLL_S, so a wait costs
        at most wait_ms / 20 lookups and never holds the loop."""
        deadline = time.monotonic() + wait_ms / 1000
        while (got := self.get(run_id)) is None and time.monotonic() < deadline:
            await asyncio.sleep(min(ARRIVAL_POLL_S, max(0.0, deadline - time.monotonic())))
        return got


def run_id_of(value: str | None) -> str | None:
    """The run's name from its header, or None without one; a 422 naming the header when it is not a valid name."""
    if value is None:
        return None
    if not RUN_ID.fullmatch(value):
        raise ApiError(422, "invalid_request", f"8 to 64 letters, digits, - or _, got {value[:80]!r}", HEADER)
    return value
