"""Token pieces people can read, from a Hugging Face tokenizer.json (the tokenizers library).

    encode(text)    ids as Hugging Face encodes them (special tokens added by the tokenizer's post-processor),
                    each piece's readable text, and which pieces are special tokens
    labels(ids)     the readable text of each piece: byte-level BPE pieces ("Ġthe", "Ċ") decoded to the text
                    they stand for (" the", "\n"); SentencePiece's "▁" a space; WordPiece pieces as they are
    ids_for(tokens) the ids of pieces given back as answered (readable) or as raw vocabulary strings

The page draws a label's leading space and newlines visibly; here they stay the text itself, so a script reads
the pieces of its text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from tokenizers import Tokenizer


@cache
def byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the other
    bytes (controls, space, soft hyphen...) take the code points from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    kept = set(printable)
    alphabet = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in kept:
            alphabet[chr(256 + extra)] = b
            extra += 1
    return alphabet


@dataclass(frozen=True)
class Pieces:
    ids: list[int]
    labels: list[str]
    special: list[bool]


class TokenPieces:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
        self.by_id: dict[int, str] = {i: t for t, i in self.vocab.items()}
        self.special_ids: frozenset[int] = frozenset(
            int(i) for i, added in tokenizer.get_added_tokens_decoder().items() if added.special
        )
        self.byte_level = "ByteLevel" in _component_names(tokenizer)
        self._readable: dict[str, int] | None = None

    def piece_bytes(self, token: str) -> bytes | None:
        """The bytes a byte-level piece stands for; None where the piece is not byte-level text."""
        alphabet = byte_alphabet()
        if not self.byte_level or any(ch not in alphabet for ch in token):
            return None
        return bytes(alphabet[ch] for ch in token)

    def label(self, token_id: int) -> str:
        token = self.by_id.get(token_id, "")
        if token_id in self.special_ids:
            return token
        raw = self.piece_bytes(token)
        if raw is not None:
            return raw.decode("utf-8", errors="replace")
        return token.replace("▁", " ")

    def labels(self, ids: list[int]) -> list[str]:
        return [self.label(i) for i in ids]

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def encode(self, text: str) -> Pieces:
        enc = self.tokenizer.encode(text, add_special_tokens=True)
        ids = list(enc.ids)
        return Pieces(ids, self.labels(ids), [self.is_special(i) for i in ids])

    def ids_for(self, tokens: list[str]) -> tuple[list[int], list[tuple[int, str]]]:
        """Ids of `tokens`, each a readable label or a raw vocabulary string; unknown ones as (position, given)."""
        if self._readable is None:
            readable: dict[str, int] = {}
            for i in sorted(self.by_id):
                readable.setdefault(self.label(i), i)
            self._readable = readable
        ids, unknown = [], []
        for pos, t in enumerate(tokens):
            found = self.vocab.get(t, self._readable.get(t))
            if found is None:
                unknown.append((pos, t))
            else:
                ids.append(found)
        return ids, unknown


def _component_names(tokenizer: Tokenizer) -> str:
    """The tokenizer's pre-tokenizer and decoder as one JSON string, to look a component's type name up in."""
    spec = json.loads(tokenizer.to_str())
    return json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
