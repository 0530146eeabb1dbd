"""create_app(settings) -> FastAPI: models load in the lifespan and live on app.state."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.device import resolve_device, resolve_dtype
from engine.models import BUILDERS, load_models
from server.config import Settings
from server.deps import Runtime
from server.errors import error_body, install_error_handlers
from server.routes import attention, health, models, pages

log = logging.getLogger("attnlab")


class BodyLimit:
    """Refuse request bodies over max_bytes with a 413 before they are read whole."""

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
        seen = 0
        refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            if refused:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        import orjson

        body = orjson.dumps(
            error_body(413, "too_large", f"body: larger than {self.max_bytes} bytes (ATTNLAB_MAX_BODY_BYTES)", "body")
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


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
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(pages.STATIC_DIR)), name="static")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app
