"""The lab's tasks: each a vocabulary, seeded training batches, a fixed held-out set and a fixed probe.

    induction  rows of one random segment of words repeated to the end (its length varies by row, from
               positions // 8 to positions // 2): after the first copy every word is predictable, but only by
               finding the current word's earlier occurrence and reading the word after it (two layers: a
               previous-token head, then an induction head); a position offset does not do it, the length varies
    copy       words x, "=", x again: the second x is predictable by reading a fixed distance back (a diagonal)
    reverse    words x, "=", x reversed: predictable by reading back across the "=" (an anti-diagonal)
    brackets   balanced (), [] and {} with words between: which bracket closes next follows from the one that opened
    text       next-token on the running Python's standard library source, with pycode's byte-level BPE tokenizer
               (engine/checkpoints/pycode/tokenizer.json, 2,048 pieces); textwrap.py and the other HELD_OUT files of
               engine/train_pycode.py are kept out of training and are the held-out set and the probe

A Batch is tokens (B, T) and which next-token targets count (B, T - 1) (copy and reverse count the second x only;
None: every target). The probe is one sequence of `positions` tokens, the same for every run of the task at that
length, drawn from fixed seeds: the induction probe is one random segment twice (segment_len = positions // 2); the
other tasks' probes are a held-out row, and their induction score is read on a second probe of that kind.
Everything here is data: no model, no spec.
"""

from __future__ import annotations

import functools
import json
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
from torch import Tensor

from engine.analysis.brackets import bracket_pairs
from engine.train_induction import VOCAB

TASKS = ("induction", "copy", "reverse", "brackets", "text")
WORDS: tuple[str, ...] = VOCAB[:48]  # the synthetic tasks' words: short English words, no bracket in any
SEPARATOR = "="
BRACKETS = ("(", ")", "[", "]", "{", "}")
UNKNOWN = "[UNK]"  # a word typed into another view that is not in the vocabulary
SYNTHETIC: tuple[str, ...] = (*WORDS, SEPARATOR, *BRACKETS, UNKNOWN)
TEXT_TOKENIZER = Path(__file__).resolve().parents[1] / "checkpoints" / "pycode" / "tokenizer.json"
TEXT_VOCAB = 2048  # pieces in TEXT_TOKENIZER (a test checks)
TEXT_CHARS = 600_000  # characters of the standard library read for training (about 190,000 tokens), read once a process
MIN_POSITIONS = {"induction": 8, "copy": 5, "reverse": 5, "brackets": 8, "text": 8}
HELD_OUT_ROWS = 32
PROBE_SEED = 20_251  # fixed: every run of a task at one length sees the same probe and held-out set
HELD_OUT_SEED = 40_503


def vocab_size(task: str) -> int:
    return TEXT_VOCAB if task == "text" else len(SYNTHETIC)


@dataclass(frozen=True)
class Batch:
    tokens: Tensor  # (B, T) token ids
    counted: Tensor | None  # (B, T - 1) True where the next-token target counts; None: all


@dataclass(frozen=True)
class Probe:
    ids: list[int]  # (T,)
    labels: list[str]  # each token's label, as the written checkpoint's tokenizer reads it
    brackets: list[tuple[int, int]] | None  # (closing, opening) positions; None for a task without brackets
    induction_ids: list[int]  # the repeated-segment probe the induction score is read on
    segment_len: int  # its segment length; queries from segment_len on, key q - segment_len + 1


