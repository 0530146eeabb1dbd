"""An answer sent as it is made: the streamed arrays form (wire/arrays.py has its frames).

The frames are made on the request's compute thread, one after another, and handed to the event loop, which sends
each as soon as it is there: the route answers once the first frame is made (server/scheduling.py), and the compute
slot stays taken until the last one is. The making keeps at most AHEAD frames ahead of the socket: the next one is
made once the one before is written, as fast as the client reads and no faster, so a client that reads slowly or
not at all never has the whole answer held for it (server/transport.py cuts off one that reads nothing). A client
that goes away stops the making at its next layer (engine.stop).
A failure after the first frame cannot change the status any more: its error goes out as an error frame, in the one
error shape, and ends the answer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from engine import stop
from engine.errors import InputError
from engine.stop import Stopped
from server.errors import ApiError, answered_error, error_body
from wire.arrays import STREAM_MEDIA_TYPE, write_frame

log = logging.getLogger("attnlab.stream")

# frames made and not yet handed to the socket: once one is, the next is made while the socket drains it
AHEAD = 1


class StreamedAnswer(StreamingResponse):
    """`frames` ((kind, body) pairs, made lazily: the first one's work is done when it is asked for) as the streamed
    arrays form. `produce` makes them on the compute thread; the ASGI call sends them."""

    media_type = STREAM_MEDIA_TYPE

    def __init__(self, frames: Iterator[tuple[str, Any]]) -> None:
        super().__init__(iter(()), media_type=STREAM_MEDIA_TYPE, headers={"Cache-Control": "no-store"})
        self.frames = frames
        self.chunks: asyncio.Queue[tuple[bytes | memoryview, ...] | None] = asyncio.Queue()  # a frame's parts
        self.room = threading.Semaphore(AHEAD)  # taken by each frame made, given back once written
        self.stop: threading.Event | None = None
        # called once when the client goes away before the last frame (the route counts it as abandoned)
        self.abandoned: Callable[[], object] = lambda: None

    def produce(self, loop: asyncio.AbstractEventLoop, ready: Callable[[], object]) -> None:
        """Make every frame (on the compute thread), each handed to `loop` as soon as it is made; `ready()` once
        the first is. Whatever fails before the first frame raises, and the route answers it as any error."""
        self.stop = stop.current()

        def hand(parts: tuple[bytes, memoryview] | None) -> None:
            loop.call_soon_threadsafe(self.chunks.put_nowait, parts)

        self.room.acquire()  # free: nothing is made yet
        hand(write_frame(*next(self.frames)))
        ready()
        try:
            while True:
                while not self.room.acquire(timeout=1.0):  # until the socket has taken the frame before
                    stop.check()
                stop.check()  # a client gone while a layer was written: no more layers written for nobody
                made = next(self.frames, None)
                if made is None:
                    break
                hand(write_frame(*made))
        except Stopped:
            pass  # the client went away: nobody reads what was still to come
        except (ApiError, InputError) as e:
            hand(write_frame("error", answered_error(e)["error"]))
        except Exception:  # a bug: logged in full, and the client is told in the one error shape
            log.exception("a streamed answer failed after its first frame")
            why = "the server failed while writing the rest of this answer; the log has the cause"
            hand(write_frame("error", error_body(500, "internal_error", why)["error"]))
        finally:
            hand(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        left = asyncio.ensure_future(gone())
        try:
            while True:
                chunk = asyncio.ensure_future(self.chunks.get())
                await asyncio.wait({chunk, left}, return_when=asyncio.FIRST_COMPLETED)
                if left.done():  # the client went away, or was cut off for reading nothing
                    chunk.cancel()
                    self.abandoned()
                    return
                parts = chunk.result()
                if parts is None:
                    break
                for part in parts:  # each waits until the socket has drained what was written before it
                    await send({"type": "http.response.body", "body": part, "more_body": True})
                self.room.release()  # written: the next frame may be made
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            left.cancel()
            if self.stop is not None:
                self.stop.set()  # done, or nobody reads any more: a producer still at work stops at its next layer
            self.room.release()  # and one waiting for room wakes to see it
