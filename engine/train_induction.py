"""Train attnlab's small induction-head model on synthetic sequences, on CPU, from a seed.

    python -m engine.train_induction --out engine/checkpoints/induction.safetensors --seed 0

Every training sequence is uniform random words from a small vocabulary with one random segment
copied to a later place (random length, random positions). Only the copied words are predictable,
and only by finding the earlier occurrence of the current word and reading the word after it:

    layer 0: a previous-token head writes "the word before me" into each position;
    layer 1: an induction head matches the current word against that, and copies the word that
             followed its previous occurrence.

The position of the copy varies, so attending by position alone does not work; the model has to
match content. This module trains with a plain torch module (fused attention, fast); the served
model (engine.models.induction) recomputes every layer with engine.attention from the saved
weights, and a test checks that both give the same logits.

Same seed, same torch version, same machine: the same weights, bit for bit (training switches on
torch's deterministic kernels). The full run takes about two minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn

from engine.models.induction import InductionConfig

# The vocabulary: short, common, distinct English words, so a person can type sequences.
VOCAB_WORDS = """
    the cat sat on mat dog ran to park a big red ball blue sky sun moon star tree house door window
    car road city town river sea boat fish bird egg milk bread cake tea cup box hat shoe coat bag
    book pen page word king queen man woman boy girl child friend hand head eye ear nose mouth foot
    leg arm hair face name day night time year week morning snow rain wind fire stone sand hill
    field farm cow pig horse sheep goat duck frog bee ant rose leaf grass seed apple pear plum lemon
    rice corn soup salt gold iron glass paper wood clock bell drum song game key lamp bed chair
    table floor wall roof garden school shop bank train plane ship wheel
"""
VOCAB: tuple[str, ...] = tuple(VOCAB_WORDS.split())


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 6000  # optimiser steps
    batch_size: int = 64  # sequences per step
    lr: float = 2e-3  # AdamW peak learning rate (linear warm-up, then cosine decay)
    warmup: int = 100  # warm-up steps
    weight_decay: float = 0.1  # pushes unused attention weights down: sharper, cleaner heads
    min_segment: int = 8  # shortest copied segment
    seed: int = 0  # seeds the weights and the data
    schedule_steps: int | None = None  # length of the lr schedule (None: steps); with the full run's
    # schedule, a run of fewer steps is exactly the start of the full run


class TrainingTransformer(nn.Module):
    """The same maths as the served model, with fused attention for speed.

    x = W_E[tokens] + W_pos;  per layer: x = x + (softmax_causal(Q K^T / sqrt(d_head)) V) W_O,
    with Q, K, V read from LayerNorm(x);  logits = LayerNorm(x) W_U.
    """

    def __init__(self, cfg: InductionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, v = cfg.d_model, cfg.vocab_size
        self.W_E = nn.Parameter(torch.randn(v, d) * 0.1)  # (V, D)
        self.W_pos = nn.Parameter(torch.randn(cfg.n_ctx, d) * 0.1)  # (n_ctx, D)
        self.blocks = nn.ModuleList(AttentionBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.W_U = nn.Parameter(torch.randn(d, v) / math.sqrt(d))  # (D, V)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, S) -> logits (B, S, V)."""
        x = self.W_E[tokens] + self.W_pos[: tokens.shape[1]]  # (B, S, D)
        for block in self.blocks:
            x = x + block(x)
        return self.ln_final(x) @ self.W_U


class AttentionBlock(nn.Module):
    def __init__(self, cfg: InductionConfig) -> None:
        super().__init__()
        d, hd = cfg.d_model, cfg.n_heads * cfg.d_head
        self.n_heads = cfg.n_heads
        self.ln = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.W_Q = nn.Parameter(torch.randn(d, hd) / math.sqrt(d))  # (D, H * d_head)
        self.W_K = nn.Parameter(torch.randn(d, hd) / math.sqrt(d))
        self.W_V = nn.Parameter(torch.randn(d, hd) / math.sqrt(d))
        self.W_O = nn.Parameter(torch.randn(hd, d) / math.sqrt(hd))  # (H * d_head, D)

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        h = self.ln(x)

        def heads(t: Tensor) -> Tensor:  # (B, S, H * d_head) -> (B, H, S, d_head)
            return t.view(b, s, self.n_heads, -1).transpose(1, 2)

        z = F.scaled_dot_product_attention(
            heads(h @ self.W_Q), heads(h @ self.W_K), heads(h @ self.W_V), is_causal=True
        )
        return z.transpose(1, 2).reshape(b, s, -1) @ self.W_O


