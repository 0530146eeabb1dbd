"""Train `digits`: a small vision transformer that reads scikit-learn's handwritten digits, on CPU, from a seed.

    python -m engine.train_digits --out engine/checkpoints/digits --seed 0

The digits are the shipped ones (engine/vision/samples.py: 1,797 grey images of 8 x 8 pixels). The split is fixed
and does not depend on the seed: every HELD_OUT_EVERY-th digit (indices 4, 9, 14, ...) is held out, 359 of them, and
the other 1,438 train.

The model is transformers' ViTForImageClassification: patches of 2 x 2 pixels (a 4 x 4 grid, 16 patch tokens and
[CLS]), one input channel, MODEL's small sizes. Images become pixel_values exactly as engine/vision/images.py's
preprocess does with the preprocessor_config.json written beside the weights (rescaled to 0-1, then (x - 0.5) /
0.5), so the served model reads an image as it was trained on it. Each training batch shifts every digit by up to
one pixel each way (the blank paper filled in), so the model does not learn where a stroke is on the grid, only
what it looks like.

The checkpoint directory is an ordinary Hugging Face one, loaded by anyone's code:

    config.json               ViTConfig (save_pretrained), id2label "0" ... "9"
    model.safetensors         the weights
    preprocessor_config.json  ViTImageProcessor's keys, as training used them
    attnlab.json              the card: held-out accuracy and split, seed, steps, the command, the training time,
                              and the most local head (engine/vision/neighbours.py) over the held-out digits

Same seed, same torch version, same machine: the same weights (torch's deterministic algorithms are on).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from engine.vision.images import Preprocessing, preprocess
from engine.vision.neighbours import HeadLocality, locality, most_local
from engine.vision.samples import digits

OUT = Path("engine/checkpoints/digits")
HELD_OUT_EVERY = 5  # digits 4, 9, 14, ... are held out (20%)
# the model: ViTConfig's keys
MODEL: dict[str, Any] = {
    "image_size": 8,
    "patch_size": 2,
    "num_channels": 1,
    "hidden_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "num_labels": 10,
}
PREPROCESSING = Preprocessing(num_channels=1, height=8, width=8, image_mean=(0.5,), image_std=(0.5,))


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 3000  # optimiser steps
    batch_size: int = 128  # digits per step
    lr: float = 3e-3  # AdamW peak learning rate (linear warm-up, then cosine decay to 0)
    warmup: int = 100  # warm-up steps
    weight_decay: float = 0.05
    shift: int = 1  # each training digit moved by up to this many pixels each way
    seed: int = 0  # seeds the weights, the batches and the shifts


def split(count: int, every: int = HELD_OUT_EVERY) -> tuple[Tensor, Tensor]:
    """The fixed split of `count` digits, as indices: (train, held out), every `every`-th one held out."""
    ids = torch.arange(count)
    held = ids % every == every - 1
    return ids[~held], ids[held]


def pixel_values(images: np.ndarray) -> Tensor:
    """(N, 8, 8) uint8 digits as the model's input, (N, 1, 8, 8) float32, through the served preprocessing."""
    return torch.stack([preprocess(image, PREPROCESSING) for image in images])


def shifted(x: Tensor, shift: int, gen: torch.Generator) -> Tensor:
    """Each image of (B, C, H, W) moved by up to `shift` pixels each way, the edges filled with blank paper."""
    b, _, h, w = x.shape
    blank = float(x.min())  # the paper: pixel 0 after preprocessing
    padded = F.pad(x, (shift, shift, shift, shift), value=blank)  # (B, C, H + 2s, W + 2s)
    dy, dx = (torch.randint(0, 2 * shift + 1, (b,), generator=gen) for _ in range(2))
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]  # (B, 1, 1, W)
    batch = torch.arange(b)[:, None, None, None]
    channel = torch.arange(x.shape[1])[None, :, None, None]
    return padded[batch, channel, rows, cols]


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    done = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))


def accuracy(model: torch.nn.Module, x: Tensor, labels: Tensor) -> float:
    model.eval()
    with torch.no_grad():
        predicted = model(pixel_values=x).logits.argmax(-1)
    return float((predicted == labels).float().mean())