@functools.cache
def synthetic_tokenizer() -> str:
    """tokenizer.json of the synthetic tasks: one id per word, bracket or "=", split on spaces and brackets."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(SYNTHETIC)}, unk_token=UNKNOWN))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(r"[()\[\]{}=]"), behavior="isolated")]
    )
    tok.add_special_tokens([UNKNOWN])
    return tok.to_str()


def tokenizer_json(task: str) -> str:
    return text_tokenizer().to_str() if task == "text" else synthetic_tokenizer()


def labels_of(task: str, ids: list[int]) -> list[str]:
    if task == "text":
        from engine.tokens import TokenPieces

        return TokenPieces(text_tokenizer()).labels(ids)
    return [SYNTHETIC[i] for i in ids]


# ---- the synthetic tasks' rows


def induction_rows(gen: torch.Generator, batch: int, positions: int) -> Tensor:
    """(B, T): each row one random segment of words repeated to the end, its length from T // 8 to T // 2."""
    shortest = max(2, positions // 8)
    lengths = torch.randint(shortest, positions // 2 + 1, (batch, 1), generator=gen)
    words = torch.randint(len(WORDS), (batch, positions), generator=gen)
    at = torch.arange(positions).expand(batch, positions) % lengths  # (B, T): position within the segment
    return words.gather(1, at)


def copy_rows(gen: torch.Generator, batch: int, positions: int, reverse: bool) -> tuple[Tensor, Tensor]:
    """(B, T) words x, "=", x (or x reversed), padded with "=" where T is even; (B, T - 1) the second x counted."""
    n = (positions - 1) // 2
    x = torch.randint(len(WORDS), (batch, n), generator=gen)
    sep = torch.full((batch, positions - 2 * n), len(WORDS), dtype=torch.long)
    tokens = torch.cat([x, sep[:, :1], x.flip(1) if reverse else x, sep[:, 1:]], dim=1)
    counted = torch.zeros(batch, positions - 1, dtype=torch.bool)
    counted[:, n : 2 * n] = True  # targets n + 1 .. 2n: the second x
    return tokens, counted


def bracket_row(rng: random.Random, positions: int) -> list[int]:
    """Balanced (), [] and {} with words between, every bracket closed by the end."""
    sep = len(WORDS)
    row: list[int] = []
    stack: list[int] = []
    for pos in range(positions):
        left = positions - pos
        if stack and len(stack) >= left:
            row.append(stack.pop() + 1)
            continue
        choice = rng.random()
        if choice < 0.35 and len(stack) + 1 < left:
            opening = sep + 1 + 2 * rng.randrange(3)
            stack.append(opening)
            row.append(opening)
        elif choice < 0.7 and stack:
            row.append(stack.pop() + 1)
        else:
            row.append(rng.randrange(len(WORDS)))
    return row


def bracket_rows(seed: int, batch: int, positions: int) -> Tensor:
    rng = random.Random(seed)
    return torch.tensor([bracket_row(rng, positions) for _ in range(batch)], dtype=torch.long)


# ---- text: the standard library


@functools.cache
def text_tokenizer() -> Tokenizer:
    tok = Tokenizer.from_file(str(TEXT_TOKENIZER))
    tok.no_truncation()
    tok.no_padding()
    return tok


@functools.cache
def text_streams() -> tuple[Tensor, Tensor]:
    """(training ids, held-out ids): the standard library's .py files as train_pycode reads them, training files in
    path order up to TEXT_CHARS characters, each text followed by <|endoftext|>."""
    from engine.train_pycode_data import read, stdlib_files, token_stream

    train_files, held = stdlib_files(Path(sysconfig.get_paths()["stdlib"]))
    texts: list[str] = []
    total = 0
    for path in train_files:
        text = read(path)
        texts.append(text)
        total += len(text)
        if total >= TEXT_CHARS:
            break
    tok = text_tokenizer()
    return token_stream(tok, texts), token_stream(tok, [read(p) for p in held if p.is_file()])


def windows(stream: Tensor, gen: torch.Generator, batch: int, positions: int) -> Tensor:
    starts = torch.randint(len(stream) - positions, (batch,), generator=gen)
    return torch.stack([stream[s : s + positions] for s in starts.tolist()])


# ---- one place for every task


def batch_of(task: str, gen: torch.Generator, rng: random.Random, batch: int, positions: int) -> Batch:
    """A training batch drawn from `gen` (torch) and `rng` (Python, the brackets' walk)."""
    if task == "induction":
        return Batch(induction_rows(gen, batch, positions), None)
    if task in ("copy", "reverse"):
        return Batch(*copy_rows(gen, batch, positions, task == "reverse"))
    if task == "brackets":
        return Batch(bracket_rows(rng.randrange(2**62), batch, positions), None)
    if task == "text":
        return Batch(windows(text_streams()[0], gen, batch, positions), None)
    raise ValueError(task)


@functools.cache
def held_out(task: str, positions: int) -> Batch:
    """The task's fixed held-out set: HELD_OUT_ROWS rows drawn from a seed of its own (text: the held-out files)."""
    gen = torch.Generator().manual_seed(HELD_OUT_SEED)
    if task == "text":
        return Batch(windows(text_streams()[1], gen, HELD_OUT_ROWS, positions), None)
    return batch_of(task, gen, random.Random(HELD_OUT_SEED), HELD_OUT_ROWS, positions)


def repeated_probe(positions: int) -> tuple[list[int], int]:
    """One random segment of positions // 2 distinct words, twice (padded with its own start where T is odd)."""
    half = positions // 2
    rng = random.Random(PROBE_SEED)
    words = rng.sample(range(len(WORDS)), half) if half <= len(WORDS) else rng.choices(range(len(WORDS)), k=half)
    ids = words * 2 + words[: positions - 2 * half]
    return ids, half


@functools.cache
def probe_of(task: str, positions: int) -> Probe:
    if task == "induction":
        ids, half = repeated_probe(positions)
        induction_ids = ids
    elif task == "text":
        ids = text_streams()[1][:positions].tolist()
        rng = random.Random(PROBE_SEED)
        half = positions // 2
        pool = text_pool()
        words = rng.sample(pool, half) if half <= len(pool) else rng.choices(pool, k=half)
        induction_ids = (words * 2 + words)[:positions]
    else:
        gen = torch.Generator().manual_seed(PROBE_SEED)
        ids = batch_of(task, gen, random.Random(PROBE_SEED), 1, positions).tokens[0].tolist()
        induction_ids, half = repeated_probe(positions)
    labels = labels_of(task, ids)
    pairs = bracket_pairs(labels) if task in ("brackets", "text") else None
    return Probe(ids, labels, pairs, induction_ids, half)


@functools.cache
def text_pool() -> list[int]:
    """Whole-word pieces of the text tokenizer (letters only, a space before), for its repeated probe."""
    vocab = json.loads(text_tokenizer().to_str())["model"]["vocab"]
    return sorted(i for piece, i in vocab.items() if piece.startswith("Ġ") and piece[1:].isalpha() and len(piece) > 2)