def copy_segment_batch(rng: random.Random, batch_size: int, n_ctx: int, vocab_size: int, min_segment: int) -> Tensor:
    """(B, n_ctx) uniform random token ids, each row with one segment copied to a later place."""
    rows = []
    for _ in range(batch_size):
        seq = [rng.randrange(vocab_size) for _ in range(n_ctx)]
        length = rng.randint(min_segment, n_ctx // 2)
        src = rng.randint(0, n_ctx - 2 * length)
        dst = rng.randint(src + length, n_ctx - length)
        seq[dst : dst + length] = seq[src : src + length]
        rows.append(seq)
    return torch.tensor(rows, dtype=torch.long)


def repeated_halves_batch(gen: torch.Generator, batch_size: int, half: int, vocab_size: int) -> Tensor:
    """(B, 2 * half): a random first half, then the same words again."""
    first = torch.randint(vocab_size, (batch_size, half), generator=gen)
    return torch.cat([first, first], dim=1)


def next_token_losses(logits: Tensor, tokens: Tensor) -> Tensor:
    """(B, S, V), (B, S) -> (B, S - 1): the loss of predicting token t + 1 at position t."""
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")


@torch.no_grad()
def half_losses(
    model: nn.Module, n_ctx: int, vocab_size: int, seed: int = 12345, batch_size: int = 64
) -> dict[str, float]:
    """Mean loss on the first (random) half and on the repeated half of repeated random sequences.

    Chance is ln(V). Targets 1..L-1 are the first half; targets L+1..2L-1 the repeat (target L,
    the first repeated word, cannot be inferred, so it counts in neither).
    """
    half = n_ctx // 2
    tokens = repeated_halves_batch(torch.Generator().manual_seed(seed), batch_size, half, vocab_size)
    losses = next_token_losses(model(tokens), tokens)  # (B, 2L - 1); column t predicts token t + 1
    return {
        "first_half": float(losses[:, : half - 1].mean()),
        "repeated_half": float(losses[:, half:].mean()),
        "chance": math.log(vocab_size),
    }


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    total = cfg.schedule_steps or cfg.steps
    progress = min(1.0, (step - cfg.warmup) / max(1, total - cfg.warmup))
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * progress))


def train(model_cfg: InductionConfig, cfg: TrainConfig, log_every: int = 0) -> TrainingTransformer:
    """Train from `cfg.seed`: the weights and the data sequence both follow from it.

    Deterministic kernels are switched on for the run (and restored after): without them, CPU
    reductions split across threads differ in the last bits from run to run.
    """
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return train_steps(model_cfg, cfg, log_every)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


def train_steps(model_cfg: InductionConfig, cfg: TrainConfig, log_every: int) -> TrainingTransformer:
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    model = TrainingTransformer(model_cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        tokens = copy_segment_batch(rng, cfg.batch_size, model_cfg.n_ctx, model_cfg.vocab_size, cfg.min_segment)
        loss = next_token_losses(model(tokens), tokens).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if log_every and (step % log_every == 0 or step == cfg.steps - 1):
            halves = half_losses(model, model_cfg.n_ctx, model_cfg.vocab_size)
            print(
                f"step {step:5d}  loss {loss.item():.3f}  first half {halves['first_half']:.3f}  "
                f"repeated half {halves['repeated_half']:.3f}  (chance {halves['chance']:.3f})",
                flush=True,
            )
    return model.eval()


def save_checkpoint(model: TrainingTransformer, vocab: tuple[str, ...], cfg: TrainConfig, path: Path) -> None:
    """Weights as safetensors; the architecture, vocabulary and training settings in its metadata."""
    assert len(vocab) == model.cfg.vocab_size, (len(vocab), model.cfg.vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    metadata = {
        "config": json.dumps(asdict(model.cfg)),
        "vocab": json.dumps(list(vocab)),
        "train": json.dumps(asdict(cfg)),
    }
    save_file(tensors, str(path), metadata=metadata)
    path.chmod(0o644)  # readable by a server running as another user


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("engine/checkpoints/induction.safetensors"))
    parser.add_argument("--seed", type=int, default=TrainConfig.seed)
    parser.add_argument("--steps", type=int, default=TrainConfig.steps)
    parser.add_argument("--log-every", type=int, default=250)
    args = parser.parse_args(argv)

    model_cfg = InductionConfig(vocab_size=len(VOCAB))
    cfg = TrainConfig(seed=args.seed, steps=args.steps)
    start = time.perf_counter()
    model = train(model_cfg, cfg, log_every=args.log_every)
    seconds = time.perf_counter() - start
    save_checkpoint(model, VOCAB, cfg, args.out)
    halves = half_losses(model, model_cfg.n_ctx, model_cfg.vocab_size)
    print(
        f"trained {cfg.steps} steps in {seconds:.1f} s on {torch.get_num_threads()} threads; "
        f"first half {halves['first_half']:.3f}, repeated half {halves['repeated_half']:.3f}, "
        f"chance {halves['chance']:.3f}; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
