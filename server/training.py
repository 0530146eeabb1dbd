"""The training lab's runs on this server: each trains on a compute thread it holds for its whole run
(server/scheduling.py ComputePool.hold), keeps every snapshot in the run store (server/trainstore/) as the engine
hands it over (engine/trainlab/loop.py train), and tells the clients that follow it (GET /api/train/{id}/events).

    POST /api/train    check_spec (nothing allocated) -> the runs-at-once limit -> a queued row -> a compute thread
    the thread         running -> train(spec, on_snapshot=keep, should_stop) -> finished | cancelled | failed
    keep(snapshot)     Snapshot.write(data_dir/runs/RUN/step-N/) -> a snapshot row -> an event to every follower
    shutdown           every run stopped at its next step and marked interrupted, what it kept kept

A run's events (LiveRun) are kept in memory while it trains here, from its first status on, so a client that
connects late reads them all before the live ones; a run that trains elsewhere (another replica) or has ended is
read back from the store (stored_events).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.trainlab.loop import train
from engine.trainlab.snapshot import Snapshot
from engine.trainlab.spec import TrainLimits, TrainSpec, check_spec
from server.config import Settings
from server.errors import ApiError
from server.scheduling import ComputePool
from server.trainstore import RunNotFound, RunRecord, TrainStore

log = logging.getLogger("attnlab")

Event = tuple[str, dict[str, Any]]  # (kind, data): "status", "snapshot" or "end"; "" for a keep-alive (no event)
POLL_S = 1.0  # how often a run trained by another replica is read again from the shared store
# a stream with no event for this long gets a comment line, so that a proxy between (nginx's proxy_read_timeout
# is 60 s) does not close a run's stream while a slow run makes its next snapshot
IDLE_S = 15.0
IDLE: Event = ("", {})
SHUTDOWN_WAIT_S = 30.0  # how long a server stopping waits for its runs to stop (each stops at its next step)


def limits_of(settings: Settings) -> TrainLimits:
    return TrainLimits(
        max_parameters=settings.train_max_parameters,
        max_steps=settings.train_max_steps,
        max_tokens_per_step=settings.train_max_tokens_per_step,
        max_snapshots=settings.train_max_snapshots,
        max_probe_values=settings.train_max_probe_values,
    )


# the engine's limit names, as the settings that set them on this server
LIMIT_SETTINGS = {
    "(max_parameters)": "(ATTNLAB_TRAIN_MAX_PARAMETERS)",
    "(max_steps)": "(ATTNLAB_TRAIN_MAX_STEPS)",
    "(max_tokens_per_step)": "(ATTNLAB_TRAIN_MAX_TOKENS_PER_STEP)",
    "(max_snapshots)": "(ATTNLAB_TRAIN_MAX_SNAPSHOTS)",
    "(max_probe_values)": "(ATTNLAB_TRAIN_MAX_PROBE_VALUES)",
}


def settings_named(message: str) -> str:
    for engine_name, setting in LIMIT_SETTINGS.items():
        message = message.replace(engine_name, setting)
    return message


# ---- what an event carries --------------------------------------------------------------------------------------


def probe_payload(weights: torch.Tensor, tokens: list[str]) -> dict[str, Any]:
    """The probe's attention weights for every head, (layers, heads, T, T), as float16 little-endian bytes in base64
    with their shape: a quarter of the JSON numbers' size, and what the page's own arrays form decodes."""
    array = weights.detach().to(torch.float16).contiguous().numpy().astype("<f2", copy=False)
    return {
        "dtype": "float16",
        "shape": list(array.shape),
        "tokens": tokens,
        "data": base64.b64encode(array.tobytes()).decode("ascii"),
    }


def stored_probe(directory: Path) -> dict[str, Any] | None:
    """A kept snapshot's probe (probe.safetensors, written by Snapshot.write); None when its file is gone."""
    path = directory / "probe.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), "pt") as f:
        weights = f.get_tensor("weights")
        tokens = json.loads((f.metadata() or {}).get("tokens", "[]"))
    return probe_payload(weights, tokens)


