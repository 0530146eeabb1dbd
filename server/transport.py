"""The connection level: how long a client may take to send a request, and how many connections are served.

uvicorn's HTTP/1.1 protocols close idle keep-alive connections, but a connection that is opened and then sends
nothing, or trickles a request head a byte at a time, is held for ever. `HeadDeadline` gives every request head
ATTNLAB_READ_TIMEOUT_S to arrive, from the connection's start or from the previous answer; the body has the same
time, enforced where it is read (server.app.BodyLimit, a 408).

The deadline sits on uvicorn's httptools protocol, which delivers a large answer faster than its h11 one (a 76 MB
answer: 132-164 ms against 188-266 ms, bench/README.md), and on h11 where httptools is not installed.

ATTNLAB_MAX_CONNECTIONS caps the connections and requests in flight, so held connections cannot exhaust the
process. The app answers past it (server.app.Capacity: a 503 in the one error shape, with Retry-After), told of the
open connections by the protocol here; uvicorn's own limit, `backstop`, sits a margin above, for when the app
cannot answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

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
    load: Load | None = None
    # what the protocol it is mixed into provides
    cycle: Any
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    connections: set[Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        if self.load is not None:
            self.load.connections = self.connections  # uvicorn's set of them, one for the whole server

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()  # keep-alive: the next request's head has the same time to arrive

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


def protocol(
    head_timeout_s: float, load: Load | None = None, base: type[asyncio.Protocol] = FASTEST
) -> type[asyncio.Protocol]:
    """The protocol class uvicorn builds each connection with, for this deadline and the app's load (app.state.load):
    `base` (httptools where installed, else h11) with the deadline mixed in."""
    return type("HeadDeadline", (HeadDeadline, base), {"head_timeout_s": head_timeout_s, "load": load})


def backstop(max_connections: int) -> int:
    """uvicorn's limit_concurrency: a margin above ATTNLAB_MAX_CONNECTIONS, where the app answers, so the app's 503s
    themselves are served; past it uvicorn answers its plain-text 503 without the app."""
    return max_connections + max(8, max_connections // 8)
