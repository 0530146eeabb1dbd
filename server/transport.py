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

An answer is written as fast as its client reads it, no faster (uvicorn waits for the socket to drain before the
next part; server/stream.py makes the next frame only then). `WriteDeadline` closes a connection whose client reads
nothing of its answer for ATTNLAB_WRITE_TIMEOUT_S, dropping what was still to be sent: a client that stops reading
holds neither the answer's memory nor its computation for longer, and a shutdown waits no longer than that for it.
Between requests a connection is kept open ATTNLAB_KEEP_ALIVE_S (uvicorn's timeout_keep_alive), longer than
clients keep an idle connection for reuse (httpx 5 s, aiohttp 15 s): a client that sends on a connection the
server is closing at that moment sees it closed with no answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    from server.app import Load
    from server.config import Settings

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    FASTEST: type[asyncio.Protocol] = HttpToolsProtocol
except ImportError:  # httptools is a dependency; a hand-made environment without it still serves, through h11
    FASTEST = H11Protocol

log = logging.getLogger("attnlab.transport")


class HeadDeadline:
    """Mixed into one of uvicorn's HTTP/1.1 protocols (they share connection_made, on_response_complete,
    connection_lost, `cycle`, `transport`, `loop` and `connections`): closes a connection whose next request head is
    not in within head_timeout_s, and hands the app's `load` the server's open connections."""

    head_timeout_s: float = 10.0
    max_head_bytes: int = 64 * 1024
    max_head_lines: int = 100
    keep_alive_s: float = 5.0  # uvicorn's timeout_keep_alive: after an answer, the next head may wait that long first
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
        # keep-alive: the next request's head has the same time, after the idle wait, and the same bounds
        self._arm(self.keep_alive_s)
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

    def _arm(self, idle_s: float = 0.0) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(idle_s + self.head_timeout_s, self._expire, self.cycle)

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


class WriteDeadline:
    """Mixed into one of uvicorn's HTTP/1.1 protocols (they share pause_writing, resume_writing, connection_lost,
    `transport` and `loop`): aborts a connection whose unsent answer has not shrunk for write_timeout_s while the
    socket was full (the transport paused its writer), freeing it, and tells the app's `load` (a client that reads
    slowly is not cut off: each drained byte restarts the wait)."""

    write_timeout_s: float = 30.0
    load: Load | None = None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stalled: asyncio.TimerHandle | None = None
        self._unsent = 0

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        self._watch_writes()

    def resume_writing(self) -> None:
        self._unwatch_writes()
        super().resume_writing()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch_writes()
        super().connection_lost(exc)  # type: ignore[misc]

    def _watch_writes(self) -> None:
        self._unwatch_writes()
        self._unsent = self.transport.get_write_buffer_size()
        self._stalled = self.loop.call_later(self.write_timeout_s, self._writes_stalled)

    def _unwatch_writes(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _writes_stalled(self) -> None:
        self._stalled = None
        unsent = self.transport.get_write_buffer_size()
        if unsent < self._unsent:  # the client read some: the wait starts again
            self._watch_writes()
            return
        log.warning(
            "a client read nothing for %g s (ATTNLAB_WRITE_TIMEOUT_S): its connection is closed with %d bytes unsent",
            self.write_timeout_s,
            unsent,
        )
        if self.load is not None:
            self.load.cut_off()
        self.transport.abort()  # drops the unsent bytes; the app sees the client gone (http.disconnect)


def protocol(
    head_timeout_s: float,
    load: Load | None = None,
    base: type[asyncio.Protocol] = FASTEST,
    max_head_bytes: int = 64 * 1024,
    max_head_lines: int = 100,
    write_timeout_s: float = WriteDeadline.write_timeout_s,
    keep_alive_s: float = HeadDeadline.keep_alive_s,
) -> type[asyncio.Protocol]:
    """The protocol class uvicorn builds each connection with, for these deadlines, these bounds on a request head
    and the app's load (app.state.load): `base` (httptools where installed, else h11) with both deadlines mixed in.
    `keep_alive_s`: the timeout_keep_alive uvicorn is given."""
    fields = {
        "head_timeout_s": head_timeout_s,
        "max_head_bytes": max_head_bytes,
        "max_head_lines": max_head_lines,
        "write_timeout_s": write_timeout_s,
        "keep_alive_s": keep_alive_s,
        "load": load,
    }
    return type("Deadlines", (HeadDeadline, WriteDeadline, base), fields)


def backstop(max_connections: int) -> int:
    """uvicorn's limit_concurrency: a margin above ATTNLAB_MAX_CONNECTIONS, where the app answers, so the app's 503s
    themselves are served; past it uvicorn answers its plain-text 503 without the app."""
    return max_connections + max(8, max_connections // 8)


def connection_options(settings: Settings, load: Load | None, base: type[asyncio.Protocol] = FASTEST) -> dict[str, Any]:
    """What uvicorn is given for the connection level (`attnlab serve`, and the tests' servers): the protocol with
    its deadlines, the keep-alive time and the backstop on connections."""
    return {
        "http": protocol(
            settings.read_timeout_s,
            load,
            base,
            max_head_bytes=settings.max_head_bytes,
            max_head_lines=settings.max_head_lines,
            write_timeout_s=settings.write_timeout_s,
            keep_alive_s=settings.keep_alive_s,
        ),
        "timeout_keep_alive": settings.keep_alive_s,
        "limit_concurrency": backstop(settings.max_connections),
    }
