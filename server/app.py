"""create_app(settings) -> FastAPI: models load in the lifespan and live on app.state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sized
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.device import resolve_device, resolve_dtype
from engine.models import BUILDERS, load_available
from engine.models.checkpoint import CheckpointLimits
from server import analyses
from server.config import Settings
from server.deps import Runtime
from server.errors import Unexpected, bad_host_page, error_body, install_error_handlers
from server.hosts import answered_hosts
from server.observability import Metrics, Observe
from server.routes import guide, health, models, pages, progress, runs, samples, train, train_experiments
from server.routes.pages import DOCS_CSP, PAGE_CSP
from server.runcache import RunCache
from server.runstore import RunStore
from server.scheduling import ComputePool
from server.trained import ServedModels, TrainedModels
from server.training import Trainer
from server.trainstore import TrainStore

log = logging.getLogger("attnlab")


class BodyLimit:
    """Refuse request bodies over max_bytes with a 413, whether or not they declare a Content-Length.

    The body is read here (never more than max_bytes of it) and replayed to the app, so a chunked
    upload is cut off as soon as it passes the limit.
    """

    def __init__(
        self, app: ASGIApp, max_bytes: int, read_timeout_s: float = 10.0, uploads: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout_s = read_timeout_s
        self.uploads = uploads  # the paths that also take multipart/form-data (server/uploads.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(send)
            return
        computes = scope["method"] == "POST" or scope["path"].startswith(COMPUTED_GETS)
        if computes and scope["path"].startswith("/api/"):
            site = headers.get(b"sec-fetch-site", b"").decode("latin-1").strip().lower()
            if site == "cross-site":
                await send_error(send, 403, "cross_site", CROSS_SITE, "sec-fetch-site")
                return
        if scope["method"] == "POST" and scope["path"].startswith("/api/"):
            refusal = json_only(headers, scope["path"] in self.uploads)
            if refusal is not None:
                await send_error(send, 415, "unsupported_media_type", *refusal)
                return
        chunks: list[bytes] = []
        seen = 0
        try:
            async with asyncio.timeout(self.read_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away
                        return
                    chunk = message.get("body", b"")
                    seen += len(chunk)
                    if seen > self.max_bytes:
                        await self._refuse(send)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            late = (
                f"body: not received within {self.read_timeout_s:g} s "
                "(set by ATTNLAB_READ_TIMEOUT_S on this server): send it whole"
            )
            await send_error(send, 408, "timeout", late, "body")
            return
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        message = f"body: larger than {self.max_bytes} bytes (set by ATTNLAB_MAX_BODY_BYTES on this server)"
        await send_error(send, 413, "too_large", message, "body")


# A page on another site can send a POST with no CORS preflight only as a "simple" request (a form's content types,
# or none at all), and a browser names such a request cross-site in Sec-Fetch-Site: either refusal alone keeps
# other sites from making a person's attnlab compute. The page's own requests are same-origin; scripts send none.
# GETs that compute (a long run's tiles and rows take a compute slot): refused cross-site as a POST is
COMPUTED_GETS = ("/api/runs/",)
CROSS_SITE = (
    "sec-fetch-site: got 'cross-site': the API answers this server's own page and scripts, not pages of other sites"
)


def json_only(headers: dict[bytes, bytes], uploads: bool = False) -> tuple[str, str] | None:
    """(message, field) when a POST to the API is not plain JSON: the API reads application/json, uncompressed,
    and says so (a POST with no content-type is one a page of any site could send without asking). `uploads`: the
    route takes an image, so multipart/form-data too (server/uploads.py; a page of another site that posts a form
    is refused by its Sec-Fetch-Site: cross-site, before this)."""
    encoding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower()
    if encoding not in ("", "identity"):
        return f"content-encoding: got {encoding!r}; send the JSON body uncompressed", "content-encoding"
    kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip().lower()
    if not kind:
        return "content-type: none given; the API reads application/json", "content-type"
    if uploads and kind == "multipart/form-data":
        return None
    if kind != "application/json" and not kind.endswith("+json"):
        also = " (or multipart/form-data, with an image as a file)" if uploads else ""
        return f"content-type: got {kind[:100]!r}; the API reads application/json{also}", "content-type"
    return None


async def send_error(
    send: Send, status: int, code: str, message: str, field: str | None, headers: dict[str, str] | None = None
) -> None:
    """The one error shape, sent by a middleware (before the app and its handlers)."""
    body = orjson.dumps(error_body(status, code, message, field))
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_page(send: Send, status: int, page: str) -> None:
    """A small HTML page, sent by a middleware (a browser's refused Host)."""
    body = page.encode()
    raw = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class Load:
    """What the server holds now: the requests in flight (counted by `Capacity`) and its open connections (the
    set uvicorn keeps, handed over by the server's protocol, server.transport; none under a test client)."""

    def __init__(self) -> None:
        self.requests = 0
        self.connections: Sized = ()
        # called when the protocol cuts off a client that read nothing of its answer (server.transport)
        self.cut_off: Callable[[], object] = lambda: None


class Capacity:
    """ATTNLAB_MAX_CONNECTIONS in the one error shape: a request that comes while that many requests are in flight,
    or that makes the open connections more than that, is a 503 with Retry-After, before its body is read.

    uvicorn's own limit (server.transport.backstop) sits a margin above, so the number of connections and of
    requests in flight stays bounded even if this app stops answering; past it uvicorn answers a plain-text 503.
    """

    retry_after_s = 5  # as nginx's own 503 when no replica answers (deploy/nginx.conf)

    def __init__(self, app: ASGIApp, limit: int, load: Load) -> None:
        self.app = app
        self.limit = limit
        self.load = load

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        load, limit = self.load, self.limit
        full = None
        if load.requests >= limit:
            full = f"{load.requests} requests already in flight"
        elif len(load.connections) > limit:  # this request's own connection is one of them
            full = f"{len(load.connections)} connections open"
        if full is not None:
            message = (
                f"connections: {full}, limit {limit} (set by ATTNLAB_MAX_CONNECTIONS on this server); try again shortly"
            )
            retry = {"Retry-After": str(self.retry_after_s)}
            await send_error(send, 503, "busy", message, "connections", retry)
            return
        load.requests += 1
        try:
            await self.app(scope, receive, send)
        finally:
            load.requests -= 1


class Hardening:
    """Refuse Host headers outside the allow-list (DNS rebinding) and give every response its security headers:
    a Content-Security-Policy, nosniff, no referrer, and no caching of the page and the API."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self.any_host = "*" in allowed_hosts
        self.exact = {h.lower() for h in allowed_hosts if not h.startswith("*.")}
        self.suffixes = tuple(h[1:].lower() for h in allowed_hosts if h.startswith("*."))

    def host_allowed(self, host: str) -> bool:
        if self.any_host:
            return True
        name = host.lower()
        if name.startswith("["):  # [::1]:8000
            name = name[: name.find("]") + 1]
        elif name.count(":") == 1:
            name = name.split(":")[0]
        return name in self.exact or (bool(self.suffixes) and name.endswith(self.suffixes))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        path: str = scope["path"]
        csp = DOCS_CSP if path in ("/docs", "/redoc") else PAGE_CSP

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                headers += [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                if b"content-security-policy" not in names:  # the page sets its own (its import map's hash)
                    headers.append((b"content-security-policy", csp.encode()))
                if b"cache-control" not in names and (path == "/" or path.startswith("/api")):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        if not self.host_allowed(host):  # refused with the same headers as any answer
            message = f"host: {host[:100]!r} is not a name this server answers to; add it to ATTNLAB_ALLOWED_HOSTS"
            accept = dict(scope["headers"]).get(b"accept", b"").decode("latin-1")
            if "text/html" in accept and not path.startswith("/api"):  # a browser: a page that says what to set
                await send_page(with_headers, 400, bad_host_page(host))
                return
            await send_error(with_headers, 400, "bad_host", message, "host")
            return
        await self.app(scope, receive, with_headers)


class HeadAsGet:
    """HEAD on every GET route: the request is answered as a GET, with the same headers (Content-Length included)
    and no body. Outside this middleware (the log, the metrics) it is still a HEAD."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        scope["method"] = "GET"  # in place: the router's match (scope["route"]) stays visible to Observe
        try:
            await self.app(scope, receive, headers_only)
        finally:
            scope["method"] = "HEAD"


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app for `settings` (read from the environment when None); a declared limit set wrong (ATTNLAB_MAX_...)
    is a ValueError naming its variable, before anything loads."""
    settings = analyses.declared_settings(settings or Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype)
        names = settings.model_names(list(BUILDERS))
        # checkpoint directories (NAME=DIR) after the built-in models; one that cannot load is listed, not fatal
        checkpoints = settings.checkpoints()
        loading = settings.checkpoint_loading() if checkpoints else {}
        loaded = load_available(names, checkpoints, **loading)
        for name, why in loaded.unavailable.items():
            log.warning("model %s is unavailable: %s", name, why)
        # the compute threads the computing routes run on (server/scheduling.py): the app's, not the runtime's, so
        # a Runtime runs a request in any thread (attnlab.run: the caller's) and needs no pool to exist
        app.state.pool = pool = ComputePool(settings.max_concurrent, settings.queue_timeout_s, metrics)
        kept = RunStore(settings.limit("run_bytes"))
        app.state.runtime = Runtime(device, dtype, RunCache(settings.cache_bytes, metrics), long_runs=kept)
        # the training lab: its run store migrated, this server's runs left unfinished by its last stop marked
        # interrupted, and every kept snapshot served as a model "train:RUN@STEP" (server/trained.py)
        store = TrainStore(settings.database(), settings.data_dir, settings.instance)
        for run_id in store.interrupt_unfinished():
            log.warning("training run %s was unfinished when this server last stopped: marked interrupted", run_id)
        app.state.trainer = trainer = Trainer(store, pool, settings)
        app.state.trained = trained = TrainedModels(
            store, CheckpointLimits(max_parameters=settings.checkpoint_parameters)
        )
        app.state.models = ServedModels(loaded, trained.get)
        log.info("attnlab ready on %s (%s) with models %s", device, settings.dtype, ", ".join(app.state.models))
        try:
            yield
        finally:
            trainer.shutdown()  # every run stopped at its next step, marked interrupted
            pool.shutdown()
            store.close()

    app = FastAPI(
        title="attnlab",
        summary="Multi-head attention with masks you toggle: every head's scores and weights.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served by routes/pages.py from local files, so the docs work offline
        redoc_url=None,
    )
    app.state.settings = settings
    # bound for a class (--host 0.0.0.0): this machine's own addresses are answered too (server.hosts)
    app.state.allowed_hosts = answered_hosts(settings.host_names(), settings.host)
    app.state.load = Load()  # the server's protocol hands it the open connections (server.transport.protocol)
    metrics = Metrics()
    app.state.metrics = metrics
    app.state.load.cut_off = metrics.write_timeouts.inc
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(progress.router)
    app.include_router(runs.router)
    app.include_router(train_experiments.router)  # before the run routes: "experiments" is no run id
    app.include_router(train.router)
    app.include_router(models.router)
    app.include_router(samples.router)
    analyses.install(app)  # every declared analysis's route (server/analyses/), and GET /api/analyses
    app.include_router(pages.router)
    app.include_router(guide.router)
    app.add_middleware(Unexpected)  # innermost: it sees what the exception handlers did not take
    app.add_middleware(HeadAsGet)  # outside Unexpected: a HEAD's 500 has no body either
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        read_timeout_s=settings.read_timeout_s,
        uploads=analyses.upload_paths(),
    )
    app.add_middleware(Capacity, limit=settings.max_connections, load=app.state.load)  # inside the log and headers
    app.add_middleware(Hardening, allowed_hosts=app.state.allowed_hosts)
    app.add_middleware(Observe, metrics=metrics)
    return app
