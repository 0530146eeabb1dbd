"""Progress of a named run (X-Attnlab-Run, GET /api/progress/{run}): queued while the compute slots are busy (behind
`ahead` others), then layer by layer through the forward pass, then written and done; a bad name is a 422 naming
the header, an unknown run a 404. Over real sockets: uvicorn in this process, so a test can hold the compute
slots."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import httpx
import pytest

from engine import progress as engine_progress
from server.progress import ProgressBoard
from tests.helpers import assert_error, occupy, raw_post, run_async, until, uvicorn_here

WORDS = " ".join(["the", "cat", "sat", "on", "a", "mat"] * 50)  # 302 minilm tokens: a run of a second or so


def watch(base: str, run: str, stop: threading.Event, seen: list[dict[str, Any]]) -> None:
    with httpx.Client(base_url=base, timeout=10) as c:
        while not stop.is_set():
            r = c.get(f"/api/progress/{run}")
            if r.status_code == 200:
                seen.append(r.json())
            time.sleep(0.01)


def test_a_named_run_is_queued_then_goes_layer_by_layer_then_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    # the pass waits once it has reported layer 3 of 6, until the watcher has seen it there: however fast the
    # forward and however slow the polling, the run is seen mid-pass
    report, mid_seen = engine_progress.report, threading.Event()

    def held_report(stage: str, done: int = 0, total: int = 0) -> None:
        report(stage, done, total)
        if (stage, done) == ("layers", 3):
            mid_seen.wait(30)

    monkeypatch.setattr(engine_progress, "report", held_report)
    with uvicorn_here("textbook,minilm", max_concurrent=1, cache_bytes=0) as (base, app):
        run = "page-run-0001"
        seen: list[dict[str, Any]] = []
        stop = threading.Event()
        answer: dict[str, Any] = {}

        def ask() -> None:
            with httpx.Client(base_url=base, timeout=120) as c:
                body = {"model": "minilm", "text": WORDS, "include": ["weights", "stats"]}
                resp = c.post("/api/attention", json=body, headers={"x-attnlab-run": run})
                answer["status"] = resp.status_code

        with occupy(app.state.pool):  # the only compute slot is busy: the run waits its turn
            asker = threading.Thread(target=ask)
            asker.start()
            deadline = time.monotonic() + 30
            while not seen and time.monotonic() < deadline:
                r = httpx.get(f"{base}/api/progress/{run}")
                if r.status_code == 200:
                    seen.append(r.json())
                time.sleep(0.02)
            assert seen and seen[0]["stage"] == "queued" and seen[0]["ahead"] == 0, seen  # next in line
            watcher = threading.Thread(target=watch, args=(base, run, stop, seen))
            watcher.start()
            until(lambda: len(seen) > 1, "the watcher saw the run queued")
        try:
            until(lambda: any(s["stage"] == "layers" and s["done"] == 3 for s in seen), "the run seen at layer 3")
        finally:
            mid_seen.set()
        asker.join(120)
        stop.set()
        watcher.join(10)
        assert answer["status"] == 200
        final = httpx.get(f"{base}/api/progress/{run}").json()
        assert final["stage"] == "done" and (final["done"], final["total"]) == (6, 6), final
        stages = [s["stage"] for s in seen]
        order = ["queued", "layers", "writing", "done"]
        assert [order.index(s) for s in stages] == sorted(order.index(s) for s in stages), stages
        counts = [s["done"] for s in seen if s["stage"] == "layers"]
        assert counts == sorted(counts) and all(s["total"] in (0, 6) for s in seen if s["stage"] == "layers"), seen
        assert "layers" in stages, stages
        assert all(b["elapsed_ms"] >= a["elapsed_ms"] for a, b in itertools.pairwise(seen))
        assert all(s["ahead"] is None for s in seen if s["stage"] != "queued"), seen


def progress_of(base: str, run: str, want: str, timeout: float = 30) -> dict[str, Any]:
    """The run's progress once it reads `want` (a stage, or "stage:ahead"), polling."""
    deadline = time.monotonic() + timeout
    got: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = httpx.get(f"{base}/api/progress/{run}")
        if r.status_code == 200:
            got = r.json()
            if want in (got["stage"], f"{got['stage']}:{got['ahead']}"):
                return got
        time.sleep(0.02)
    raise AssertionError(f"{run} never reached {want}: last {got}")


