"""Helpers shared by the tests: the one error shape, a free port, a real server process."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the session started: `attnlab serve` processes, uvicorn servers on a thread of this process, apps
# (tests/fixtures.py prints it at the end of the run).
STARTED: Counter[str] = Counter()

# Debian's chromium as the browser tests and bench/page.py launch it (never `playwright install`).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Debian's nodejs, which runs the bundler's toy bundles and the exported viewer's script (make test installs it).
NODE = Path("/usr/bin/node")


def node() -> str:
    """The path of Debian's node; a failure naming the command when it is missing (skipped, the tests that run the
    bundled viewer would pass on any machine without it)."""
    if not NODE.exists():
        pytest.fail(f"{NODE} is missing: run 'sudo apt-get install nodejs' (make test installs it as root)")
    return str(NODE)


def assert_error(resp: httpx.Response, status: int, field: str | None = None, *words: str) -> dict[str, Any]:
    """Pin the error shape: JSON {"error": {status, code, field, message, details}} naming the field."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"status", "code", "field", "message", "details"}, err
    assert err["status"] == status
    assert isinstance(err["code"], str) and err["code"]
    assert isinstance(err["message"], str) and err["message"]
    if field is not None:
        assert err["field"] == field, err
        assert field in err["message"], err
    for w in words:
        assert w in err["message"], (w, err["message"])
    return err


