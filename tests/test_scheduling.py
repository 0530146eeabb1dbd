"""How computations are scheduled, over real sockets: waiting holds no thread, memory is bounded by the compute
slots, clients that go away are not computed for, slow or silent connections are cut, a 500 is logged once.

Most tests run uvicorn in this process (so they can hold a compute slot or count a model's runs); the memory test
runs `attnlab serve` as its own process, to read its peak resident memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from server.config import Settings
from server.transport import HeadDeadline, WriteDeadline, connection_options, protocol
from tests.helpers import assert_error, occupy, raw_post, run_async, serve_process, until, uvicorn_here


def metric(base: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$" if labels else rf"^{re.escape(name)} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def count_runs(app: FastAPI, model: str) -> list[int]:
    """Count the model's forward passes from now on."""
    runs = [0]
    m = app.state.models[model]
    original = m.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)  # a run that stops (engine.stop) raises before it is counted
        runs[0] += 1
        return result

    m.run = counted
    return runs


@pytest.mark.slow  # dozens of heavy requests
def test_a_request_waiting_for_a_slot_holds_no_thread() -> None:
    """44 computations queue behind a held compute slot; the page, its scripts and health answer while not one of
    them has run (the shared thread pool has 40 threads: were each waiting request to hold one, the light requests
    would wait for the slot, and time out here)."""
    body = {"model": "random", "text": "a b c d", "include": ["weights"]}
    with uvicorn_here(max_concurrent=1, queue_timeout_s=120) as (base, app):

        async def scenario() -> tuple[list[int], dict[str, int]]:
            finished: list[int] = []
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as c:

                async def one(i: int) -> int:
                    r = await c.post("/api/attention", json=body)
                    finished.append(i)
                    return r.status_code

                light: dict[str, int] = {}
                with occupy(app.state.pool):  # the only slot stays busy until every light request has answered
                    tasks = [asyncio.create_task(one(i)) for i in range(44)]
                    while metric(base, "attnlab_queue_depth") < 44:  # every computation waits for the slot
                        await asyncio.sleep(0.02)
                    for path in ("/api/health", "/", "/static/js/main.js", "/api/models"):
                        r = await c.get(path, timeout=20)
                        assert r.status_code == 200, (path, r.status_code)
                        light[path] = len(finished)  # computations done by the time it answered
                statuses = await asyncio.gather(*tasks)
                return statuses, light

        statuses, light = run_async(scenario)
    assert statuses == [200] * 44
    assert light == dict.fromkeys(("/api/health", "/", "/static/js/main.js", "/api/models"), 0), light


def test_a_client_that_goes_away_while_waiting_is_not_computed() -> None:
    body = b'{"model": "random", "text": "a b c d"}'
    with uvicorn_here(max_concurrent=1) as (base, app):
        port = int(base.rsplit(":", 1)[1])
        runs = count_runs(app, "random")
        with occupy(app.state.pool):
            clients = [raw_post(port, body) for _ in range(4)]
            until(lambda: metric(base, "attnlab_queue_depth") == 4, "four requests queued")
            for s in clients:
                s.close()
            until(lambda: metric(base, "attnlab_abandoned_total", stage="waiting") == 4, "four withdrawn")
            assert metric(base, "attnlab_queue_depth") == 0
        after = httpx.post(f"{base}/api/attention", json={"model": "random", "text": "a b"}, timeout=30)
        assert after.status_code == 200
        assert runs[0] == 1  # only the request whose client stayed
        assert metric(base, "attnlab_requests_total", method="POST", route="/api/attention", status="499") == 4


def test_a_run_whose_client_left_stops_before_its_forward() -> None:
    with uvicorn_here(max_concurrent=1) as (base, app):
        port = int(base.rsplit(":", 1)[1])
        model = app.state.models["random"]
        runs = count_runs(app, "random")
        entered, release = threading.Event(), threading.Event()
        encode = model.encode

        def slow_encode(*args: Any, **kwargs: Any) -> Any:  # the request is on its compute thread, tokenising
            entered.set()
            release.wait(30)
            return encode(*args, **kwargs)

        model.encode = slow_encode
        s = raw_post(port, b'{"model": "random", "text": "a b c d"}')
        assert entered.wait(30)
        s.close()
        until(lambda: metric(base, "attnlab_abandoned_total", stage="running") == 1, "the running request stopped")
        release.set()
        model.encode = encode
        assert httpx.post(f"{base}/api/attention", json={"model": "random", "text": "a"}, timeout=30).status_code == 200
        assert runs[0] == 1  # the forward of the request whose client left never ran


def test_the_server_speaks_httptools_with_the_deadlines_mixed_in() -> None:
    # httptools delivers a large answer faster than h11 (bench/README.md); losing it would fall back silently
    made = protocol(1.0)
    assert made.__mro__[1:4] == (HeadDeadline, WriteDeadline, HttpToolsProtocol)


def test_an_idle_connection_outlives_the_clients_pool() -> None:
    """A client reuses an idle connection up to its pool's idle time (httpx: 5 s); a server that closes it at the
    same time races it, and the request sent as it closes sees the connection closed with no answer (uvicorn's
    5 s default: 2 of 200 requests at 1 s against 1 s, none at 20 s, bench/README.md)."""
    options = connection_options(Settings(), None)
    httpx_idle_s, aiohttp_idle_s = httpx.Limits().keepalive_expiry, 15.0  # aiohttp's TCPConnector keepalive_timeout
    assert httpx_idle_s is not None
    assert options["timeout_keep_alive"] > max(httpx_idle_s, aiohttp_idle_s)
    assert options["http"].keep_alive_s == options["timeout_keep_alive"]  # the head deadline waits as long first


