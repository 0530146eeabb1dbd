"""The one exception a caller of attnlab catches: the server's error shape, as a Python exception."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the attnlab API reported (or, for attnlab.run, would have reported): the fields of
    {"error": {"status", "code", "field", "message", "details"}}, e.g. 422 too_large on field "text"."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.details = details or []

    @classmethod
    def from_body(cls, status: int, body: Any, text: str = "") -> ApiError:
        """From an error response's JSON; an answer not in that shape (a proxy's HTML page) keeps its text."""
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict) or not isinstance(err.get("message"), str):
            return cls(status, "http_error", f"HTTP {status}: {text[:300] or 'no error body'}")
        return cls(
            int(err.get("status", status)),
            str(err.get("code", "http_error")),
            err["message"],
            err.get("field"),
            err.get("details") or [],
        )
