"""The connection level: how long a client may take to send a request, and how many connections are served.

uvicorn's HTTP/1.1 protocols close idle keep-alive connections, but a connection that is opened and then sends
nothing, or trickles a request head a byte at a time, is held for ever. `HeadDeadline` gives every request head
ATTNLAB_READ_TIMEOUT_S to arrive, from the connection's start or from the previous answer; the body has the same
time, enforced where it is read (server.app.BodyLimit, a 408).

A request head is bounded too: ATTNLAB_MAX_HEAD_BYTES and ATTNLAB_MAX_HEAD_LINES, counted here as the bytes come
in, before the parser keeps them (httptools has no limit of its own: a 1 GB block of headers was read whole and the
server kept +987 MB). Past either, the answer is a 431 in the one error shape and the connection is closed, the rest
of the block never read. (h11 refuses a head past 16 KiB itself, with its own 400.)

The deadline and the bounds sit on uvicorn's httptools protocol, which delivers a large answer faster than its h11
one (a 76 MB answer: 132-164 ms against 188-266 ms, bench/README.md), and on h11 where httptools is not installed.

ATTNLAB_MAX_CONNECTIONS caps the connections and requests in flight, so held connections cannot exhaust the
process. The app answers past it (server.app.Capacity: a 503 in the one error shape, with Retry-After), told of the
open connections by the protocol here; uvicorn's own limit, `backstop`, sits a margin above, for when the app
cannot answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from server.app import Load

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    FASTEST: type[asyncio.Protocol] = HttpToolsProtocol
except ImportError:  # httptools is a dependency; a hand-made environment without it still serves, through h11
    FASTEST = H11Protocol


class HeadDeadline:
    """Mixed into one of uvicorn's HTTP/1.1 protocols (they share connection_made, on_response_complete,
    connection_lost, `cycle`, `transport`, `loop` and `connections`): closes a connection whose next request head is
    not in within head_timeout_s, and hands the app's `load` the server's open connections."""

    head_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    max_head_lines: int = 100
    load: Load | None = None
    # what the protocol it is mixed into provides
    cycle: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._head = HeadCount()
        if self.load is not None:
            self.load.connections = self.connections  # uvicorn's set of them, one for the whole server

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()  # keep-alive: the next request's head has the same time to arrive, and the same bounds
        self._head = HeadCount()

    def data_received(self, data: bytes) -> None:
        if self._head.reading:
            past = self._head.add(data, self.max_head_bytes, self.max_head_lines)
            if past is not None:
                self._refuse_head(past)
                return
        elif self._head.refused:
            return
        super().data_received(data)  # type: ignore[misc]

    def _refuse_head(self, message: str) -> None:
        """A 431 in the one error shape, with the headers every answer carries, and the connection closed."""
        # imported here, not above: `attnlab serve` reads this module before its arguments are checked, and the
        # error shape's module brings the engine (torch) with it
        from server.errors import error_body
        from server.routes.pages import PAGE_CSP

        self._head.refused = True
        body = orjson.dumps(error_body(431, "head_too_large", f"headers: {message}", "headers"))
        head = (
            "HTTP/1.1 431 Request Header Fields Too Large\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n"
            "x-content-type-options: nosniff\r\n"
            "referrer-policy: no-referrer\r\n"
            f"content-security-policy: {PAGE_CSP}\r\n"
            "cache-control: no-store\r\n\r\n"
        )
        if not self.transport.is_closing():
            self.transport.write(head.encode("latin-1") + body)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.head_timeout_s, self._expire, self.cycle)

    def _expire(self, cycle: Any) -> None:
        # the same cycle as when armed, and it is finished (or there was none): no new request head came in time
        waiting = self.cycle is cycle and (cycle is None or cycle.response_complete)
        if waiting and not self.transport.is_closing():
            self.transport.close()


class HeadCount:
    """The bytes and lines of one request head so far, up to the blank line that ends it."""

    def __init__(self) -> None:
        self.reading = True  # until the blank line
        self.refused = False
        self.started = False  # past the empty lines a client may send before the request line
        self.bytes = 0
        self.lines = 0
        self.tail = b""  # the last bytes seen, for a blank line split over two reads

    def add(self, data: bytes, max_bytes: int, max_lines: int) -> str | None:
        """Count `data`; what is past a limit, or None."""
        if not self.started:
            rest = data.lstrip(b"\r\n")
            self.bytes += len(data) - len(rest)
            data, self.started = rest, bool(rest)
        seen = self.tail + data
        end = seen.find(b"\r\n\r\n")
        if end < 0:
            head, self.tail = data, seen[-3:]
        else:
            head, self.reading = data[: max(0, end + 4 - len(self.tail))], False
        self.bytes += len(head)
        self.lines += head.count(b"\n")
        lines = self.lines - (not self.reading)  # the request line and each header, not the blank line
        if self.bytes > max_bytes:
            return f"the request head is past {max_bytes:,} bytes (ATTNLAB_MAX_HEAD_BYTES)"
        if lines > max_lines:
            return f"the request head has {lines:,} lines, limit {max_lines:,} (ATTNLAB_MAX_HEAD_LINES)"
        return None


def protocol(
    head_timeout_s: float,
    load: Load | None = None,
    base: type[asyncio.Protocol] = FASTEST,
    max_head_bytes: int = 64 * 1024,
    max_head_lines: int = 100,
) -> type[asyncio.Protocol]:
    """The protocol class uvicorn builds each connection with, for this deadline, these bounds on a request head and
    the app's load (app.state.load): `base` (httptools where installed, else h11) with them mixed in."""
    fields = {"head_timeout_s": head_timeout_s, "load": load}
    return type(
        "HeadDeadline",
        (HeadDeadline, base),
        {**fields, "max_head_bytes": max_head_bytes, "max_head_lines": max_head_lines},
    )


def backstop(max_connections: int) -> int:
    """uvicorn's limit_concurrency: a margin above ATTNLAB_MAX_CONNECTIONS, where the app answers, so the app's 503s
    themselves are served; past it uvicorn answers its plain-text 503 without the app."""
    return max_connections + max(8, max_connections // 8)
