"""How much longer a tokenizer's normaliser may make a text, so that the work before a token count is bounded.

A tokenizer.json's normaliser runs over the whole text before a single piece can be counted: a Replace of "a" by
100,000 "b"s made 10,000,000 characters of a 100-character text (6 s, +652 MB) before the token limit refused it.
Two bounds keep that work in proportion to the text:

    at load    refusal(normalizer)        the growth its spec allows (each Replace's content over its pattern and
                                          each Prepend, multiplied through a Sequence: read, nothing run) is at
                                          most EXPANSION, and then each PROBE character, normalised alone, gives
                                          at most EXPANSION characters (the Unicode forms, case, a precompiled map)
    per text   check_length(normalizer,   the text normalised in pieces of PIECE characters, stopping once past
               text, field)               limit(len(text)) = EXPANSION x len(text) + SLACK: no normalised text
                                          longer than that plus one piece's is built before the refusal

Real tokenizers lengthen text by a character or two at most (a "▁" before a word, spaces round a CJK character);
a character that some Unicode form spells with many (NFKC writes U+FDFA with 18) passes the load check, which
probes a sample, and is what the per-text bound is for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tokenizers.normalizers import Normalizer

from engine.errors import InputError, is_panic

EXPANSION = 8  # characters a normaliser may make of one character
SLACK = 64  # characters more per text: a Prepend's mark before a short text
PIECE = 1024  # characters normalised at a time by check_length
# characters normalised one by one at load: printable ASCII, Latin-1, and a few that Unicode forms spell with more
PROBE = "".join(chr(c) for c in [*range(0x20, 0x7F), *range(0xA0, 0x100)]) + "ﬁﬃ…½²Ａ한中ǅ"


def growth(spec: Mapping[str, Any]) -> float:
    """The most characters one character can become under the spec's Replace and Prepend steps (1 for the other
    kinds, whose growth the Unicode tables bound): a String pattern's content over its length, a Regex pattern's
    content once more (it may match nothing, between every two characters), a Prepend's text once more."""
    kind = spec.get("type")
    if kind == "Sequence":
        return math.prod(growth(step) for step in spec.get("normalizers") or [] if isinstance(step, Mapping))
    if kind == "Replace":
        pattern = spec.get("pattern") or {}
        content = len(str(spec.get("content", "")))
        matched = pattern.get("String") if isinstance(pattern, Mapping) else None
        if isinstance(matched, str) and matched:
            return max(1.0, content / len(matched))
        return 1.0 + content
    if kind == "Prepend":
        return 1.0 + len(str(spec.get("prepend", "")))
    return 1.0


def refusal(normalizer: Normalizer | None) -> str | None:
    """Why a tokenizer with this normaliser cannot be served (its growth past EXPANSION), or None."""
    if normalizer is None:
        return None
    spec = json.loads(normalizer.__getstate__())
    bound = growth(spec)
    if bound > EXPANSION:
        return (
            f"its steps can make {bound:,.0f} characters of one (a Replace's content over its pattern, a Prepend), "
            f"past attnlab's limit of {EXPANSION}"
        )
    for ch in PROBE:  # bounded now: the steps above lengthen a character at most EXPANSION times
        try:
            made = len(normalizer.normalize_str(ch))
        except BaseException as err:  # a panic in its Rust code is a BaseException (pyo3_runtime.PanicException)
            if not is_panic(err):
                raise
            return f"it fails on {ch!r} ({str(err)[:200]})"
        if made > EXPANSION:
            return f"it makes {made:,} characters of {ch!r}, past attnlab's limit of {EXPANSION}"
    return None


def limit(n_chars: int) -> int:
    """The most characters a text of `n_chars` may become when normalised."""
    return EXPANSION * n_chars + SLACK


def check_length(normalizer: Normalizer | None, text: str, field: str = "text") -> None:
    """An InputError naming `field` where the normalised text would pass limit(len(text)), found by normalising the
    text a PIECE at a time and stopping there, before the whole of it is built or tokenised."""
    if normalizer is None:
        return
    most = limit(len(text))
    made = 0
    for start in range(0, len(text), PIECE):
        try:
            made += len(normalizer.normalize_str(text[start : start + PIECE]))
        except BaseException as err:  # a panic in its Rust code is a BaseException (pyo3_runtime.PanicException)
            if not is_panic(err):
                raise
            raise InputError(field, f"the model's tokenizer failed on this text ({str(err)[:200]})") from None
        if made > most:
            raise InputError(
                field,
                f"the model's tokenizer normalises these {len(text):,} characters to more than {most:,}, its limit "
                f"({EXPANSION} per character + {SLACK}): leave out the characters it lengthens, or shorten the text",
            )
