"""What a model family declares once, and everything else reads: the input fields it reads, what it can do, and
where its weights come from.

    reads          which of the request's input fields the model reads; any other one given is refused (a 422
                   naming it), by the one check in AttentionModel.encode
    capabilities   decode (one position at a time with a KV cache), batches (a batch of texts), cross_attention
                   (keys and values from a source sequence), predicts_tokens (logits over a vocabulary)
    breaks         the assumptions of attnlab's statistics that do not hold for the model (engine/stats.py
                   ASSUMPTIONS), each with why: those statistics are null for it, with the reason
    ModelSource    what a family's builder reads its weights from (a checkpoint directory); None: its own default

GET /api/models serves reads and capabilities as declared; error messages that point to other models are built
from the declarations of the families attnlab knows (KNOWN below, which is `engine.models.FAMILIES`), never written
out by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

InputField = Literal["text", "tokens", "x", "weights", "options", "scores", "pattern", "values", "pixels"]
INPUT_FIELDS: tuple[InputField, ...] = (
    "text",
    "tokens",
    "x",
    "weights",
    "options",
    "scores",
    "pattern",
    "values",
    "pixels",
)
# the request's head counts say how given weights split into heads: only a model that reads weights reads them
HEAD_COUNTS = ("heads", "kv_heads")


@dataclass(frozen=True)
class Capabilities:
    decode: bool = True  # decodes position by position with a KV cache (False: an encoder reads it all at once)
    batches: bool = True  # takes a batch of texts, padded to the longest
    cross_attention: bool = True  # keys and values may come from a source sequence
    predicts_tokens: bool = False  # unembeds: next-token logits over a vocabulary

    def as_dict(self) -> dict[str, bool]:
        return {
            "decode": self.decode,
            "batches": self.batches,
            "cross_attention": self.cross_attention,
            "predicts_tokens": self.predicts_tokens,
        }


@dataclass(frozen=True)
class ModelSource:
    """Where a builder reads a family's weights from: a checkpoint directory."""

    directory: Path


def listed(names: Iterable[str]) -> str:
    """'a', 'a or b', 'a, b or c': model names for a message, sorted."""
    names = sorted(names)
    if len(names) <= 1:
        return "".join(names) or "none"
    return f"{', '.join(names[:-1])} or {names[-1]}"


# Every family attnlab knows, by name: the registry (engine/models/__init__.py) fills this very table as its FAMILIES
# when it is imported. A package's __init__ runs before any module in it, so the table is whole before any model
# exists to refuse an input with it; this module imports no model module.
KNOWN: dict[str, Any] = {}


def which(test: Callable[[Capabilities, frozenset[InputField]], bool]) -> str:
    """The families attnlab knows that pass `test` (on their capabilities and reads), for a message."""
    return listed(name for name, f in KNOWN.items() if test(f.capabilities, f.reads))


def reading(field: str) -> str:
    """The families that read `field`, for a message: 'custom, random or textbook'."""
    return which(lambda _caps, reads: field in reads)


def able(capability: str) -> str:
    """The families with `capability` (a Capabilities field name), for a message."""
    return which(lambda caps, _reads: bool(getattr(caps, capability)))
