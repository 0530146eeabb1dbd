"""The training lab's routes (server/routes/train.py) on one in-process app: a run started, followed by its
server-sent events to the end, listed, renamed, cancelled, deleted with its files, exported as a checkpoint that
the loader opens, and opened as a model (`train:RUN@STEP`) in /api/attention; bad fields and limits refused naming
them. And one `attnlab serve` process killed mid-run: the next one lists the run interrupted with its snapshots.

Runs are tiny (one or two layers of width 16, a handful of steps), and nothing waits a fixed time: a test reads
the run's own events until the one it needs."""

from __future__ import annotations

import asyncio
import base64
import io
import subprocess
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from engine.models.checkpoint import load_checkpoint
from server import training
from server.app import create_app
from server.config import Settings
from server.routes.train import sse
from server.trainstore import TrainStore
from tests.helpers import Events, assert_error, read_events, serve_process

TINY = {"task": "copy", "layers": 1, "heads": 2, "width": 16, "positions": 8, "batch": 4, "warmup": 0}
LONG = {**TINY, "steps": 2000, "snapshot_every": 100}  # stopped by the test long before its end
ENDLESS = {**LONG, "steps": 20_000}  # a server process's run, which never reaches its end in a test
LIMITS = {
    "train_max_steps": 2000,
    "train_max_tokens_per_step": 4096,
    "train_max_parameters": 200_000,
    "train_max_probe_values": 1024,  # 1 layer x 2 heads x 8^2 = 128 for TINY
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("train-data")


def make_app(data_dir: Path, **overrides: Any) -> TestClient:
    settings = Settings(device="cpu", models="textbook", allowed_hosts="*", data_dir=data_dir, **LIMITS, **overrides)
    return TestClient(create_app(settings))


@pytest.fixture(scope="module")
def client(data_dir: Path) -> Iterator[TestClient]:
    with make_app(data_dir) as c:
        yield c


def follow(client: TestClient, run_id: str) -> Events:
    with client.stream("GET", f"/api/train/{run_id}/events") as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        return read_events(resp.iter_lines())


def start(client: TestClient, **spec: Any) -> str:
    resp = client.post("/api/train", json={**TINY, **spec})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert body["status"] == "queued" and body["events"] == f"/api/train/{body['id']}/events"
    return str(body["id"])


def probe(data: dict[str, Any]) -> np.ndarray:
    p = data["probe"]
    assert p["dtype"] == "float16"
    return np.frombuffer(base64.b64decode(p["data"]), "<f2").reshape(p["shape"]).astype(np.float32)


@pytest.fixture(scope="module")
def finished(client: TestClient) -> tuple[str, Events]:
    """One run of 4 steps followed from its start to its end."""
    run_id = start(client, steps=4, snapshot_every=2, name="copy, followed")
    return run_id, follow(client, run_id)


def test_a_run_streams_every_snapshot_then_its_end(client: TestClient, finished: tuple[str, Events]) -> None:
    run_id, events = finished
    kinds = [k for k, _ in events]
    assert kinds[-1] == "end" and events[-1][1] == {"status": "finished", "error": None}
    assert [d["status"] for k, d in events if k == "status"][-1] == "running"
    snapshots = [d for k, d in events if k == "snapshot"]
    assert [s["step"] for s in snapshots] == [0, 2, 4]
    for s in snapshots:
        assert {"loss", "held_out_loss", "entropy", "induction", "grad_norm"} <= set(s["measures"]), s["measures"]
        weights = probe(s)
        assert weights.shape == (1, 2, 8, 8) and len(s["probe"]["tokens"]) == 8
        assert np.allclose(weights.sum(-1), 1.0, atol=1e-2), "each probe row is a softmax"
        assert np.all(np.triu(weights, 1) == 0), "causal on: no weight on a later position"
    # the run as kept: its spec, status and every snapshot's measures
    kept = client.get(f"/api/train/{run_id}").json()
    assert kept["status"] == "finished" and kept["name"] == "copy, followed" and kept["spec"]["steps"] == 4
    assert [s["step"] for s in kept["snapshots"]] == [0, 2, 4]
    assert kept["snapshots"][1]["measures"] == snapshots[1]["measures"]
    assert kept["snapshots"][2]["model"] == f"train:{run_id}@4"
    listed = {r["id"]: r for r in client.get("/api/train").json()["runs"]}
    assert listed[run_id]["status"] == "finished" and listed[run_id]["steps"] == [0, 2, 4]
    # a client that comes after the end reads the same events from the store
    again = follow(client, run_id)
    assert [(k, d.get("step")) for k, d in again if k != "status"] == [
        (k, d.get("step")) for k, d in events if k != "status"
    ]
    assert np.array_equal(probe(again[-2][1]), probe(snapshots[-1]))


def test_a_late_client_reads_what_is_stored_then_the_rest_and_cancel_stops_the_run(client: TestClient) -> None:
    run_id = start(client, **LONG)
    with client.stream("GET", f"/api/train/{run_id}/events") as first:
        first_lines = first.iter_lines()
        early = read_events(first_lines, "snapshot", step=100)
        with client.stream("GET", f"/api/train/{run_id}/events") as late:
            late_lines = late.iter_lines()
            caught_up = read_events(late_lines, "snapshot", step=100)
            assert [d["step"] for k, d in caught_up if k == "snapshot"] == [0, 100]
            assert caught_up == early, "a late client reads every event from the first"
            cancelled = client.post(f"/api/train/{run_id}/cancel", json={})
            assert cancelled.status_code == 202, cancelled.text
            rest = read_events(late_lines)
        assert read_events(first_lines) == rest
    assert rest[-1] == ("end", {"status": "cancelled", "error": None})
    kept = client.get(f"/api/train/{run_id}").json()
    assert kept["status"] == "cancelled"
    assert 2 <= len(kept["steps"]) < 21 and kept["steps"][-1] < 2000, kept["steps"]
    again = client.post(f"/api/train/{run_id}/cancel", json={})  # an ended run is left as it is
    assert again.status_code == 202 and again.json()["status"] == "cancelled"


def test_rename_and_delete_with_its_files(client: TestClient, data_dir: Path) -> None:
    run_id = start(client, steps=2, snapshot_every=1)
    follow(client, run_id)
    renamed = client.patch(f"/api/train/{run_id}", json={"name": "a better name"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "a better name"
    assert client.get(f"/api/train/{run_id}").json()["name"] == "a better name"
    files = data_dir / "runs" / run_id
    assert (files / "step-000002" / "model.safetensors").is_file()
    assert client.delete(f"/api/train/{run_id}").status_code == 204
    assert not files.exists()
    assert run_id not in {r["id"] for r in client.get("/api/train").json()["runs"]}
    for method, path in [("GET", ""), ("GET", "/events"), ("PATCH", ""), ("DELETE", ""), ("POST", "/cancel")]:
        body = {"name": "x"} if method == "PATCH" else {} if method == "POST" else None
        assert_error(client.request(method, f"/api/train/{run_id}{path}", json=body), 404, "run_id", run_id)
    assert_error(client.post("/api/attention", json={"model": f"train:{run_id}@2", "text": "a"}), 422, "model", run_id)


def test_a_snapshot_exports_and_opens_as_a_model(
    client: TestClient, finished: tuple[str, Events], tmp_path: Path
) -> None:
    run_id, _ = finished
    resp = client.get(f"/api/train/{run_id}/export", params={"step": 2})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/zip"
    zipfile.ZipFile(io.BytesIO(resp.content)).extractall(tmp_path)
    (folder,) = tmp_path.iterdir()
    assert folder.name.endswith(f"{run_id}-step2")
    exported = load_checkpoint("exported", folder, reference=False)
    assert (exported.info.n_layers, exported.info.n_heads, exported.info.d_model) == (1, 2, 16)
    # the same snapshot served as a model, opened by the same loader
    text = "the cat sat on the mat"
    served = client.post("/api/attention", json={"model": f"train:{run_id}@2", "text": text})
    assert served.status_code == 200, served.text
    heads = served.json()["layers"][0]["heads"]
    weights = np.array([h["weights"] for h in heads])
    assert weights.shape[0] == 2 and np.allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(weights, 1) == 0), "trained with the causal mask: opened with it"
    assert_error(client.get(f"/api/train/{run_id}/export", params={"step": 3}), 404, "step", "0, 2, 4")
    tarred = client.get(f"/api/train/{run_id}/export", params={"format": "tar"})
    assert tarred.status_code == 200 and tarred.headers["content-disposition"].endswith('-step4.tar"')


def test_a_run_trained_without_the_causal_mask_opens_without_it(client: TestClient) -> None:
    run_id = start(client, steps=1, snapshot_every=1, causal=False)
    assert follow(client, run_id)[-1][1]["status"] == "finished"
    served = client.post("/api/attention", json={"model": f"train:{run_id}@1", "text": "the cat sat on the mat"})
    assert served.status_code == 200, served.text
    weights = np.array([h["weights"] for h in served.json()["layers"][0]["heads"]])
    assert np.all(np.triu(weights, 1).sum(-1)[:, :-1] > 0), "every query but the last reads a later key"
    masked = client.post(
        "/api/attention", json={"model": f"train:{run_id}@1", "text": "the cat sat", "masks": {"causal": True}}
    )
    assert masked.status_code == 200 and np.all(
        np.triu([h["weights"] for h in masked.json()["layers"][0]["heads"]], 1) == 0
    )


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"heads": 3}, "heads", ["3 heads", "width 16"]),
        ({"task": "poetry"}, "task", ["induction"]),
        ({"layers": "2"}, "layers", ["integer"]),
        ({"lr": 0}, "lr", ["above 0"]),
        ({"init": "xavier"}, "init", ["shared"]),
        ({"positions": 2}, "positions", ["at least 5"]),
        ({"colour": "red"}, "colour", []),
        ({"steps": 2**64}, "steps", [str(2**63 - 1)]),
        # the server's limits, named by their settings
        ({"steps": 2001}, "steps", ["2,000", "ATTNLAB_TRAIN_MAX_STEPS"]),
        ({"batch": 1024}, "batch", ["4,096", "ATTNLAB_TRAIN_MAX_TOKENS_PER_STEP"]),
        ({"width": 512, "heads": 8}, "width", ["200,000", "ATTNLAB_TRAIN_MAX_PARAMETERS"]),
        ({"positions": 256, "batch": 1, "heads": 16}, "positions", ["1,024", "ATTNLAB_TRAIN_MAX_PROBE_VALUES"]),
    ],
)
def test_a_bad_field_or_a_limit_is_a_422_naming_it(
    client: TestClient, change: dict[str, Any], field: str, words: list[str]
) -> None:
    before = {r["id"] for r in client.get("/api/train").json()["runs"]}
    assert_error(client.post("/api/train", json={**TINY, **change}), 422, field, *words)
    assert {r["id"] for r in client.get("/api/train").json()["runs"]} == before, "nothing was started"


