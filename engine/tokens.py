"""Token pieces people can read, from a Hugging Face tokenizer.json (the tokenizers library).

    encode(text)    ids as Hugging Face encodes them (special tokens added by the tokenizer's post-processor),
                    each piece's readable text, and which pieces are special tokens
    labels(ids)     the readable text of each piece: byte-level BPE pieces ("Ġthe", "Ċ") decoded to the text
                    they stand for (" the", "\n"); SentencePiece's "▁" a space and its byte pieces ("<0xE4>")
                    bytes; WordPiece pieces as they are ("##ing"); special tokens as written ("<s>")
    ids_for(tokens) the ids of pieces given back as answered (readable) or as raw vocabulary strings ("Ġthe")

A character whose UTF-8 bytes are split over several pieces (a CJK character or an emoji in a small vocabulary) is
shown whole on the piece where it starts; each following piece that holds more of its bytes starts with one
CONTINUED mark per byte it holds ("你", "◌◌" for a 3-byte character split 1 + 2), so no label holds half a character
(never U+FFFD) and the split is still exact: ids_for reads the marks back into bytes. Bytes that are no UTF-8 at all
(a sequence cut in the middle of a character) read "<0xE4>", as SentencePiece writes a byte.

The page draws a label's leading space, newlines and tabs visibly; here they stay the text itself, so a script
reads the pieces of its text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache

from tokenizers import Encoding, Tokenizer

from engine.errors import InputError, is_panic

CONTINUED = "◌"  # U+25CC: one byte of the character the piece before started
SHOWN = {"␣": " ", "↵": "\n", "→": "\t", "∅": ""}  # the page's marks for what would not show (static/js/piece.js)
HEX_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizerFailed(InputError):
    """The tokenizer's own code failed on a text. The tokenizers library raises PanicException where its Rust code
    panics (a normaliser's Replace before a BertNormalizer, say): a BaseException, which `except Exception` lets by
    up to the server, so each call that tokenises goes through `encode` below."""

    def __init__(self, field: str, err: BaseException) -> None:
        super().__init__(field, f"the model's tokenizer failed on this text ({str(err)[:200]}): change the text")


def encode(tokenizer: Tokenizer, text: str, field: str = "text", add_special_tokens: bool = True) -> Encoding:
    """`tokenizer.encode(text)`; a panic in the tokenizer is a TokenizerFailed naming `field`."""
    try:
        return tokenizer.encode(text, add_special_tokens=add_special_tokens)
    except BaseException as err:
        if not is_panic(err):  # KeyboardInterrupt, SystemExit and the rest go on as they are
            raise
        raise TokenizerFailed(field, err) from None


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


def utf8_chars(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, text) of each character in `data`; a byte that starts no valid UTF-8 character is its own
    item, written "<0xNN>"."""
    out, i = [], 0
    while i < len(data):
        b = data[i]
        n = 1 if b < 0x80 else 2 if 0xC2 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF5 else 0
        if n:
            try:
                out.append((i, i + n, data[i : i + n].decode("utf-8")))
                i += n
                continue
            except UnicodeDecodeError:
                pass
        out.append((i, i + 1, f"<0x{b:02X}>"))
        i += 1
    return out


def text_bytes(text: str, hex_bytes: bool) -> bytes:
    """A label's text as bytes; "<0xNN>" read as that byte when `hex_bytes`."""
    if not hex_bytes:
        return text.encode("utf-8")
    parts, last = [], 0
    for m in HEX_BYTE.finditer(text):
        parts += [text[last : m.start()].encode("utf-8"), bytes([int(m.group(1), 16)])]
        last = m.end()
    return b"".join([*parts, text[last:].encode("utf-8")])


class TokenPieces:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=True)
        self.by_id: dict[int, str] = {i: t for t, i in self.vocab.items()}
        added = tokenizer.get_added_tokens_decoder()
        self.added: dict[str, int] = {a.content: int(i) for i, a in added.items()}
        self._added_ids = frozenset(self.added.values())
        self.special_ids: frozenset[int] = frozenset(int(i) for i, a in added.items() if a.special)
        spec = json.loads(tokenizer.to_str())
        parts = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder"), spec.get("normalizer")], ensure_ascii=False)
        self.byte_level = '"ByteLevel"' in parts
        self.metaspace = "▁" in parts  # SentencePiece: "▁" stands for a space
        self.byte_fallback = bool((spec.get("model") or {}).get("byte_fallback")) or '"ByteFallback"' in parts
        self._by_bytes: dict[bytes, int] | None = None

    def piece_bytes(self, token: str) -> bytes | None:
        """The bytes a piece stands for; None where the piece is not text of bytes (WordPiece, added tokens)."""
        if self.byte_level:
            alphabet = byte_alphabet()
            if all(ch in alphabet for ch in token):
                return bytes(alphabet[ch] for ch in token)
            return None
        if self.byte_fallback and HEX_BYTE.fullmatch(token):
            return bytes([int(token[3:5], 16)])
        if self.metaspace:
            return token.replace("▁", " ").encode("utf-8")
        return None

    def _bytes_of(self, token_id: int) -> bytes | None:
        if token_id in self._added_ids or token_id not in self.by_id:
            return None
        return self.piece_bytes(self.by_id[token_id])

    def labels(self, ids: list[int]) -> list[str]:
        """Each piece's readable text; a run of byte pieces is decoded together, so a character split over
        pieces is shown whole where it starts and as CONTINUED marks on the pieces that hold the rest."""
        out: list[str] = [""] * len(ids)
        run: list[tuple[int, bytes]] = []  # (position, bytes) of the byte pieces since the last other piece

        def flush() -> None:
            data = b"".join(b for _, b in run)
            starts = [0]
            for _, b in run:
                starts.append(starts[-1] + len(b))
            chars = utf8_chars(data)  # in byte order: one walk over them and the pieces together
            c = 0
            for k, (pos, _) in enumerate(run):
                lo, hi = starts[k], starts[k + 1]
                while c < len(chars) and chars[c][1] <= lo:
                    c += 1
                held = 0
                if c < len(chars) and chars[c][0] < lo:  # bytes of a character begun before this piece
                    held = min(chars[c][1], hi) - lo
                    c += 1 if chars[c][1] <= hi else 0
                text = []
                while c < len(chars) and lo <= chars[c][0] < hi:
                    text.append(chars[c][2])
                    if chars[c][1] > hi:  # it goes on into the next piece, which holds more of its bytes
                        break
                    c += 1
                out[pos] = CONTINUED * held + "".join(text)
            run.clear()

        for pos, token_id in enumerate(ids):
            raw = self._bytes_of(token_id)
            if raw is None:
                flush()
                out[pos] = self.by_id.get(token_id, "")
            else:
                run.append((pos, raw))
        flush()
        return out

    def label(self, token_id: int) -> str:
        """One piece's text read alone; a piece that is whole UTF-8 is its text (the quick path of a vocabulary); an
        id the tokenizer has no piece for (an embedding matrix wider than the tokenizer) reads ""."""
        if token_id not in self.by_id:
            return ""
        raw = self._bytes_of(token_id)
        if raw is not None:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                if CONTINUED not in text[:1]:
                    return text
        return self.labels([token_id])[0]

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def encode(self, text: str) -> Pieces:
        enc = encode(self.tokenizer, text)
        ids = list(enc.ids)
        return Pieces(ids, self.labels(ids), [self.is_special(i) for i in ids])

    def by_bytes(self) -> dict[bytes, int]:
        """Each byte string's piece; a SentencePiece byte piece only where no other piece holds that byte."""
        if self._by_bytes is None:
            found: dict[bytes, int] = {}
            fallback: dict[bytes, int] = {}
            for i in sorted(self.by_id):
                raw = self._bytes_of(i)
                if raw is not None:
                    (fallback if self.byte_fallback and HEX_BYTE.fullmatch(self.by_id[i]) else found).setdefault(raw, i)
            self._by_bytes = {**fallback, **found}
        return self._by_bytes

    def ids_for(self, tokens: list[str]) -> tuple[list[int], list[tuple[int, str]]]:
        """Ids of `tokens`, each a readable label (as answered), a raw vocabulary string, or a label as the page
        shows it ("␣the", "↵"); unknown ones as (position, given). Labels are read back as bytes together, so
        CONTINUED marks give a split character's bytes back to the pieces that held them."""
        ids, unknown = self._ids_for(tokens)
        if not unknown:
            return ids, unknown
        # a label the page showed: its marks read as what they stand for, where the label as given is no piece
        retry = list(tokens)
        for pos, t in unknown:
            retry[pos] = "".join(SHOWN.get(ch, ch) for ch in t)
        again, still = self._ids_for(retry)
        if len(still) < len(unknown):
            return again, [(pos, tokens[pos]) for pos, _ in still]
        return ids, unknown

    def _ids_for(self, tokens: list[str]) -> tuple[list[int], list[tuple[int, str]]]:
        found: list[int | None] = [self.added.get(t) for t in tokens]
        if self.byte_level or self.metaspace or self.byte_fallback:
            for hex_bytes in (True, False):
                pieces = self._read_bytes(tokens, found, hex_bytes)
                table = self.by_bytes()
                for pos, raw in enumerate(pieces):
                    if found[pos] is None and raw is not None and raw in table:
                        found[pos] = table[raw]
        ids, unknown = [], []
        for pos, t in enumerate(tokens):
            got = found[pos] if found[pos] is not None else self.vocab.get(t)
            if got is None:
                unknown.append((pos, t))
            else:
                ids.append(got)
        return ids, unknown

    def _read_bytes(self, tokens: list[str], fixed: list[int | None], hex_bytes: bool) -> list[bytes | None]:
        """Each label's bytes: its text after its CONTINUED marks, plus the marked bytes taken back from the
        character the pieces before began. None where the marks do not fit."""
        pieces: list[bytes | None] = [None] * len(tokens)
        owner: tuple[int, bytes] | None = None  # (position, bytes) of the last character a label began
        chain: list[tuple[int, int]] = []  # (position, marks) of the labels continuing it

        def settle() -> None:
            if owner is None or not chain:
                chain.clear()
                return
            j, char = owner
            total = sum(c for _, c in chain)
            head = pieces[j]
            if total >= len(char) or head is None:
                for k, _ in chain:
                    pieces[k] = None
            else:
                pieces[j], offset = head[: len(head) - total], len(char) - total
                for k, c in chain:
                    rest = pieces[k]
                    pieces[k] = None if rest is None else char[offset : offset + c] + rest
                    offset += c
            chain.clear()

        for pos, t in enumerate(tokens):
            if fixed[pos] is not None:
                settle()
                owner = None
                continue
            marks = len(t) - len(t.lstrip(CONTINUED))
            rest = t[marks:]
            pieces[pos] = text_bytes(rest, hex_bytes)
            if marks:
                chain.append((pos, marks))
            if rest:
                settle()
                last = utf8_chars(pieces[pos] or b"")
                owner = (pos, (pieces[pos] or b"")[last[-1][0] :]) if last else None
            elif not marks:
                settle()
                owner = None
        settle()
        return pieces
