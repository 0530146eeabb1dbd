"""One error shape, one place that writes it.

Under /api every error is JSON: {"error": {"status", "code", "field", "message", "details"}}.
Elsewhere the same facts are rendered as a small HTML page.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.errors import InputError, is_panic

log = logging.getLogger("attnlab")


class ApiError(Exception):
    """An error the API reports as it is: status, machine-readable code, field, plain message."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers


def error_body(
    status: int, code: str, message: str, field: str | None = None, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"error": {"status": status, "code": code, "field": field, "message": message, "details": details or []}}


def error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    if request.url.path.startswith("/api") or "text/html" not in request.headers.get("accept", ""):
        return JSONResponse(error_body(status, code, message, field, details), status_code=status, headers=headers)
    return HTMLResponse(error_page(status, f"<p>{html.escape(message)}</p>"), status_code=status, headers=headers)


def error_page(status: int, body: str, title: str | None = None, back: bool = True) -> str:
    """The small HTML page an HTML route's error is: `body` is HTML already escaped."""
    heading = html.escape(title or f"Error {status}")
    link = "<p><a href='/'>Back to attnlab</a></p>" if back else ""
    return (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>attnlab: {heading}</title>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        f"<body><h1>{heading}</h1>{body}{link}</body></html>"
    )


def bad_host_page(host: str) -> str:
    """What a browser that reached attnlab by a name it does not answer is told: the name, and what to set where the
    server runs. The server's own addresses are not listed (a rebinding page could read them); its start-up line
    lists them."""
    name = host[: host.find("]") + 1] if host.startswith("[") else host.split(":")[0] if host.count(":") == 1 else host
    shown = html.escape(name[:100] or "(no Host header)")
    setting = html.escape(f"ATTNLAB_ALLOWED_HOSTS=localhost,127.0.0.1,{name[:100]}")
    return error_page(
        400,
        f"<p>This attnlab does not answer to the name <strong>{shown}</strong>: it answers only the names it knows, so "
        "that another web site cannot reach it through a name of its own.</p>"
        "<p>If you run this attnlab and want it reached by this name, start it again with the name added:</p>"
        f"<pre>{setting} attnlab serve --host 0.0.0.0</pre>"
        "<p>Its start-up line lists the addresses it answers. If someone else runs it, tell them the name you "
        "used.</p>",
        title="attnlab does not answer to this name",
        back=False,
    )


# Fields holding a union told apart by its `kind`: pydantic puts the kind in the error's location
# (change.token.token), which is not a path a client can send, so it is dropped (change.token).
TAGGED_UNIONS = {"change": ("direction", "shift", "token")}


def _is_tag(parts: list[Any], i: int) -> bool:
    return i > 0 and parts[i] in TAGGED_UNIONS.get(str(parts[i - 1]), ())


def field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """("body", "masks", "blocked", 2, 0) -> "masks.blocked[2][0]"."""
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    out = ""
    for i, p in enumerate(parts):
        if isinstance(p, int):
            out += f"[{p}]"
        elif p in ("function-after", "function-before", "list", "tuple") or (
            i > 0 and p in TAGGED_UNIONS.get(str(parts[i - 1]), ())
        ):
            continue
        else:
            out += ("." if out else "") + str(p)
    return out or "body"


def _error_field(err: dict[str, Any]) -> str:
    # invalid JSON has no field: its location holds the character offset, not an index into a list
    return "body" if err.get("type") == "json_invalid" else field_path(err.get("loc", ()))


def _validation_message(err: dict[str, Any]) -> str:
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if err.get("type") == "json_invalid":
        loc = err.get("loc", ())
        at = f" at character {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        return f"the body is not valid JSON{at} ({ctx.get('error', msg)})"
    return msg


MAX_DETAILS = 20  # an error body lists at most this many problems, however many the request had


def validation_summary(errors: Sequence[Any]) -> tuple[str, str, list[dict[str, Any]]]:
    """A validation error's 422 parts: the message (the first problem, and how many more), its field, and at
    most MAX_DETAILS details. For pydantic's errors, locations counted from the body or from the request."""
    details = [
        {"field": _error_field(e), "message": _validation_message(e), "type": e.get("type")}
        for e in errors[:MAX_DETAILS]
    ]
    first = details[0] if details else {"field": "body", "message": "invalid request"}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first['field']}: {first['message']}{more}", str(first["field"]), details


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError) -> Response:
        message, field, details = validation_summary(exc.errors())
        return error_response(request, 422, "invalid_request", message, field, details)

    @app.exception_handler(InputError)
    async def on_input(request: Request, exc: InputError) -> Response:
        return error_response(request, 422, exc.code, f"{exc.field}: {exc.message}", exc.field, exc.details())

    @app.exception_handler(ApiError)
    async def on_api(request: Request, exc: ApiError) -> Response:
        message = f"{exc.field}: {exc.message}" if exc.field else exc.message
        return error_response(request, exc.status, exc.code, message, exc.field, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        message = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404:
            message = f"no such path: {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        return error_response(request, exc.status_code, codes.get(exc.status_code, "http_error"), message)


class Unexpected:
    """An exception no handler knows becomes the one error shape with a 500, logged once here with its request id.

    (An `Exception` handler would not do: Starlette calls it and then raises the exception again for the server,
    which logs the same traceback a second time.)
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except BaseException as err:
            if not isinstance(err, Exception) and not is_panic(err):  # a cancellation or an exit: not an error
                raise
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if started:  # part of an answer has gone out: nothing else can be sent on it
                return
            request = Request(scope)
            answer = error_response(
                request, 500, "internal_error", "attnlab hit an unexpected error; it has been logged"
            )
            await answer(scope, receive, send)


def answered_error(exc: ApiError | InputError) -> dict[str, Any]:
    """The one error shape's body for an error met after an answer has started (a streamed answer's error frame),
    worded as the handlers above word it."""
    if isinstance(exc, InputError):
        return error_body(422, exc.code, f"{exc.field}: {exc.message}", exc.field, exc.details())
    return error_body(exc.status, exc.code, f"{exc.field}: {exc.message}" if exc.field else exc.message, exc.field)
