"""How a computation is scheduled: ATTNLAB_MAX_CONCURRENT compute threads, and clients that go away.

A route that computes (`ComputeRoute`) does all its work on one of the compute threads, start to finish: parsing
and validating the JSON body, the forward passes, and serialising the answer. So

- peak memory is bounded by the compute threads: a request waiting its turn holds only its raw body (at most
  ATTNLAB_MAX_BODY_BYTES), never its parsed numbers, tensors or answer;
- a waiting request holds no thread at all: it is a queued job, and the event loop and the shared thread pool stay
  free for /api/health, the page and static files however many requests wait;
- a client that goes away is not computed for: a queued job is withdrawn, and a running one stops at its next
  layer (engine.stop);
- a request that cannot start within ATTNLAB_QUEUE_TIMEOUT_S is a 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from engine.progress import reporting
from engine.stop import stop_when
from server.errors import ApiError
from server.observability import Metrics
from server.progress import HEADER, run_id_of
from server.stream import StreamedAnswer
from server.uploads import REQUEST_PART, image_paths, is_multipart, read_form, with_files

T = TypeVar("T")
# How deeply a body may nest arrays and objects: the deepest body the API reads is 6 levels (a compare of two
# bodies with blocked cells); thousands would exhaust the parser's stack
MAX_DEPTH = 32


def client_gone() -> ApiError:
    # 499 is nginx's "client closed request": the answer goes nowhere, but the logs and metrics count it
    return ApiError(499, "client_closed", "the client closed the connection before the answer was ready")


class ComputePool:
    """The compute threads. A job waits in the queue without a thread, then runs on one of them to the end."""

    def __init__(self, size: int, queue_timeout_s: float, metrics: Metrics | None = None) -> None:
        self.size = size
        self.queue_timeout_s = queue_timeout_s
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="attnlab-compute")
        # the jobs waiting for a thread, in the order the executor will start them (it takes its queue first in,
        # first out): a job's place in the line is how many of them came before it
        self._waiting: dict[int, None] = {}
        self._tickets = itertools.count()
        self._lock = threading.Lock()

    def ahead(self, ticket: int) -> int | None:
        """How many jobs wait before the job holding `ticket`; None once it has started (or left the line)."""
        with self._lock:
            if ticket not in self._waiting:
                return None
            return sum(1 for t in self._waiting if t < ticket)

    def ticket(self) -> int:
        """A place in the line, for `run` and `ahead`."""
        return next(self._tickets)

    def _leave(self, ticket: int) -> None:
        with self._lock:
            self._waiting.pop(ticket, None)

    def busy(self) -> ApiError:
        return ApiError(
            503,
            "busy",
            f"all {self.size} compute slots stayed busy for {self.queue_timeout_s:g} s "
            "(set by ATTNLAB_MAX_CONCURRENT and ATTNLAB_QUEUE_TIMEOUT_S on this server); try again shortly",
            headers={"Retry-After": str(max(1, round(self.queue_timeout_s)))},
        )

    def _count(self, name: str, by: int) -> None:
        if self.metrics is not None:
            gauge = self.metrics.queue_depth if name == "waiting" else self.metrics.busy_slots
            gauge.inc(by)

    def abandoned(self, stage: str) -> None:
        """Count a computation whose client went away: "waiting", "running", or "streaming" (after the first
        frame of a streamed answer)."""
        if self.metrics is not None:
            self.metrics.abandoned.labels(stage).inc()

    async def run(
        self,
        fn: Callable[[], T],
        gone: asyncio.Future[None],
        ticket: int | None = None,
        early: asyncio.Future[T] | None = None,
    ) -> T:
        """fn() on a compute thread; a 503 when no thread takes it within the queue timeout, a 499 when `gone`
        (the client's disconnection) completes first. fn runs in a copy of the caller's context (request id).
        `ticket` (from `ticket()`) is the place in the line that `ahead` answers for. `early`: a future fn may
        complete before it returns (a streamed answer, once its first frame is made): its result is returned then,
        and fn goes on on its thread, which it keeps until it returns."""
        ticket = self.ticket() if ticket is None else ticket
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()
        stop = threading.Event()
        context = contextvars.copy_context()

        def mark_started() -> None:
            if not started.done():
                started.set_result(None)

        def job() -> T:
            self._leave(ticket)
            self._count("waiting", -1)
            self._count("busy", 1)
            loop.call_soon_threadsafe(mark_started)
            try:
                with stop_when(stop):
                    return fn()
            finally:
                self._count("busy", -1)

        self._count("waiting", 1)
        with self._lock:
            self._waiting[ticket] = None
            queued = self.executor.submit(context.run, job)  # in the line in the order the executor takes them
        done: asyncio.Future[T] = asyncio.wrap_future(queued)
        # a job whose client left is not awaited: fetch its outcome anyway, so no "never retrieved" warning
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        first: set[asyncio.Future[Any]] = {started, done, gone}
        waited, _ = await asyncio.wait(first, timeout=self.queue_timeout_s, return_when="FIRST_COMPLETED")
        # still in the queue (neither started nor done): withdrawn before any work
        if not started.done() and not done.done() and queued.cancel():
            self._leave(ticket)
            self._count("waiting", -1)
            if gone in waited:
                self.abandoned("waiting")
                raise client_gone()
            raise self.busy()
        if not done.done() and not (early is not None and early.done()):
            second: set[asyncio.Future[Any]] = {done, gone}
            if early is not None:
                second.add(early)
            await asyncio.wait(second, return_when="FIRST_COMPLETED")
        if early is not None and early.done() and not done.done():
            return early.result()  # the rest is made on the job's thread; the answer itself watches for `gone`
        if not done.done():
            stop.set()  # the run stops at its next layer; its thread then takes the next job
            self.abandoned("running")
            raise client_gone()
        return done.result()

    def hold(self, fn: Callable[[], T]) -> Future[T]:
        """fn() on a compute thread, held for as long as it runs (a training run, server/training.py): no queue
        timeout and no client to watch; the caller bounds how many it holds and stops them itself."""

        def job() -> T:
            self._count("busy", 1)
            try:
                return fn()
            finally:
                self._count("busy", -1)

        return self.executor.submit(contextvars.copy_context().run, job)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


async def disconnected(request: Request) -> None:
    """Completes when the client goes away (the body has been read already, so receive() waits for that)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


# a JSON string (its escapes included), whose brackets are text, not nesting
JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as int8
NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[{]}")))
CHUNK = 1 << 20


def nesting(body: bytes) -> int:
    """How deeply `body` nests arrays and objects, counted without parsing it (so without recursion): the running
    sum of +1 per [ or { and -1 per ] or } outside strings, at its highest. A megabyte of brackets at a time."""
    marks = JSON_STRING.sub(b"", body).translate(BRACKETS, NOT_BRACKETS)
    deepest = level = 0
    for start in range(0, len(marks), CHUNK):
        levels = level + np.cumsum(np.frombuffer(marks, np.int8, min(CHUNK, len(marks) - start), start), dtype=np.int32)
        deepest = max(deepest, int(levels.max()))
        level = int(levels[-1])
    return deepest


def parse_body(model: type[BaseModel], body: bytes, files: dict[str, bytes] | None = None) -> BaseModel:
    """The JSON body validated against `model`, with FastAPI's error locations ("body", ...). `files`: the body
    came as multipart/form-data (server/uploads.py): `body` is its `request` part, and each file is set at its
    path before the body is validated."""
    part = "body" if files is None else REQUEST_PART
    if not body:
        if files is not None:
            raise ApiError(422, "invalid_request", "empty: the part `request` is the JSON body", part)
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    depth = nesting(body)
    if depth > MAX_DEPTH:
        message = f"nested {depth} levels deep (arrays and objects), limit {MAX_DEPTH}"
        raise ApiError(422, "invalid_request", message, part)
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        if files is not None:
            raise ApiError(
                422, "invalid_request", f"not JSON ({str(e)[:120]}): the part `request` is the JSON body", part
            ) from e
        at = ("body", e.pos) if isinstance(e, json.JSONDecodeError) else ("body",)
        said = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        error = {"type": "json_invalid", "loc": at, "msg": "JSON decode error", "ctx": {"error": said}}
        raise RequestValidationError([error]) from e
    if files is not None:
        data = with_files(data, files)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = [{**err, "loc": ("body", *err["loc"])} for err in e.errors(include_url=False)]
        raise RequestValidationError(errors) from e


class ComputeRoute(APIRoute):
    """A POST route whose whole work (body, computation, answer) runs on a compute thread (see the module doc).

    Its endpoint carries the analysis it serves (`endpoint.analysis`, a server.declare.Analysis): FastAPI reads
    the endpoint's signature for the OpenAPI document only; this handler parses the body against
    `analysis.request`, builds the analysis's Context (`analysis.context(request)`: settings, models and runtime,
    dependency overrides honoured) and runs `analysis.respond`.
    """

    def get_route_handler(self) -> Callable[[Request], Any]:
        analysis = getattr(self.endpoint, "analysis", None)
        if analysis is None:
            raise TypeError(f"{self.endpoint.__name__}: a compute route serves a declared analysis (server/declare.py)")
        model: type[BaseModel] = analysis.request
        images = image_paths(model)  # what a multipart body's file parts may fill (server.app.BodyLimit lets a
        # multipart body through only to a route that has some)

        def read(body: bytes, content_type: str, max_image_bytes: int) -> BaseModel:
            """The request, from its JSON body or its multipart form (server/uploads.py)."""
            if not is_multipart(content_type):
                return parse_body(model, body)
            return parse_body(model, *read_form(body, content_type, images, max_image_bytes))

        async def handler(request: Request) -> Response:
            ctx = analysis.context(request)
            board = ctx.runtime.progress
            run_id = run_id_of(request.headers.get(HEADER))  # a client that shows progress names its run
            body = await request.body()  # read already, whole, by server.app.BodyLimit
            content_type = request.headers.get("content-type", "")
            pool: ComputePool = request.app.state.pool  # server/app.py lifespan
            ticket = pool.ticket()
            run = board.start(run_id, lambda: pool.ahead(ticket)) if run_id is not None else None
            check = ctx.settings.check_answers

            loop = asyncio.get_running_loop()
            early: asyncio.Future[Response] = loop.create_future()

            def answered(response: Response) -> None:  # on the loop: a streamed answer's first frame is made
                if not early.done():
                    early.set_result(response)

            def compute() -> Response:
                response: Response = analysis.respond(
                    read(body, content_type, ctx.settings.max_image_bytes), ctx, check
                )
                if isinstance(response, StreamedAnswer):  # made here, frame by frame, sent as each is made
                    response.abandoned = lambda: pool.abandoned("streaming")
                    response.produce(loop, lambda: loop.call_soon_threadsafe(answered, response))
                return response

            def work() -> Response:
                if run is None:
                    return compute()
                board.move(run, "layers")
                with reporting(lambda stage, done, total: board.move(run, stage, done, total)):
                    return compute()

            gone = asyncio.ensure_future(disconnected(request))
            try:
                response = await pool.run(work, gone, ticket, early)
            except BaseException:
                if run is not None:
                    board.move(run, "failed")  # final: the thread of a run whose client left cannot undo it
                raise
            finally:
                gone.cancel()
            if run is not None:
                board.move(run, "done")
            return response

        return handler