def until(check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    """Poll `check` until it holds; an assertion naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"still not true after {seconds} s: {what}"
        time.sleep(0.02)


# The request `settle` sends: a GET that no page sends, so a test can tell it from the page's own.
SENTINEL = "/api/health?settled"
# Sent from a page timer due after every timer by which the page itself would still send a request: the run's
# debounce and its progress poll (effects.js), the panels' debounces (panels.js panelSpecs: PANEL_SPECS and the
# registered panels' declarations). Timers run in the order they are due, however loaded the machine, so a request
# the page had still to send has been sent before this one.
SETTLE = """async (url) => {
  const effects = await import("/static/js/effects.js");
  const { panelSpecs } = await import("/static/js/panels.js");
  const due = Math.max(effects.DEBOUNCE_MS, effects.FOLLOW_AFTER_MS + effects.FOLLOW_MS,
    ...Object.values(panelSpecs()).map((spec) => spec.debounce || 0));
  await new Promise((done) => setTimeout(done, due));
  await fetch(url);
}"""


def settle(page: Any) -> None:
    """Once the page has drawn (its `attnlab:drawn` mark): return when it has sent every request it was going to
    send, proved by a request of the test's own (SENTINEL) that the page can only send after them. For checks of
    the kind "nothing more was asked", which a fixed wait passes or fails with the machine's speed."""
    with page.expect_request(lambda r: r.url.endswith(SENTINEL), timeout=30_000):
        page.evaluate(SETTLE, SENTINEL)


def page_until(page: Any, check: Callable[[], bool], what: str, seconds: float = 30) -> None:
    """`until` for a check that a Playwright page's events make true (a route handler's list, say): Playwright
    delivers them while it is asked something, so this asks the page while it polls."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"still not true after {seconds} s: {what}"
        page.wait_for_timeout(20)


def raw_post(port: int, body: bytes, headers: dict[str, str] | None = None) -> socket.socket:
    """A complete POST /api/attention on a socket of its own (with any extra `headers`), the answer left unread."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = f"POST /api/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{extra}"
    s.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(proc: subprocess.Popen[bytes], base: str, output: Callable[[], str], timeout: float = 120) -> None:
    """Poll `attnlab serve`'s /api/health until it answers; its log's tail in the error when it exits or never does."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"attnlab serve at {base} exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"attnlab serve at {base} did not answer /api/health within {timeout:g} s:\n{output()}")
        time.sleep(0.1)


@contextmanager
def serve(models: str = "textbook,random,custom", **env: str) -> Iterator[str]:
    """Start `attnlab serve` as its own process on a free loopback port; yield its base URL."""
    with serve_process(models, **env) as (base, _):
        yield base


@contextmanager
def serve_process(models: str = "textbook,random,custom", **env: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start `attnlab serve` as its own process on a free loopback port; yield its base URL and the process."""
    with serve_on("127.0.0.1", models, env) as served:
        yield served.base, served.proc


@dataclass(frozen=True)
class Served:
    base: str  # its URL on the loopback address
    port: int
    proc: subprocess.Popen[bytes]
    output: Callable[[], str]  # what it has logged so far


@contextmanager
def serve_on(
    host: str, models: str, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()
) -> Iterator[Served]:
    """`attnlab serve --host HOST` as its own process on a free port, reached on 127.0.0.1, with ATTNLAB_DEVICE=cpu,
    `env` added and the variables in `unset` removed.

    Its output goes to a file, not a pipe: uvicorn logs a line per request, and a pipe nobody reads until the
    process ends fills at 64 KiB (about 800 requests) and then blocks the server. The file's tail goes into the
    error when the server fails to start.
    """
    port = free_port()
    environ = {**os.environ, "ATTNLAB_DEVICE": "cpu", **(env or {})}
    for name in unset:
        environ.pop(name, None)
    cmd = [sys.executable, "-m", "server", "serve", "--host", host, "--port", str(port), "--models", models]
    STARTED["processes"] += 1
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")

        try:
            wait_healthy(proc, base, lambda: output()[-4000:])
            yield Served(base, port, proc, output)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def occupy(pool: Any, jobs: int = 1) -> Iterator[None]:
    """Keep `jobs` of the app's compute threads (`pool`: its app.state.pool) busy, as long computations would,
    until the block ends."""
    release = threading.Event()
    running = threading.Semaphore(0)

    def blocker() -> None:
        running.release()
        release.wait(60)

    async def one() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await pool.run(blocker, never)

    threads = [threading.Thread(target=asyncio.run, args=(one(),), daemon=True) for _ in range(jobs)]
    for t in threads:
        t.start()
    for _ in range(jobs):
        assert running.acquire(timeout=30), "a compute thread never took the blocking job"
    try:
        yield
    finally:
        release.set()
        for t in threads:
            t.join(30)


@contextmanager
def uvicorn_here(
    models: str = "textbook,random,custom", *, http_base: Any = None, **overrides: Any
) -> Iterator[tuple[str, Any]]:
    """create_app on a free loopback port, served by uvicorn on a thread of this process, as `attnlab serve` does;
    yields its base URL and the app (whose runtime a test can reach, e.g. to hold the compute slots). `http_base`
    serves through that uvicorn protocol instead of the one attnlab picks (server.transport.FASTEST)."""
    import uvicorn  # here, not at the top: the client's tests import this module where the server is not installed

    from server.app import create_app
    from server.config import Settings
    from server.transport import FASTEST, connection_options

    settings = Settings(device="cpu", models=models, allowed_hosts="*", **overrides)
    STARTED["threads"] += 1
    app = create_app(settings)
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_config=None,
        access_log=False,
        **connection_options(settings, app.state.load, http_base or FASTEST),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(30)


def script_body(body: dict[str, Any]) -> dict[str, Any]:
    """The page's /api/attention body as a script sends it: without `first_layer`, which orders the layers of the
    streamed form the page reads and is a 422 in any other form."""
    return {k: v for k, v in body.items() if k != "first_layer"}


# a training run's server-sent events (GET /api/train/{id}/events), each (kind, data)
Events = list[tuple[str, dict[str, Any]]]


def read_events(lines: Iterator[str], last: str = "end", step: int | None = None) -> Events:
    """Server-sent events from `lines` up to and including the first `last` event (of `step`, for a snapshot)."""
    out: Events = []
    kind = None
    for line in lines:
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            assert kind is not None, line
            data = json.loads(line.removeprefix("data: "))
            out.append((kind, data))
            if kind == last and (step is None or data.get("step") == step):
                return out
    raise AssertionError(f"the stream closed before its {last} event: {[k for k, _ in out]}")


T = TypeVar("T")


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run on a thread of its own: the browser tests' sync Playwright leaves a running loop in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
