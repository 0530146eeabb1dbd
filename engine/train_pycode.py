"""Train attnlab's `pycode` model, a small LLaMA-family code model, on the standard library and more Python.

    python -m engine.train_pycode --out engine/checkpoints/pycode --seed 0 [--steps N]

Run by hand, never in CI. Everything follows from the seed and the Python whose standard library it reads:

    data       the .py files under sysconfig's stdlib path, sorted (test suites included), without site-packages,
               encodings/ and pydoc_data/ (tables, not code) or any file over MAX_FILE_BYTES; HELD_OUT
               files are kept out of training and measure the held-out loss
    tokenizer  byte-level BPE trained with the tokenizers library on the training files (VOCAB_SIZE pieces,
               <|endoftext|> the one special token, put before every input as its beginning-of-text token)
    model      transformers' LlamaForCausalLM (rotary positions, RMSNorm, SwiGLU, grouped K/V), trained with
               AdamW; saved with save_pretrained (config.json, model.safetensors) beside tokenizer.json
    card       attnlab.json: the held-out loss (nats per token), token counts, steps, seed, the command, the
               wall time, the Python version, and the head scores measured the way /api/heads does

One sequence in REPEAT_EVERY (--repeat-every) is not code but a random run of vocabulary pieces repeated to
the end of the context (--repeat-words: whole-word pieces only, the kind /api/heads' probe draws): in code an
exact repeat of 8+ pieces is rare, and these rows are what an induction head forms on (the card says which
were used). --init DIR continues from a checkpoint this script saved (its weights and tokenizer; the new card
keeps the old one under "init"), so a run can go in stages. Deterministic kernels are switched on: same
seed, same torch, same machine, same weights.

--extra DIR (repeatable) trains on another directory's .py files beside the standard library (the tokenizer stays
the standard library's; a file named like a held-out file or holding one of a held-out file's top-level definitions
is left out; the card lists each directory's files, bytes and SHA-256). --repeat-copies N makes a repeated row a code
window with 2 to N copies of the run at a random place, the shape /api/heads' probe shows a model (a run copied twice
amid text), instead of a run repeated to the end of the row.

The shipped pycode was trained on one H200 (2026-12-04) in 324 s, reading a copy of this machine's Python 3.11
standard library and the .py files of 29 packages installed there beside PyTorch 2.11 (sympy 1.14.0, networkx 3.6.1,
scipy 1.18.1, numpy 2.5.2, pandas 3.0.6, matplotlib 3.11.2, scikit-learn, statsmodels 0.15.0, jax 0.11.2, flax 0.12.10,
optax 0.2.8, torch 2.11.0, hypothesis 6.168.3, setuptools 81.0.0, requests 2.34.2, urllib3 2.7.0, rich 15.0.0, click
8.5.0, werkzeug 3.1.9, jinja2 3.1.6, aiohttp 3.14.3, httpx 0.28.1, attrs, pytest, pluggy 1.6.0, PyYAML, torchvision
0.26.0, lightning 2.6.6, pygments 2.21.0): 13,045 files, 83.5M training tokens, five files left out as held-out copies.

    python -m engine.train_pycode --out engine/checkpoints/pycode --device cuda --stdlib STDLIB --extra DIR ... \
        --layers 6 --d-model 256 --heads 8 --kv-heads 2 --d-ff 608 --context 512 --batch-size 128 --steps 3000 \
        --seed 5 --lr 3e-3 --warmup 200 --repeat-every 8 --repeat-words --repeat-copies 4 --repeat-first 1000 \
        --repeat-until 1.5 --bf16 --eval-every 1000 --save-every 1000

Held-out loss 2.4802 nats at step 1000, 2.2906 at 2000, 2.2197 at 3000; the induction head formed at step 311 and
scored 0.92-0.93 at each save. The same recipe at 8 layers, width 224, 7 heads over 1 K/V group reached 2.2161 (the
6-layer one was kept for its 2 K/V groups and its bracket head, 0.39 against 0.34). The runs before it read only the
standard library (9.5M tokens) with each run repeated to the end of its row: the best held-out loss was 2.5824 nats
(past about 15 passes it stopped falling), and their induction heads did not show on the probe's two copies (0.036).
The model before that, trained in two stages on two CPU cores (held-out 3.2217), is in the history of
engine/checkpoints/pycode; --repeat-first N makes every row of the first N steps a repeated run (ending early once the
later copies' loss is under --repeat-until), and --bf16 runs the matmuls in bfloat16 under torch.autocast (weights,
optimiser and loss stay float32).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from engine.models.pycode import DEFAULT_TEXT
from engine.train_pycode_data import (
    HELD_OUT,
    REPEAT_EVERY,
    RUN_LENGTHS,
    ExtraCode,
    batch,
    extra_files,
    read,
    stdlib_files,
    token_stream,
    train_tokenizer,
    word_pieces,
)
from engine.train_pycode_eval import EOT, held_out_loss, measure_heads, measure_reference


@dataclass(frozen=True)
class PycodeConfig:
    layers: int = 4
    d_model: int = 192
    heads: int = 6
    kv_heads: int = 2
    d_ff: int = 512
    context: int = 256


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 900
    batch_size: int = 32
    lr: float = 3e-3  # AdamW peak (linear warm-up, cosine decay to a tenth)
    warmup: int = 50
    weight_decay: float = 0.1
    seed: int = 0
    repeat_every: int = REPEAT_EVERY  # one row in this many is a repeated run of pieces
    repeat_words: bool = False  # draw the repeated runs from whole-word pieces (the probe's pool), not every id
    init: str | None = None  # start from this checkpoint's weights and tokenizer instead of new ones
    repeat_first: int = 0  # at most this many first steps have every row a repeated run (induction first)
    repeat_until: float = 1.0  # ... and they end early once the later copies' loss falls below this (nats)
    bf16: bool = False  # matmuls in bfloat16 under torch.autocast (weights, optimiser and loss in float32)
    stdlib: str | None = None  # the standard library read (a directory); None: the running Python's
    extra: tuple[str, ...] = ()  # more directories of Python that train beside it (the tokenizer stays the stdlib's)
    repeat_copies: int = 0  # 0: a repeated run fills its row; N: 2 to N copies of it inside a code window
    device: str = "cpu"  # where to train: cpu, or cuda (the card's held-out loss is measured there too)


def make_model(cfg: PycodeConfig, vocab_size: int, eot: int) -> Any:  # a LlamaForCausalLM
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.context,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
    )
    model = LlamaForCausalLM(config)
    model.set_attn_implementation("sdpa")
    return model


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(
    model_cfg: PycodeConfig,
    cfg: TrainConfig,
    out: Path,
    *,
    files: tuple[list[Path], list[Path]] | None = None,
    save_every: int = 0,
    eval_every: int = 0,
) -> dict:
    """Train from cfg.seed, save the checkpoint into `out`, return the card (also written as attnlab.json)."""
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    device = torch.device(cfg.device)
    train_files, held_files = files or stdlib_files(Path(cfg.stdlib) if cfg.stdlib else None)
    train_texts, held_texts = [read(p) for p in train_files], [read(p) for p in held_files]
    tok = Tokenizer.from_file(str(Path(cfg.init) / "tokenizer.json")) if cfg.init else train_tokenizer(train_texts)
    eot = tok.token_to_id(EOT)
    assert eot == 0, eot
    extras: list[ExtraCode] = []
    for directory in cfg.extra:  # trained on, never in the tokenizer, so its pieces stay the standard library's
        paths, read_as = extra_files(Path(directory), held_texts)
        train_files, train_texts = train_files + paths, train_texts + [read(p) for p in paths]
        extras.append(read_as)
    stream = token_stream(tok, train_texts)
    print(f"{len(train_files)} files, {len(stream)} training tokens, vocab {tok.get_vocab_size()}", flush=True)
    if cfg.init:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(cfg.init, attn_implementation="sdpa")
    else:
        model = make_model(model_cfg, tok.get_vocab_size(), eot)
    torch.nn.Module.to(model, device)  # (transformers types .to as its own wrapper)
    pool = word_pieces(tok) if cfg.repeat_words else None
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    model.train()
    first = cfg.repeat_first  # steps of the all-repeats phase, shortened once induction has formed
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        every = 1 if step < first else cfg.repeat_every
        rows, later_mask = batch(
            rng, stream, model_cfg.context, cfg.batch_size, tok.get_vocab_size(), step, every, pool, cfg.repeat_copies
        )
        tokens, later_mask = rows.to(device), later_mask.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(input_ids=tokens).logits
        per = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), tokens[:, 1:].flatten(), reduction="none").view(
            tokens.shape[0], -1
        )
        loss = per.mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        per = per.detach()  # the logged losses below need no graph
        repeated = torch.tensor(
            [(step * cfg.batch_size + i) % every == every - 1 for i in range(tokens.shape[0])], device=device
        )
        later = float(per[later_mask].mean()) if bool(later_mask.any()) else float("nan")
        if step < first and later < cfg.repeat_until:
            first = step + 1
            print(f"step {step:5d}  induction formed (later copies {later:.3f} nats): code rows from here", flush=True)
        if step % 25 == 0 or step == cfg.steps - 1:
            code = float(per[~repeated].mean()) if bool((~repeated).any()) else float("nan")
            print(
                f"step {step:5d}  loss {loss.item():.3f}  code {code:.3f}  repeats' later copies {later:.3f}  "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
        if eval_every and step % eval_every == eval_every - 1:
            held, _ = held_out_loss(model, tok, held_texts, model_cfg.context)
            print(f"step {step:5d}  held-out {held:.4f}  {time.perf_counter() - started:.0f} s", flush=True)
        if save_every and step % save_every == save_every - 1 and step < cfg.steps - 1:
            save(model, tok, {"partial": True, "steps_done": step + 1, "default_text": DEFAULT_TEXT}, out)
            heads = measure_heads(out)
            write_card(out, {"partial": True, "steps_done": step + 1, "default_text": DEFAULT_TEXT, "heads": heads})
            print(f"step {step:5d}  heads {json.dumps(heads)}", flush=True)
    model.eval()
    held, held_tokens = held_out_loss(model, tok, held_texts, model_cfg.context)
    torch.nn.Module.to(model, "cpu")  # saved and measured as attnlab serves it
    seconds = time.perf_counter() - started
    card = {
        "description": "a small LLaMA-family code model trained by attnlab on the Python standard library"
        + (" and more Python (extra_code)" if extras else ""),
        "held_out_loss": round(held, 4),
        "held_out_unit": "nats per token",
        "held_out_files": list(HELD_OUT),
        "held_out_tokens": held_tokens,
        "train_files": len(train_files),
        "train_tokens": len(stream),
        **({"extra_code": [asdict(e) for e in extras]} if extras else {}),
        "tokens_seen": cfg.steps * cfg.batch_size * model_cfg.context,
        "repeat_rows": (
            f"1 row in {cfg.repeat_every}: a random run of {RUN_LENGTHS[0]}-{RUN_LENGTHS[1]} "
            f"{'whole-word ' if cfg.repeat_words else ''}pieces "
            + (
                f"copied 2 to {cfg.repeat_copies} times inside a code window (for induction)"
                if cfg.repeat_copies
                else "repeated to the end of the context (for induction)"
            )
        ),
        "steps": cfg.steps,
        "repeat_first_steps": first,
        "seed": cfg.seed,
        "model": asdict(model_cfg),
        "train": asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "command": "python -m engine.train_pycode " + " ".join(sys.argv[1:]),
        "wall_seconds": round(seconds, 1),
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "default_text": DEFAULT_TEXT,
    }
    if cfg.init:  # what it started from: that checkpoint's own card (its steps, command, seed)
        init_card = Path(cfg.init) / "attnlab.json"
        card["init"] = json.loads(init_card.read_text()) if init_card.is_file() else {"from": cfg.init}
    save(model, tok, card, out)
    card["heads"] = measure_heads(out)
    card["reference"] = measure_reference(out)
    write_card(out, card)
    return card


def held_out_fields(out: Path) -> dict:
    """The card's held-out loss fields for the checkpoint saved in `out`."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(out, attn_implementation="sdpa").eval()
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    _, held_files = stdlib_files()
    held, count = held_out_loss(model, tok, [read(p) for p in held_files], model.config.max_position_embeddings)
    return {
        "held_out_loss": round(held, 4),
        "held_out_unit": "nats per token",
        "held_out_files": list(HELD_OUT),
        "held_out_tokens": count,
        "python": sys.version.split()[0],
    }


