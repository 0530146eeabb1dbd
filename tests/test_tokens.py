"""engine/tokens.py: readable pieces from tokenizer.json, characters split over pieces shown whole, special tokens
flagged, and every answered label read back to the same id."""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers

from engine.tokens import CONTINUED, TokenPieces, utf8_chars
from tests.checkpoints import tokenizer_for

# CJK, Hebrew, Arabic, emoji (one with a skin-tone modifier), accents, newlines, tabs, a run of spaces
TEXT = "The key 你好世界 opens\n\tשלום עולם, مرحبا 😀👍🏽 done é ñ\r\n  x\t\ty"
BYTE_LEVEL = ("gpt2", "llama", "qwen2", "roberta")


@pytest.fixture(scope="module")
def pieces() -> dict[str, TokenPieces]:
    return {family: TokenPieces(tokenizer_for(family)) for family in (*BYTE_LEVEL, "bert")}


def sentencepiece_tokenizer() -> Tokenizer:
    """A LLaMA-style tokenizer: "▁" for a space, a few merged pieces, and byte pieces <0x00>..<0xFF> for the rest."""
    words = ["<unk>", "<s>", "</s>", "▁", "▁the", "▁key", "e", "h", "k", "t", "y", "x", "▁o", "pens", "é"]
    vocab = {w: i for i, w in enumerate(words)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "k"), ("e", "y"), ("▁k", "ey")]
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


@pytest.mark.parametrize("family", [*BYTE_LEVEL, "bert"])
def test_answered_labels_read_back_to_the_same_ids(pieces: dict[str, TokenPieces], family: str) -> None:
    p = pieces[family].encode(TEXT)
    ids, unknown = pieces[family].ids_for(p.labels)
    assert unknown == []
    assert ids == p.ids


@pytest.mark.parametrize("family", BYTE_LEVEL)
def test_byte_level_labels_are_the_text(pieces: dict[str, TokenPieces], family: str) -> None:
    p = pieces[family].encode(TEXT)
    text = "".join(lab.lstrip(CONTINUED) for lab, special in zip(p.labels, p.special, strict=True) if not special)
    assert text == TEXT
    shown = "".join(p.labels)
    for raw in ("Ġ", "Ċ", "ĉ", "\ufffd", "ä½"):
        assert raw not in shown


def test_a_split_character_is_whole_where_it_starts(pieces: dict[str, TokenPieces]) -> None:
    tp = pieces["gpt2"]
    p = tp.encode("你")
    assert len(p.ids) == 3  # the small vocabulary holds the character as its three bytes
    assert p.labels == ["你", CONTINUED, CONTINUED]
    # each mark stands for one byte the piece holds; the bytes are the character's, in order
    assert p.ids == [tp.by_bytes()[b] for b in (b"\xe4", b"\xbd", b"\xa0")]
    assert tp.ids_for(p.labels) == (p.ids, [])


def reference_labels(tp: TokenPieces, ids: list[int]) -> list[str]:
    """The rule written out for byte pieces alone: a piece's marks are the bytes it holds of a character begun
    before it, its text the characters that begin in it."""
    raw = [tp.piece_bytes(tp.by_id[i]) or b"" for i in ids]
    starts = [sum(len(b) for b in raw[:k]) for k in range(len(raw) + 1)]
    chars = utf8_chars(b"".join(raw))
    out = []
    for k in range(len(ids)):
        lo, hi = starts[k], starts[k + 1]
        held = sum(min(e, hi) - lo for s, e, _ in chars if s < lo < e)
        out.append(CONTINUED * held + "".join(t for s, _, t in chars if lo <= s < hi))
    return out