def snapshot_data(step: int, measures: dict[str, Any], probe: dict[str, Any] | None) -> dict[str, Any]:
    return {"step": step, "measures": measures, "probe": probe}


def end_data(record: RunRecord) -> dict[str, Any]:
    return {"status": record.status, "error": record.error}


# ---- a run training here ----------------------------------------------------------------------------------------


class LiveRun:
    """A run training on this server: its stop flag, and every event so far for the clients that follow it."""

    def __init__(self, run_id: str) -> None:
        self.id = run_id
        self.stop = threading.Event()
        self.interrupted = False  # stopped by the server's shutdown, not by a cancel
        self.future: Future[None] | None = None
        self.events: list[Event] = []
        self.closed = False
        self._lock = threading.Lock()
        self._followers: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def publish(self, kind: str, data: dict[str, Any], *, close: bool = False) -> None:
        """An event for every follower, from any thread; `close`: the last one."""
        with self._lock:
            if self.closed:
                return
            self.events.append((kind, data))
            self.closed = close
            followers = list(self._followers)
        for loop, wake in followers:
            with contextlib.suppress(RuntimeError):  # that follower's loop has closed
                loop.call_soon_threadsafe(wake.set)

    async def follow(self) -> AsyncIterator[Event]:
        """Every event from the first, then each as it comes, until the last."""
        wake = asyncio.Event()
        key = (asyncio.get_running_loop(), wake)
        with self._lock:
            self._followers.add(key)
        try:
            seen = 0
            while True:
                wake.clear()
                with self._lock:
                    new, closed = self.events[seen:], self.closed
                seen += len(new)
                for event in new:
                    yield event
                if closed:
                    return
                try:
                    await asyncio.wait_for(wake.wait(), IDLE_S)
                except TimeoutError:
                    yield IDLE
        finally:
            with self._lock:
                self._followers.discard(key)


