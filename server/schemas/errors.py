"""The one error shape (server.errors.error_body) as OpenAPI documents it, and the statuses each kind of route answers
with it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorDetail(BaseModel):
    """One problem of the request; a kind of problem may add its own facts (`rows`: the query rows with no
    eligible key)."""

    model_config = ConfigDict(extra="allow")

    field: str
    message: str
    type: str | None = None


class ErrorOut(BaseModel):
    status: int = Field(description="the HTTP status, again")
    code: str = Field(description="machine-readable: invalid_request, too_large, busy, ...")
    field: str | None = Field(description="the field, header or setting the error concerns (masks.window, body)")
    message: str = Field(description="what went wrong, with the real numbers and the limit's setting")
    details: list[ErrorDetail] = Field(description="every problem found (at most 20), each with its field")


class ErrorResponse(BaseModel):
    error: ErrorOut


WHY = {
    400: "the Host header is not one this server answers to (ATTNLAB_ALLOWED_HOSTS)",
    403: "a cross-site request (Sec-Fetch-Site: cross-site): the API answers this server's page and scripts",
    404: "no such thing on this server",
    408: "the body did not arrive within ATTNLAB_READ_TIMEOUT_S",
    413: "the body is larger than ATTNLAB_MAX_BODY_BYTES",
    415: "the body is not plain JSON (a Content-Type other than application/json, or a Content-Encoding)",
    409: "the thing asked for is not ready yet (a run with no snapshot to export)",
    422: "the body is invalid, or asks for more than this server's limits allow (the field and the limit named)",
    429: "too many training runs under way at once (ATTNLAB_TRAIN_MAX_RUNS); try again after Retry-After seconds",
    503: "busy: every compute slot or connection is taken; try again after Retry-After seconds",
}
ANY_ROUTE = (400, 503)  # the middlewares answer these before any route runs
BODY = (403, 408, 413, 415, 422)  # and these for a POST under /api, whose body they read


def errors(*statuses: int, ref: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for `statuses` in the one error shape. `ref`: name the schema's component instead of
    the model, for a route whose own answer is not JSON (FastAPI puts a model under the route's media type)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(statuses):
        if ref:
            schema = {"$ref": "#/components/schemas/ErrorResponse"}
            out[status] = {"description": WHY[status], "content": {"application/json": {"schema": schema}}}
        else:
            out[status] = {"description": WHY[status], "model": ErrorResponse}
    return out


COMPUTE_ERRORS = errors(*ANY_ROUTE, *BODY)