def test_labels_follow_the_rule_on_any_sequence(pieces: dict[str, TokenPieces]) -> None:
    tp = pieces["gpt2"]
    byte_ids = [i for i in tp.by_id if i not in tp.special_ids]
    text_ids = tp.encode(TEXT).ids
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 5, 40):
        for _ in range(50):  # random pieces, and random stretches of a real text's (cut anywhere)
            ids = [byte_ids[int(j)] for j in torch.randint(len(byte_ids), (n,), generator=g)]
            at = int(torch.randint(len(text_ids), (1,), generator=g))
            for seq in (ids, text_ids[at : at + n]):
                labels = tp.labels(seq)
                assert labels == reference_labels(tp, seq)
                assert tp.ids_for(labels) == (seq, [])


def test_a_sequence_cut_inside_a_character_shows_the_byte(pieces: dict[str, TokenPieces]) -> None:
    tp = pieces["gpt2"]
    ids = tp.encode("a 😀").ids[:-1]  # the emoji's last byte left out: what is left is no character
    labels = tp.labels(ids)
    assert "\ufffd" not in "".join(labels)
    assert labels[-3:] == ["<0xF0>", "<0x9F>", "<0x98>"]
    assert tp.ids_for(labels) == (ids, [])


def test_raw_vocabulary_strings_are_accepted(pieces: dict[str, TokenPieces]) -> None:
    tp = pieces["gpt2"]
    p = tp.encode("The key opens\nthe door")
    raw = [tp.by_id[i] for i in p.ids]
    assert any(r.startswith("Ġ") for r in raw)
    assert tp.ids_for(raw) == (p.ids, [])


def test_labels_as_the_page_shows_them_are_accepted(pieces: dict[str, TokenPieces]) -> None:
    tp = pieces["gpt2"]
    p = tp.encode("The key opens\n\tthe door")
    shown = [t.replace(" ", "␣").replace("\n", "↵").replace("\t", "→") for t in p.labels]
    assert shown != p.labels
    assert tp.ids_for(shown) == (p.ids, [])


def test_unknown_pieces_are_named_by_position(pieces: dict[str, TokenPieces]) -> None:
    ids, unknown = pieces["bert"].ids_for(["the", "zzzqqq", "key"])
    assert unknown == [(1, "zzzqqq")]
    assert ids == [pieces["bert"].vocab["the"], pieces["bert"].vocab["key"]]


@pytest.mark.parametrize(("family", "first", "last"), [("bert", "[CLS]", "[SEP]"), ("roberta", "<s>", "</s>")])
def test_special_tokens_are_flagged(pieces: dict[str, TokenPieces], family: str, first: str, last: str) -> None:
    p = pieces[family].encode("the key")
    assert (p.labels[0], p.labels[-1]) == (first, last)
    assert p.special[0] and p.special[-1]
    assert not any(p.special[1:-1])


def test_sentencepiece_spaces_and_byte_pieces() -> None:
    tp = TokenPieces(sentencepiece_tokenizer())
    p = tp.encode("the key opens 你 é")
    raw = [tp.by_id[i] for i in p.ids]
    assert "<0xE4>" in raw  # 你 is not in the vocabulary: three byte pieces
    assert p.labels[:2] == [" the", " key"]
    at = raw.index("<0xE4>")
    assert p.labels[at : at + 3] == ["你", CONTINUED, CONTINUED]
    assert "é" in p.labels  # a piece of its own, not its two bytes
    assert tp.ids_for(p.labels) == (p.ids, [])


def test_one_piece_read_alone_is_labels_of_that_piece(pieces: dict[str, TokenPieces]) -> None:
    """label(id), the quick path a vocabulary is read with, gives what labels([id]) gives, for every id of every
    tokenizer here and of a SentencePiece one with byte pieces (where a lone byte piece reads <0xNN>)."""
    every = {**pieces, "sentencepiece": TokenPieces(sentencepiece_tokenizer())}
    for name, tp in every.items():
        wrong = [i for i in sorted(tp.by_id) if tp.label(i) != tp.labels([i])[0]]
        assert wrong == [], (name, wrong[:5])
