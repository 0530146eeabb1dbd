"""Errors the engine raises for input a caller can fix.

Each carries the field it concerns, so a web layer can name it without parsing text.
"""

from __future__ import annotations

from typing import Any


def is_panic(err: BaseException) -> bool:
    """A panic in a Rust extension (the tokenizers library's PanicException, from pyo3): a BaseException, so
    `except Exception` lets it by, yet a failure like any other, unlike KeyboardInterrupt or SystemExit."""
    return type(err).__module__ == "pyo3_runtime"


class InputError(ValueError):
    """Input that cannot be computed as given: names the field and the limit."""

    code = "invalid_input"  # the API's error code for it

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def details(self) -> list[dict[str, Any]]:
        """Structured facts a client can act on without reading the message."""
        return []


class AllMaskedRowsError(InputError):
    """Query rows with no eligible key under the `error` policy."""

    def __init__(self, rows: list[int], where: str = "") -> None:
        """`where`: the words that place it, after "masking" (" in layer 0, whose own window ..."), if any."""
        shown = ", ".join(str(r) for r in rows[:20]) + (" ..." if len(rows) > 20 else "")
        super().__init__(
            "masks",
            f"query rows {shown} have no eligible key after masking{where}; unmask a key for each, "
            "or set all_masked to 'zero' to return zero weights and contexts for them",
        )
        self.rows = rows

    code = "no_eligible_key"

    def details(self) -> list[dict[str, Any]]:
        return [{"field": "masks", "message": self.message, "type": self.code, "rows": self.rows}]


class NonFiniteError(InputError):
    """A computation overflowed the dtype (scores of inf, say)."""
