"""Errors the engine raises for input a caller can fix.

Each carries the field it concerns, so a web layer can name it without parsing text.
"""

from __future__ import annotations


class InputError(ValueError):
    """Input that cannot be computed as given: names the field and the limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class AllMaskedRowsError(InputError):
    """Query rows with no eligible key under the `error` policy."""

    def __init__(self, rows: list[int]) -> None:
        shown = ", ".join(str(r) for r in rows[:20]) + (" ..." if len(rows) > 20 else "")
        super().__init__(
            "masks",
            f"query rows {shown} have no eligible key after masking; unmask a key for each, "
            "or set all_masked to 'zero' to return zero weights and contexts for them",
        )
        self.rows = rows


class NonFiniteError(InputError):
    """A computation overflowed the dtype (scores of inf, say)."""
