"""How far a computation has got, for whoever waits on it: a run reports its stage ("layers", then "writing") and,
per layer, how many of how many are done.

As with engine.stop, the sink travels in a context variable, so the engine's functions need no extra parameter and
a run with no sink reports to nobody.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Sink = Callable[[str, int, int], None]  # (stage, done, total)
_sink: ContextVar[Sink | None] = ContextVar("attnlab_progress", default=None)


@contextmanager
def reporting(sink: Sink) -> Iterator[None]:
    """Runs inside this block report their progress to `sink`."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def report(stage: str, done: int = 0, total: int = 0) -> None:
    """Tell whoever waits that the run is at `stage`, `done` of `total` steps in (0 of 0: no count)."""
    sink = _sink.get()
    if sink is not None:
        sink(stage, done, total)