def head_locality(directory: Path, reach: int = 8) -> list[HeadLocality]:
    """Every head's neighbour share (engine/vision/neighbours.py) over the held-out digits, in one forward pass of the
    checkpoint in `directory` as attnlab serves it (its loader, its preprocessing)."""
    from engine.models.checkpoint import ImageCheckpointModel, load_checkpoint
    from engine.models.run import RunInput

    model = load_checkpoint("digits", directory, reference=False)
    assert isinstance(model, ImageCheckpointModel), "a digits checkpoint is an image model"
    images, labels = digits()
    _, held_ids = split(len(labels))
    run = model.run(RunInput(pixels=pixel_values(images[held_ids.numpy()])), torch.device("cpu"), torch.float32)
    e = model.embedding
    rows, cols = e.patch_grid(model.image_size, model.image_size)
    weights = [layer.attn.weights for layer in run.layers]  # each (B, H, S, S)
    return locality(weights, rows, cols, first_patch=e.lead + e.n_registers, reach=reach)


def locality_card(found: list[HeadLocality], reach: int = 8) -> dict[str, Any]:
    """The card's entry for the most local head: where it is and its figures, rounded as the card keeps them."""
    best = most_local(found)
    return {
        "layer": best.layer,
        "head": best.head,
        "reach": reach,
        "neighbour_share": round(best.share, 4),
        "uniform": round(best.uniform, 4),
        "shuffled_high": round(best.shuffled_high, 4),
        "local": best.local,
        "over": "the held-out digits; the share of a patch's weight on patches that is on its neighbours",
    }


def train(cfg: TrainConfig, out: Path, command: str) -> dict[str, Any]:
    """Train from cfg.seed, save the checkpoint directory `out`, return its card (also written as attnlab.json)."""
    from transformers import ViTConfig, ViTForImageClassification

    started = time.perf_counter()
    images, labels = digits()
    train_ids, held_ids = split(len(labels))
    x = pixel_values(images)
    y = torch.from_numpy(labels.astype(np.int64))
    x_train, y_train = x[train_ids], y[train_ids]
    x_held, y_held = x[held_ids], y[held_ids]

    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    config = ViTConfig(**MODEL, id2label={i: str(i) for i in range(10)}, label2id={str(i): i for i in range(10)})
    model = ViTForImageClassification(config)
    optimiser = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    for step in range(cfg.steps):
        model.train()
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step, cfg)
        batch = torch.randint(0, len(y_train), (cfg.batch_size,), generator=gen)
        inputs = shifted(x_train[batch], cfg.shift, gen) if cfg.shift else x_train[batch]
        loss = F.cross_entropy(model(pixel_values=inputs).logits, y_train[batch])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        if (step + 1) % 500 == 0 or step + 1 == cfg.steps:
            print(f"step {step + 1}: loss {loss.item():.4f}, held-out accuracy {accuracy(model, x_held, y_held):.4f}")
    held_out_accuracy = accuracy(model, x_held, y_held)
    seconds = time.perf_counter() - started

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSING.config(), indent=2) + "\n")
    card = {
        "description": "a small vision transformer attnlab trains on scikit-learn's handwritten digits (8 x 8 "
        "pixels, patches of 2 x 2)",
        "held_out_accuracy": round(held_out_accuracy, 4),
        "held_out": {
            "rule": f"digit i is held out when i % {HELD_OUT_EVERY} == {HELD_OUT_EVERY - 1}",
            "every": HELD_OUT_EVERY,
            "count": len(held_ids),
            "correct": round(held_out_accuracy * len(held_ids)),
        },
        "train_count": len(train_ids),
        "data": "engine/vision/samples.safetensors digits.images and digits.labels",
        "steps": cfg.steps,
        "seed": cfg.seed,
        "train": asdict(cfg),
        "command": command,
        "training_seconds": round(seconds, 1),
        "trained_on": f"{platform.machine()}, {torch.get_num_threads()} CPU threads, torch {torch.__version__}",
    }
    card["most_local_head"] = locality_card(head_locality(out))
    (out / "attnlab.json").write_text(json.dumps(card, indent=2) + "\n")
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch's CPU threads (one is fastest for so small a model)"
    )
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "engine.train_digits", *given])
    was = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)
    try:
        card = train(TrainConfig(seed=args.seed, steps=args.steps), args.out, command)
    finally:  # as they were: a test runs this in the suite's process
        torch.use_deterministic_algorithms(was[0])
        torch.set_num_threads(was[1])
    print(json.dumps({k: card[k] for k in ("held_out_accuracy", "steps", "seed", "training_seconds")}))


if __name__ == "__main__":
    main()
