"""create_app(settings) -> FastAPI: models load in the lifespan and live on app.state."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.device import resolve_device, resolve_dtype
from engine.models import BUILDERS, load_models
from server.config import Settings
from server.deps import Runtime
from server.errors import error_body, install_error_handlers
from server.routes import analyses, attention, heads, health, mechanics, models, pages

log = logging.getLogger("attnlab")


class BodyLimit:
    """Refuse request bodies over max_bytes with a 413, whether or not they declare a Content-Length.

    The body is read here (never more than max_bytes of it) and replayed to the app, so a chunked
    upload is cut off as soon as it passes the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        seen = 0
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
        body = orjson.dumps(
            error_body(413, "too_large", f"body: larger than {self.max_bytes} bytes (ATTNLAB_MAX_BODY_BYTES)", "body")
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        device = resolve_device(settings.device)
        dtype = resolve_dtype(settings.dtype)
        names = settings.model_names(list(BUILDERS))
        app.state.models = load_models(names)
        app.state.runtime = Runtime(device, dtype, settings.max_concurrent, settings.queue_timeout_s)
        log.info("attnlab ready on %s (%s) with models %s", device, settings.dtype, ", ".join(names))
        yield

    app = FastAPI(
        title="attnlab",
        summary="Multi-head attention with masks you toggle: every head's scores and weights.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(attention.router)
    app.include_router(heads.router)
    app.include_router(analyses.router)
    app.include_router(mechanics.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app
