"""What `pycode` is trained on: the standard library's files (and, with --extra, more Python), the tokenizer
trained on them, and the rows of a batch, code windows and the repeated runs an induction head forms on."""

from __future__ import annotations

import hashlib
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from torch import Tensor

from engine.train_pycode_eval import EOT

VOCAB_SIZE = 2048
MAX_FILE_BYTES = 300_000
SKIP_DIRS = frozenset({"site-packages", "encodings", "pydoc_data"})
# Held out of training (tokenizer included); the card's held_out_loss is measured on these.
HELD_OUT = ("textwrap.py", "heapq.py", "fractions.py", "json/decoder.py", "shlex.py", "graphlib.py")
REPEAT_EVERY = 8  # one row in 8 is a random run of pieces repeated (induction)
RUN_LENGTHS = (8, 64)  # a repeated run is this many pieces long, both ends included
DEFINITION_CHARS = 24  # a held-out top-level def/class line at least this long marks a copy of that file


def stdlib_files(root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """(training files, held-out files) of the standard library, sorted by path."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    found = sorted(
        p
        for p in root.rglob("*.py")
        if not SKIP_DIRS.intersection(p.relative_to(root).parts[:-1])
        and not p.name.startswith("_sysconfigdata")
        and p.stat().st_size <= MAX_FILE_BYTES
    )
    held = [root / name for name in HELD_OUT]
    return [p for p in found if p not in held], held


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def definitions(text: str) -> set[str]:
    """The top-level `def`/`class` lines of a file that are long enough to name it."""
    return {
        line.rstrip()
        for line in text.splitlines()
        if line.startswith(("def ", "class ", "async def ")) and len(line.rstrip()) >= DEFINITION_CHARS
    }


@dataclass(frozen=True)
class ExtraCode:
    """One --extra directory as it was read: enough to tell whether another run read the same bytes."""

    directory: str
    files: int
    bytes: int
    sha256: str  # over each kept file's relative path and bytes, in path order
    left_out: int  # files dropped because they copy a held-out file (its name or one of its definitions)


def extra_files(root: Path, held_texts: list[str]) -> tuple[list[Path], ExtraCode]:
    """The .py files under `root` (at most MAX_FILE_BYTES each, sorted) that train beside the standard library,
    without any file named like a held-out file or holding one of a held-out file's top-level definitions, so a
    vendored copy of textwrap.py does not leak the held-out loss."""
    held_names = {Path(name).name for name in HELD_OUT}
    held_defs = set().union(*(definitions(t) for t in held_texts)) if held_texts else set()
    digest = hashlib.sha256()
    kept: list[Path] = []
    total = dropped = 0
    for path in sorted(p for p in root.rglob("*.py") if p.is_file() and p.stat().st_size <= MAX_FILE_BYTES):
        data = path.read_bytes()
        text = data.decode("utf-8", errors="replace")
        if path.name in held_names or definitions(text) & held_defs:
            dropped += 1
            continue
        kept.append(path)
        total += len(data)
        digest.update(str(path.relative_to(root)).encode() + b"\0" + data + b"\0")
    return kept, ExtraCode(str(root), len(kept), total, digest.hexdigest(), dropped)


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    eot = tok.token_to_id(EOT)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOT} $A", pair=f"{EOT} $A {EOT} $B", special_tokens=[(EOT, eot)]
    )
    return tok


def token_stream(tok: Tokenizer, texts: list[str]) -> Tensor:
    """Every text's ids (no special tokens), each followed by <|endoftext|>, as one long 1-D tensor."""
    eot = tok.token_to_id(EOT)
    assert eot is not None, EOT
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eot)
    return torch.tensor(ids, dtype=torch.long)


def word_pieces(tok: Tokenizer) -> list[int]:
    """Ids of whole-word pieces (ASCII letters, 2 or more, a leading space allowed): the kind of piece the probe of
    /api/heads draws for a checkpoint (engine/models/checkpoint_model.py token_pool)."""
    out = []
    for i in range(1, tok.get_vocab_size()):
        label = tok.decode([i]).strip()
        if label.isascii() and label.isalpha() and len(label) > 1:
            out.append(i)
    return out


def window(rng: random.Random, stream: Tensor, context: int) -> Tensor:
    """<|endoftext|> (id 0) and then context - 1 ids of the stream from a random place."""
    start = rng.randrange(0, len(stream) - context)
    return torch.cat([torch.tensor([0]), stream[start : start + context - 1]])


def batch(
    rng: random.Random,
    stream: Tensor,
    context: int,
    size: int,
    vocab: int,
    step: int,
    repeat_every: int = REPEAT_EVERY,
    pool: list[int] | None = None,
    copies: int = 0,
) -> tuple[Tensor, Tensor]:
    """(tokens, later): tokens (size, context) are <|endoftext|> (id 0) and then a window of the stream, except that
    every repeat_every-th row holds a random run of pieces (from `pool`, else any id but 0) repeated. With copies 0
    the run repeats to the end of the row, and `later` (size, context - 1), over the targets, marks the row's second
    half; with copies N the run is copied 2 to N times at a random place inside a code window (the shape of
    /api/heads' probe: a few copies amid other text), and `later` marks the targets in the second and later copies."""
    rows = []
    later = torch.zeros(size, context - 1, dtype=torch.bool)
    for i in range(size):
        if (step * size + i) % repeat_every != repeat_every - 1:
            rows.append(window(rng, stream, context))
            continue
        length = rng.randint(*RUN_LENGTHS)
        run = [
            rng.choice(pool) if pool is not None else rng.randrange(1, vocab) for _ in range(length)
        ]  # id 0 is <|endoftext|>
        if copies == 0:
            rows.append(torch.tensor([0, *(run * (context // length + 1))[: context - 1]]))
            later[i, context // 2 :] = True
            continue
        count = rng.randint(2, copies)
        span = min(count * length, context - 1)
        at = 1 + rng.randrange(0, context - span)  # where the first copy starts in the row
        row = window(rng, stream, context)
        row[at : at + span] = torch.tensor((run * count)[:span])
        rows.append(row)
        later[i, at + length - 1 : at + span - 1] = True  # target t + 1 sits in a later copy
    return torch.stack(rows), later
