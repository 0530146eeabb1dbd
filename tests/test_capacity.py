"""ATTNLAB_MAX_CONNECTIONS over real sockets: past it a client gets attnlab's JSON 503 with Retry-After, naming
the limit, whether the requests in flight or the open connections are what is full; once they are gone a request
is served again. uvicorn's own limit stays a margin above, answering its plain-text 503 past it.

uvicorn runs in this process, so a test can hold the compute slot and read the app's load."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from server.transport import backstop
from tests.helpers import assert_error, occupy, raw_post, until, uvicorn_here

LIMIT = 2


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def held_post(port: int) -> socket.socket:
    """A complete POST /api/attention on a socket of its own, the answer left unread (the server closes after it)."""
    return raw_post(port, b'{"model": "random", "text": "a b c d"}', {"Connection": "close"})


def answer(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    s.close()
    return out


@contextmanager
def held_requests(base: str, app: Any) -> Iterator[list[socket.socket]]:
    """LIMIT requests in flight, waiting for the one compute slot, which stays busy until the block ends."""
    with occupy(app.state.pool):
        sockets = [held_post(port_of(base)) for _ in range(LIMIT)]
        until(lambda: app.state.load.requests == LIMIT, f"{LIMIT} requests in flight")
        yield sockets


@contextmanager
def idle_connections(base: str, app: Any, n: int = LIMIT) -> Iterator[list[socket.socket]]:
    """n connections open, sending nothing."""
    sockets = [socket.create_connection(("127.0.0.1", port_of(base)), timeout=30) for _ in range(n)]
    until(lambda: len(app.state.load.connections) == n, f"{n} connections open")
    yield sockets


def test_requests_past_max_connections_get_a_json_503_then_are_served_again() -> None:
    with uvicorn_here("random", max_concurrent=1, max_connections=LIMIT) as (base, app):
        with held_requests(base, app) as sockets:
            r = httpx.get(f"{base}/api/health", timeout=10)
            err = assert_error(r, 503, "connections", f"{LIMIT} requests already in flight", "ATTNLAB_MAX_CONNECTIONS")
            assert err["code"] == "busy"
            assert r.headers["retry-after"].isdigit() and int(r.headers["retry-after"]) >= 1
            assert r.headers["x-content-type-options"] == "nosniff"  # through attnlab's middlewares, logged too
            assert "x-request-id" in r.headers
        answers = [answer(s) for s in sockets]  # the held ones finish once the slot is free
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers), [a[:100] for a in answers]
        until(lambda: app.state.load.requests == 0 and len(app.state.load.connections) == 0, "all gone")
        again = httpx.post(f"{base}/api/attention", json={"model": "random", "text": "a b"}, timeout=30)
        assert again.status_code == 200, again.text[:300]


def test_a_connection_past_max_connections_gets_a_json_503_then_is_served_again() -> None:
    with uvicorn_here("random", max_connections=LIMIT, read_timeout_s=30) as (base, app):
        with idle_connections(base, app) as sockets:
            r = httpx.get(f"{base}/api/health", timeout=10)
            assert_error(r, 503, "connections", f"{LIMIT + 1} connections open", "ATTNLAB_MAX_CONNECTIONS")
            assert r.headers["retry-after"].isdigit()
            for s in sockets:
                s.close()
        until(lambda: len(app.state.load.connections) == 0, "the idle connections closed")
        assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200


@pytest.mark.parametrize("limit", [1, 2, 8, 512])
def test_uvicorns_own_limit_is_a_margin_above(limit: int) -> None:
    assert limit < backstop(limit) <= limit + max(8, limit // 4)


def test_past_the_backstop_uvicorn_answers_without_the_app() -> None:
    with uvicorn_here("random", max_connections=LIMIT, read_timeout_s=30) as (base, app):
        with idle_connections(base, app, backstop(LIMIT)) as sockets:
            r = httpx.get(f"{base}/api/health", timeout=10)
            assert r.status_code == 503
            assert r.headers["content-type"].startswith("text/plain"), r.headers  # uvicorn's, not the app's
            for s in sockets:
                s.close()
        until(lambda: len(app.state.load.connections) == 0, "the idle connections closed")
        assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200
