"""Stopping a computation nobody waits for any more: whoever started it sets an event; a run checks it between
layers and stops there with `Stopped`.

Torch operations cannot be interrupted, so a layer in progress finishes first. The event travels in a context
variable, so the engine's functions need no extra parameter and a run started with no event never stops.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_stop: ContextVar[threading.Event | None] = ContextVar("attnlab_stop", default=None)


class Stopped(Exception):
    """The computation was stopped on request before it finished."""


@contextmanager
def stop_when(event: threading.Event) -> Iterator[None]:
    """Runs inside this block stop at their next check once `event` is set."""
    token = _stop.set(event)
    try:
        yield
    finally:
        _stop.reset(token)


def check() -> None:
    """Raise Stopped when the computation in progress has been asked to stop."""
    event = _stop.get()
    if event is not None and event.is_set():
        raise Stopped("stopped on request")


def current() -> threading.Event | None:
    """The event the computation in progress stops on (None: it never stops), for whoever carries it on past the
    call that set it (a streamed answer's frames, written after the route has answered)."""
    return _stop.get()