def test_runs_at_once_are_bounded_by_the_setting(client: TestClient) -> None:
    run_id = start(client, **LONG)
    with client.stream("GET", f"/api/train/{run_id}/events") as resp:
        lines = resp.iter_lines()
        read_events(lines, "snapshot", step=0)
        err = assert_error(client.post("/api/train", json=TINY), 429, None, "ATTNLAB_TRAIN_MAX_RUNS", "limit 1")
        assert err["code"] == "too_many_runs"
        client.post(f"/api/train/{run_id}/cancel", json={})
        read_events(lines)
    follow(client, start(client, steps=1))  # the slot is free again


def test_a_run_has_left_the_runs_under_way_when_its_end_is_sent(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that starts the next run as soon as it hears a run's end (the page's Train workspace does, for an
    experiment's second run) is not refused as one run too many."""
    trainer = client.app.state.trainer  # type: ignore[attr-defined]
    under_way: list[bool] = []
    publish = training.LiveRun.publish

    def spy(self: training.LiveRun, kind: str, data: dict[str, Any], *, close: bool = False) -> None:
        if kind == "end":
            under_way.append(self.id in trainer.live)
        publish(self, kind, data, close=close)

    monkeypatch.setattr(training.LiveRun, "publish", spy)
    follow(client, start(client, steps=1))
    assert under_way == [False]


def test_a_server_stopping_mid_run_marks_it_interrupted_and_keeps_its_snapshots(tmp_path: Path) -> None:
    with make_app(tmp_path) as first:
        run_id = start(first, **LONG)
        with first.stream("GET", f"/api/train/{run_id}/events") as resp:
            read_events(resp.iter_lines(), "snapshot", step=100)
    with make_app(tmp_path) as second:
        kept = second.get(f"/api/train/{run_id}").json()
        assert kept["status"] == "interrupted" and kept["steps"][:2] == [0, 100], kept
        events = follow(second, run_id)
        assert events[-1][1]["status"] == "interrupted"
        served = second.post("/api/attention", json={"model": f"train:{run_id}@100", "text": "the cat"})
        assert served.status_code == 200, served.text


def kill_mid_run(base: str, proc: subprocess.Popen[bytes]) -> str:
    """A run started and followed to its snapshot at step 100, then its server killed outright: its id."""
    created = httpx.post(f"{base}/api/train", json=ENDLESS, timeout=30)
    assert created.status_code == 202, created.text
    run_id = str(created.json()["id"])
    with httpx.stream("GET", f"{base}/api/train/{run_id}/events", timeout=60) as resp:
        read_events(resp.iter_lines(), "snapshot", step=100)
    proc.kill()  # no shutdown: the store still says running
    proc.wait()
    return run_id


def stop_while_followed(base: str, proc: subprocess.Popen[bytes]) -> tuple[str, Events]:
    """A run followed by a client when its server gets SIGTERM: its id, and the rest of the client's events."""
    run_id = str(httpx.post(f"{base}/api/train", json=ENDLESS, timeout=30).json()["id"])
    with httpx.stream("GET", f"{base}/api/train/{run_id}/events", timeout=60) as resp:
        lines = resp.iter_lines()
        read_events(lines, "snapshot", step=0)
        proc.terminate()
        rest = read_events(lines)
    proc.wait(60)
    return run_id, rest


def test_a_server_killed_mid_run_lists_the_run_interrupted_after_restart(tmp_path: Path) -> None:
    """`attnlab serve` killed outright mid-run: the next one, on the same data directory, marks the run interrupted
    with its snapshots. That one, stopped by SIGTERM while a client follows a run, stops the run (interrupted) and
    ends the client's stream, rather than waiting for the run to end before it exits."""
    env = {"ATTNLAB_DATA_DIR": str(tmp_path), "ATTNLAB_CHECK_ANSWERS": "0"}
    killed = ""
    for life in ("killed", "restarted"):  # one server configuration, started twice on one data directory
        with serve_process("textbook", **env) as (base, proc):
            if life == "killed":
                killed = kill_mid_run(base, proc)
                continue
            listed = {r["id"]: r for r in httpx.get(f"{base}/api/train", timeout=30).json()["runs"]}
            assert listed[killed]["status"] == "interrupted", listed[killed]
            assert listed[killed]["steps"][:2] == [0, 100]
            assert (tmp_path / "runs" / killed / "step-000100" / "model.safetensors").is_file()
            stopped, rest = stop_while_followed(base, proc)
    assert rest[-1] == ("end", {"status": "interrupted", "error": None}), rest[-1]
    store = TrainStore(f"sqlite:///{tmp_path / 'attnlab.db'}", tmp_path, "a reader")
    assert store.get(stopped).status == "interrupted" and store.get(stopped).steps[0] == 0
    store.close()


def test_a_quiet_stream_gets_keep_alives_until_the_next_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run slow to its next snapshot still sends something (a comment line), so a proxy keeps its stream open."""
    monkeypatch.setattr(training, "IDLE_S", 0.01)
    live = training.LiveRun("0123456789ab")
    live.publish("status", {"status": "running"})

    async def read() -> Events:
        got: Events = []
        async for event in live.follow():
            got.append(event)
            if event == training.IDLE and len(got) == 3:  # quiet twice: then the run ends
                live.publish("end", {"status": "finished", "error": None}, close=True)
        return got

    # in a thread of its own, as tests/test_stalled_reader.py runs its loop: the browser tests' Playwright keeps an
    # event loop marked running in the main thread for the rest of the session
    with ThreadPoolExecutor(1) as own:
        got = own.submit(asyncio.run, read()).result(timeout=60)
    assert got == [("status", {"status": "running"}), training.IDLE, training.IDLE, ("end", got[-1][1])]
    assert sse(*training.IDLE) == b": still training\n\n"


def test_a_run_that_fails_is_kept_failed_with_why_and_the_server_goes_on(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(spec: Any, *, on_snapshot: Any, should_stop: Any, limits: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(training, "train", broken)
    run_id = start(client, steps=2)
    end = follow(client, run_id)[-1]
    assert end[0] == "end" and end[1]["status"] == "failed" and "No space left" in end[1]["error"]
    kept = client.get(f"/api/train/{run_id}").json()
    assert kept["status"] == "failed" and "No space left" in kept["error"]
    monkeypatch.undo()
    assert follow(client, start(client, steps=1))[-1][1]["status"] == "finished", "the slot was given back"