def save(model: Any, tok: Tokenizer, card: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "generation_config.json").unlink(missing_ok=True)
    for path in out.iterdir():
        path.chmod(0o644)  # readable by a server running as another user
    write_card(out, card)


def write_card(out: Path, card: dict) -> None:
    (out / "attnlab.json").write_text(json.dumps(card, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("engine/checkpoints/pycode"))
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--init", type=str, default=None, help="start from this checkpoint (its tokenizer too)")
    parser.add_argument("--repeat-every", type=int, default=REPEAT_EVERY)
    parser.add_argument("--repeat-words", action="store_true", help="repeated runs of whole-word pieces")
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--warmup", type=int, default=TrainConfig.warmup)
    parser.add_argument("--repeat-first", type=int, default=0, help="first steps with every row a repeated run")
    parser.add_argument("--repeat-until", type=float, default=TrainConfig.repeat_until)
    parser.add_argument("--bf16", action="store_true", help="matmuls in bfloat16 (torch.autocast)")
    parser.add_argument("--score-only", action="store_true", help="measure the heads of the checkpoint in --out")
    parser.add_argument("--save-every", type=int, default=0, help="save (and score the heads) every N steps")
    parser.add_argument("--device", default=TrainConfig.device, help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--weight-decay", type=float, default=TrainConfig.weight_decay)
    parser.add_argument(
        "--stdlib", type=Path, default=None, help="read this standard library (default: the running one)"
    )
    parser.add_argument("--eval-every", type=int, default=0, help="print the held-out loss every N steps")
    parser.add_argument(
        "--extra", type=Path, action="append", default=[], help="also train on this directory's .py files (repeatable)"
    )
    parser.add_argument("--repeat-copies", type=int, default=0, help="2 to N copies of a run in a code window")
    for field in fields(PycodeConfig):  # the model's shape: --layers, --d-model, --heads, --kv-heads, --d-ff, --context
        parser.add_argument("--" + field.name.replace("_", "-"), type=int, default=field.default)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.score_only:
        card = json.loads((args.out / "attnlab.json").read_text())
        if "held_out_loss" not in card:  # a save made during a run: measure what the end of a run measures
            card.update(held_out_fields(args.out))
        card["heads"] = measure_heads(args.out)
        card["reference"] = measure_reference(args.out)
        write_card(args.out, card)
        print(json.dumps({"heads": card["heads"], "reference": card["reference"]}))
        return
    was = torch.are_deterministic_algorithms_enabled()
    if args.device.startswith("cuda"):  # cuBLAS is deterministic with a fixed workspace; a kernel without a
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic form warns, not fails
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=args.device.startswith("cuda"))
    try:
        card = train(
            PycodeConfig(**{f.name: getattr(args, f.name) for f in fields(PycodeConfig)}),
            TrainConfig(
                steps=args.steps,
                seed=args.seed,
                lr=args.lr,
                warmup=args.warmup,
                repeat_every=args.repeat_every,
                repeat_words=args.repeat_words,
                init=args.init,
                repeat_first=args.repeat_first,
                repeat_until=args.repeat_until,
                bf16=args.bf16,
                device=args.device,
                stdlib=str(args.stdlib) if args.stdlib else None,
                batch_size=args.batch_size,
                weight_decay=args.weight_decay,
                extra=tuple(str(p) for p in args.extra),
                repeat_copies=args.repeat_copies,
            ),
            args.out,
            save_every=args.save_every,
            eval_every=args.eval_every,
        )
    finally:
        torch.use_deterministic_algorithms(was)
    print(f"held-out loss {card['held_out_loss']} nats per token; {card['wall_seconds']} s; wrote {args.out}")


if __name__ == "__main__":
    main()