@pytest.mark.parametrize("http_base", [HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])
def test_silent_and_trickling_connections_are_cut_and_slow_bodies_get_a_408(http_base: type) -> None:
    with uvicorn_here(read_timeout_s=1.0, http_base=http_base) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        trickle = socket.create_connection(("127.0.0.1", port))
        cut_after = None
        start = time.monotonic()
        try:  # a byte every 0.1 s, for ever: the head never completes
            for ch in b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
                trickle.sendall(bytes([ch]))
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            cut_after = time.monotonic() - start
        assert cut_after is not None, "a connection trickling its head for 20 s was never cut"
        for s in silent:
            s.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1024) == b""  # closed by the server, having sent nothing
            s.close()
        trickle.close()
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow.sendall(
            b"POST /api/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + b'{"model": '
        )
        answer = ""
        while "}}" not in answer:  # the head and the body may come in separate segments
            chunk = slow.recv(4096)
            if not chunk:
                break
            answer += chunk.decode()
        slow.close()
        assert answer.startswith("HTTP/1.1 408"), answer[:200]
        assert "ATTNLAB_READ_TIMEOUT_S" in answer
        # a connection that keeps its pace is served as before
        assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200


def test_connections_past_the_cap_are_refused_not_held() -> None:
    with uvicorn_here(max_connections=8, read_timeout_s=30) as (base, app):
        port = int(base.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        until(lambda: len(app.state.load.connections) == 8, "the server holds the eight connections")
        r = httpx.get(f"{base}/api/health", timeout=10)
        assert r.status_code == 503
        for s in held:
            s.close()
        until(lambda: httpx.get(f"{base}/api/health", timeout=10).status_code == 200, "served again")


def test_an_unexpected_error_is_one_500_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with uvicorn_here() as (base, app):
        model = app.state.models["random"]

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug attnlab did not foresee")

        model.run = broken
        with caplog.at_level(logging.ERROR):
            r = httpx.post(f"{base}/api/attention", json={"model": "random", "text": "a b"}, timeout=30)
            assert_error(r, 500, None, "unexpected error")
            assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200
    tracebacks = [rec for rec in caplog.records if rec.exc_info is not None]
    assert len(tracebacks) == 1, [(rec.name, rec.getMessage()) for rec in tracebacks]
    assert "did not foresee" in str(tracebacks[0].exc_info[1])  # type: ignore[index]


def peak_rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: the peak resident size starts again from now


@pytest.mark.slow  # dozens of heavy requests
def test_peak_memory_is_bounded_by_the_compute_slots() -> None:
    """16 heavy requests at once on one slot use about what one uses: parsing, computing and serialising each
    happen inside its slot. (Measured before: each request parsed and serialised outside it, in parallel.)"""
    heavy = {"model": "random", "text": " ".join(["w"] * 256), "options": {"d_model": 512, "heads": 16}}
    with serve_process("random", ATTNLAB_MAX_CONCURRENT="1", ATTNLAB_QUEUE_TIMEOUT_S="300") as (base, proc):
        with httpx.Client(base_url=base, timeout=300) as c:
            for _ in range(2):  # warm up: first-use allocations are not what this measures
                assert c.post("/api/attention", json=heavy).status_code == 200
        try:
            reset_peak(proc.pid)
        except OSError:
            pytest.fail("cannot reset the peak resident size (/proc/PID/clear_refs): Linux is needed")
        before = rss_mb(proc.pid)
        with httpx.Client(base_url=base, timeout=300) as c:
            assert c.post("/api/attention", json=heavy).status_code == 200
        one = peak_rss_mb(proc.pid) - before

        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=base, timeout=300, limits=httpx.Limits(max_connections=32)) as c:
                answers = await asyncio.gather(*(c.post("/api/attention", json=heavy) for _ in range(16)))
                return [r.status_code for r in answers]

        reset_peak(proc.pid)
        before = rss_mb(proc.pid)
        assert run_async(burst) == [200] * 16
        sixteen = peak_rss_mb(proc.pid) - before
    print(f"peak growth: one request {one:.0f} MB, sixteen at once {sixteen:.0f} MB")
    assert sixteen < max(3 * one, 150), (one, sixteen)


def test_a_long_runs_tiles_take_a_compute_slot_and_an_unchanged_one_needs_none() -> None:
    """With every compute slot held, a tile waits in the queue (as a POST would) and answers once a slot is free;
    its 304 for a tile the client holds needs no slot at all."""
    body = {"model": "random", "text": " ".join(f"w{i}" for i in range(600)), "options": {"heads": 1, "d_model": 8}}
    with uvicorn_here(max_concurrent=1, queue_timeout_s=30) as (base, app):
        assert httpx.post(f"{base}/api/runs", json=body, headers={"X-Attnlab-Run": "slot-run-01"}).status_code == 200
        url = f"{base}/api/runs/slot-run-01/tiles/0/0/2/0/0"
        etag = httpx.get(url, timeout=30).headers["etag"]
        with ThreadPoolExecutor(1) as ex, occupy(app.state.pool):
            assert httpx.get(url, headers={"If-None-Match": etag}, timeout=5).status_code == 304  # no slot needed
            waiting = ex.submit(lambda: httpx.get(url, timeout=60))
            until(lambda: metric(base, "attnlab_queue_depth") == 1, "the tile queued for the held slot")
            assert not waiting.done()
        got = waiting.result(timeout=60)
        assert got.status_code == 200 and len(got.json()["weights"]) == 256