class Trainer:
    """The runs this server trains, bounded by ATTNLAB_TRAIN_MAX_RUNS (below ATTNLAB_MAX_CONCURRENT)."""

    def __init__(self, store: TrainStore, pool: ComputePool, settings: Settings) -> None:
        self.store = store
        self.pool = pool
        self.settings = settings
        self.limits = limits_of(settings)
        self.live: dict[str, LiveRun] = {}
        self._lock = threading.Lock()

    def check(self, spec: TrainSpec) -> None:
        """check_spec against this server's limits: a TrainSpecError naming the field, nothing allocated."""
        check_spec(spec, self.limits)

    def start(self, spec: TrainSpec, name: str) -> RunRecord:
        """A queued run of `spec` (checked already), training as soon as a compute thread takes it."""
        allowed = self.settings.training_runs()
        with self._lock:
            if len(self.live) >= allowed:
                raise ApiError(
                    429,
                    "too_many_runs",
                    f"{len(self.live)} training runs already under way, limit {allowed} (set by "
                    f"ATTNLAB_TRAIN_MAX_RUNS, and below ATTNLAB_MAX_CONCURRENT = {self.settings.max_concurrent} on "
                    "this server): cancel one, or wait for one to end",
                    headers={"Retry-After": "10"},
                )
            record = self.store.create(name, dataclasses.asdict(spec))
            live = LiveRun(record.id)
            self.live[record.id] = live
            live.publish("status", {"status": "queued"})
            live.future = self.pool.hold(lambda: self._train(live, spec))
        return record

    def _train(self, live: LiveRun, spec: TrainSpec) -> None:
        status, error = "interrupted", None
        try:
            if live.stop.is_set():  # cancelled, or the server stopping, before a thread took it
                status = "interrupted" if live.interrupted else "cancelled"
                return
            self.store.set_status(live.id, "running")
            live.publish("status", {"status": "running"})
            result = train(
                spec, on_snapshot=lambda s: self._keep(live, s), should_stop=live.stop.is_set, limits=self.limits
            )
            status = "interrupted" if live.interrupted and result.status == "cancelled" else result.status
        except RunNotFound:  # deleted under it: nothing left to mark
            status = "cancelled"
        except Exception as err:  # the run's failure, told to its clients; the server goes on
            log.exception("training run %s failed", live.id)
            status, error = "failed", f"{type(err).__name__}: {err}"
        finally:
            self._end(live, status, error)

    def _keep(self, live: LiveRun, snapshot: Snapshot) -> None:
        directory = self.store.snapshot_dir(live.id, snapshot.step)
        snapshot.write(directory)
        self.store.add_snapshot(live.id, snapshot.step, snapshot.measures, directory)
        live.publish(
            "snapshot",
            snapshot_data(snapshot.step, snapshot.measures, probe_payload(snapshot.weights, snapshot.probe_tokens)),
        )
        if self.store.stop_requested(live.id):  # cancelled through another replica
            live.stop.set()

    def _end(self, live: LiveRun, status: str, error: str | None) -> None:
        with contextlib.suppress(RunNotFound):
            self.store.finish(live.id, status, error)
        with self._lock:  # its place among the runs at once freed before its end is told: a client that starts
            self.live.pop(live.id, None)  # the next run on hearing it (the page's second run) is not refused
        live.publish("end", {"status": status, "error": error}, close=True)

    def cancel(self, run_id: str) -> RunRecord:
        """Stop the run at its next step (kept as cancelled, its snapshots kept); an ended run is left as it is."""
        live = self.live.get(run_id)
        if live is not None:
            live.stop.set()
            return self.store.get(run_id)
        record = self.store.get(run_id)
        if not record.finished:  # another replica trains it: it reads the request at its next snapshot
            self.store.request_stop(run_id)
        return record

    def stop_for_delete(self, run_id: str) -> Future[None] | None:
        """The run stopped, if it trains here: the future its thread completes once it has stopped writing."""
        live = self.live.get(run_id)
        if live is None:
            return None
        live.stop.set()
        return live.future

    def stop_all(self) -> None:
        """Every run asked to stop at its next step, to be marked interrupted; returns at once (any thread: a stop
        signal's handler). Its followers' streams end with its end event."""
        with self._lock:
            lives = list(self.live.values())
        for live in lives:
            live.interrupted = True
            live.stop.set()

    def shutdown(self) -> None:
        """Every run stopped at its next step and marked interrupted (its snapshots kept); one still queued is
        withdrawn. Waits at most SHUTDOWN_WAIT_S for the threads."""
        with self._lock:
            lives = list(self.live.values())
        for live in lives:
            live.interrupted = True
            live.stop.set()
            if live.future is not None and live.future.cancel():  # never started
                self._end(live, "interrupted", None)
        for live in lives:
            if live.future is not None and not live.future.cancelled():
                with contextlib.suppress(Exception):
                    live.future.result(timeout=SHUTDOWN_WAIT_S)
        self.store.interrupt_unfinished()  # any run whose thread did not stop in time


async def stored_events(store: TrainStore, run_id: str) -> AsyncIterator[Event]:
    """A run's events read back from the store: its status, its snapshots, then, once it has ended, its end. A run
    still training elsewhere (another replica sharing the store) is read again every POLL_S for what it adds."""
    record = await asyncio.to_thread(store.get, run_id)
    yield "status", {"status": record.status}
    sent: set[int] = set()
    polls = 0
    while True:
        for snap in record.snapshots:
            if snap.step not in sent:
                sent.add(snap.step)
                probe = await asyncio.to_thread(stored_probe, snap.directory)
                yield "snapshot", snapshot_data(snap.step, snap.measures, probe)
        if record.finished:
            yield "end", end_data(record)
            return
        await asyncio.sleep(POLL_S)
        polls += 1
        if polls % round(IDLE_S / POLL_S) == 0:
            yield IDLE
        try:
            record = await asyncio.to_thread(store.get, run_id)
        except RunNotFound:
            yield "end", {"status": "deleted", "error": "the run was deleted while it was followed"}
            return