def test_queued_runs_say_how_many_wait_before_them() -> None:
    """Two runs behind a held compute slot: the first is next in line (ahead 0), the second has one before it. The
    first's client goes away, so its job leaves the line and the second moves up to 0 (the slot still held: nothing
    here races a forward pass); once the slot frees the second runs, and out of the line it has no count."""
    with uvicorn_here("textbook,minilm", max_concurrent=1, cache_bytes=0) as (base, app):
        first, second = "queue-first-01", "queue-second-02"
        status: dict[str, int] = {}

        def ask() -> None:
            with httpx.Client(base_url=base, timeout=120) as c:
                body = {"model": "minilm", "text": "a", "include": ["weights"]}
                status[second] = c.post("/api/attention", json=body, headers={"x-attnlab-run": second}).status_code

        body = b'{"model": "minilm", "text": "a b", "include": ["weights"]}'
        asker = threading.Thread(target=ask)
        with occupy(app.state.pool):
            with raw_post(int(base.rsplit(":", 1)[1]), body, {"X-Attnlab-Run": first}):
                progress_of(base, first, "queued:0")
                asker.start()
                assert progress_of(base, second, "queued:1")["ahead"] == 1
                assert progress_of(base, first, "queued")["ahead"] == 0
            # the first's client is gone: its job is withdrawn from the line, and the second is next
            assert progress_of(base, second, "queued:0")["ahead"] == 0
            assert progress_of(base, first, "failed")["ahead"] is None
        asker.join(120)
        assert status == {second: 200}
        assert progress_of(base, second, "done")["ahead"] is None


def test_a_bad_run_name_is_a_422_naming_the_header_and_an_unknown_run_a_404() -> None:
    with uvicorn_here("textbook,minilm") as (base, _), httpx.Client(base_url=base, timeout=60) as c:
        resp = c.post("/api/attention", json={"model": "textbook"}, headers={"x-attnlab-run": "no spaces!"})
        assert assert_error(resp, 422, "x-attnlab-run", "8 to 64 letters")["code"] == "invalid_request"
        assert assert_error(c.get("/api/progress/never-named-run"), 404, "run")["code"] == "unknown_run"
        assert c.get("/api/progress/short").status_code == 422
        # a run that fails is marked so
        bad = c.post("/api/attention", json={"model": "textbook", "text": ""}, headers={"x-attnlab-run": "fails-0001"})
        assert bad.status_code == 422
        assert c.get("/api/progress/fails-0001").json()["stage"] == "failed"


def test_the_board_keeps_only_its_newest_runs() -> None:
    board = ProgressBoard(keep=3)
    for i in range(5):
        board.start(f"run-000{i}")
    assert [board.get(f"run-000{i}") is not None for i in range(5)] == [False, False, True, True, True]
    board.set("run-0004", "layers", 2, 6)
    board.set("run-0004", "writing")  # a stage without a count keeps the layers' count
    got = board.get("run-0004")
    assert got is not None and (got["stage"], got["done"], got["total"]) == ("writing", 2, 6)
    board.set("run-0000", "done")  # gone: nothing to move, nothing raised
    assert board.get("run-0000") is None
    board.start("run-0005", lambda: 2)
    got = board.get("run-0005")
    assert got is not None and (got["stage"], got["ahead"]) == ("queued", 2)
    board.set("run-0005", "layers", 0, 6)  # out of the line: no count
    got = board.get("run-0005")
    assert got is not None and got["ahead"] is None


@pytest.mark.parametrize("header", ["", "a" * 65, "seven77", "has/slash-in"])
def test_run_names_outside_the_pattern_are_refused(header: str) -> None:
    from server.errors import ApiError
    from server.progress import run_id_of

    with pytest.raises(ApiError) as e:
        run_id_of(header)
    assert e.value.field == "x-attnlab-run" and e.value.status == 422


def test_an_ask_that_reaches_the_server_before_its_run_waits_for_it() -> None:
    """The page asks for a run's progress on another connection than the run's, and either can be taken first: an
    ask with `wait_ms` waits for the run to arrive, and answers the run as soon as it has; without the run it is
    still a 404, after its wait."""

    async def scenario() -> tuple[bool, dict[str, object] | None, dict[str, object] | None]:
        board = ProgressBoard()
        ask = asyncio.ensure_future(board.arrival("late-run-01", 10_000))
        for _ in range(5):  # the ask has looked, found nothing, and waits
            await asyncio.sleep(0)
        waiting = not ask.done()
        board.start("late-run-01")
        got = await asyncio.wait_for(ask, 5)
        return waiting, got, await board.arrival("never-run-01", 30)

    waiting, got, never = run_async(scenario)
    assert waiting and got is not None and got["stage"] == "queued", got
    assert never is None
    with uvicorn_here("textbook") as (base, _), httpx.Client(base_url=base, timeout=60) as c:
        late = assert_error(c.get("/api/progress/never-named-run?wait_ms=50"), 404, "run")
        assert "after waiting 50 ms" in late["message"], late
        assert_error(c.get("/api/progress/never-named-run?wait_ms=10001"), 422, "wait_ms", "10000")
        assert_error(c.get("/api/progress/never-named-run?wait_ms=1.5"), 422, "wait_ms")
        # a run that has arrived is answered at once, wait or not
        c.post("/api/attention", json={"model": "textbook"}, headers={"x-attnlab-run": "here-run-01"})
        assert c.get("/api/progress/here-run-01?wait_ms=10000").json()["stage"] == "done"
