"""A small trained decoder with a previous-token head (layer 0) and an induction head (layer 1).

Trained by `python -m engine.train_induction` on random word sequences in which a segment repeats;
the checkpoint (safetensors, with the architecture and vocabulary in its metadata) is committed
next to this package. The forward pass here is attnlab's engine on the checkpoint's weights:

    x_0 = W_E[word] + W_pos[position]                                   (S, D)
    per layer l (attention only, LayerNorm before attention):
        x_l+1 = x_l + Attention(LayerNorm(x_l))                          causal by default
    logits = LayerNorm(x_L) W_U                                          (S, V)

Input: whitespace-separated words from the model's vocabulary (ModelInfo.vocab). On a repeat
("red ball king ... red ball") the induction head at the second "ball" attends to the word after
the first "ball" ("king"), and the model predicts it: `next_word` in the run's config.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import Tensor

from engine.attention import AttentionWeights, attention, from_concatenated
from engine.errors import InputError
from engine.masks import MaskSpec, eligibility
from engine.models.base import (
    AttentionModel,
    LayerTrace,
    ModelInfo,
    ModelRun,
    RunInput,
    layer_config,
    reject_head_counts,
    timed,
)

CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "induction.safetensors"
DEFAULT_TEXT = (
    "red ball king river frog clock seed moon hat rain snow duck "
    "red ball king river frog clock seed moon hat rain snow duck"
)


@dataclass(frozen=True)
class InductionConfig:
    vocab_size: int = 128  # words in the vocabulary
    n_ctx: int = 64  # learned positions: the longest input
    d_model: int = 64  # residual width
    n_layers: int = 2  # attention-only layers
    n_heads: int = 4  # heads per layer
    d_head: int = 16  # query/key/value width per head
    layer_norm_eps: float = 1e-5


@dataclass(frozen=True)
class BlockWeights:
    ln_w: Tensor  # (D,) LayerNorm before attention
    ln_b: Tensor  # (D,)
    attn: AttentionWeights  # W_Q, W_K, W_V (H, D, d_head), W_O (H, d_head, D)

    def to(self, device: torch.device, dtype: torch.dtype) -> BlockWeights:
        return BlockWeights(self.ln_w.to(device, dtype), self.ln_b.to(device, dtype), self.attn.to(device, dtype))


@dataclass(frozen=True)
class DecoderWeights:
    W_E: Tensor  # (V, D)
    W_pos: Tensor  # (n_ctx, D)
    blocks: list[BlockWeights]
    ln_final_w: Tensor  # (D,)
    ln_final_b: Tensor  # (D,)
    W_U: Tensor  # (D, V)

    def to(self, device: torch.device, dtype: torch.dtype) -> DecoderWeights:
        return DecoderWeights(
            W_E=self.W_E.to(device, dtype),
            W_pos=self.W_pos.to(device, dtype),
            blocks=[b.to(device, dtype) for b in self.blocks],
            ln_final_w=self.ln_final_w.to(device, dtype),
            ln_final_b=self.ln_final_b.to(device, dtype),
            W_U=self.W_U.to(device, dtype),
        )


def load_checkpoint(path: Path) -> tuple[InductionConfig, list[str], DecoderWeights]:
    """The architecture and vocabulary (from the metadata) and the weights, split per head."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        sd = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    cfg = InductionConfig(**json.loads(meta["config"]))
    vocab = list(json.loads(meta["vocab"]))
    assert len(vocab) == cfg.vocab_size, (len(vocab), cfg.vocab_size)
    blocks = [
        BlockWeights(
            ln_w=sd[f"blocks.{i}.ln.weight"],
            ln_b=sd[f"blocks.{i}.ln.bias"],
            attn=from_concatenated(
                sd[f"blocks.{i}.W_Q"], sd[f"blocks.{i}.W_K"], sd[f"blocks.{i}.W_V"], sd[f"blocks.{i}.W_O"], cfg.n_heads
            ),
        )
        for i in range(cfg.n_layers)
    ]
    weights = DecoderWeights(
        W_E=sd["W_E"],
        W_pos=sd["W_pos"],
        blocks=blocks,
        ln_final_w=sd["ln_final.weight"],
        ln_final_b=sd["ln_final.bias"],
        W_U=sd["W_U"],
    )
    return cfg, vocab, weights


class InductionModel(AttentionModel):
    """Built once: construction reads the checkpoint; runs only read the weights."""

    def __init__(self, path: Path = CHECKPOINT) -> None:
        self.cfg, self.vocab, self.weights = load_checkpoint(path)
        self.word_ids = {w: i for i, w in enumerate(self.vocab)}
        self._moved: dict[tuple[str, torch.dtype], DecoderWeights] = {}
        c = self.cfg
        self.info = ModelInfo(
            name="induction",
            description=(
                f"A small decoder trained in this repo on random word sequences with repeated segments "
                f"({c.n_layers} attention-only layers x {c.n_heads} heads, width {c.d_model}, {c.vocab_size} words). "
                "Layer 0 has a previous-token head, layer 1 an induction head: on a repeat, the second occurrence "
                "of a word attends to the word that followed the first. Causal by default. Words: see vocab."
            ),
            n_layers=c.n_layers,
            n_heads=c.n_heads,
            n_kv_heads=c.n_heads,
            d_model=c.d_model,
            d_head=c.d_head,
            d_v=c.d_head,
            max_tokens=c.n_ctx,
            tokenizer=f"whitespace; words from the model's {c.vocab_size}-word vocabulary",
            default_text=DEFAULT_TEXT,
            default_masks=MaskSpec(causal=True),
            vocab=list(self.vocab),
        )

    def tokenize(self, inp: RunInput) -> list[str]:
        return [self.vocab[i] for i in self.encode(inp)]

    def encode(self, inp: RunInput) -> list[int]:
        """Word ids for `text` or `tokens`, validated against the vocabulary and the context length."""
        if inp.x is not None:
            raise InputError("x", "the induction model embeds its own words: use the custom model for x")
        if inp.weights is not None:
            raise InputError("weights", "the induction model uses its trained weights: use the custom model for yours")
        if inp.options:
            raise InputError(f"options.{sorted(inp.options)[0]}", "the induction model takes no options")
        reject_head_counts(inp, "the induction model", f"{self.cfg.n_heads} per layer")
        field_name = "tokens" if inp.tokens is not None else "text"
        words = list(inp.tokens) if inp.tokens is not None else (inp.text or "").split()
        if not words:
            raise InputError(field_name, "got no words: give at least one")
        if len(words) > self.cfg.n_ctx:
            raise InputError(
                field_name,
                f"got {len(words)} tokens, the induction model takes at most {self.cfg.n_ctx} (its trained positions)",
            )
        for i, w in enumerate(words):
            if w not in self.word_ids:
                raise InputError(
                    field_name,
                    f"unknown word {w!r} at position {i}: the induction model knows {self.cfg.vocab_size} words "
                    "(listed in its vocab), lower-case, separated by spaces",
                )
        return [self.word_ids[w] for w in words]

    def token_pool(self) -> list[str]:
        return list(self.vocab)

    def weights_on(self, device: torch.device, dtype: torch.dtype) -> DecoderWeights:
        key = (str(device), dtype)
        if key not in self._moved:
            self._moved[key] = self.weights.to(device, dtype)
        return self._moved[key]

    def forward(
        self, ids: Tensor, w: DecoderWeights, eligible: Tensor, inp: RunInput, timings: dict[str, float]
    ) -> tuple[list[LayerTrace], Tensor]:
        """ids (B, S) -> every layer's trace and the logits (B, S, V) after the last computed layer."""
        x = w.W_E[ids] + w.W_pos[: ids.shape[-1]]  # (B, S, D)
        traces = []
        for i, block in enumerate(w.blocks[: self.last_layer(inp) + 1]):
            with timed(timings, f"layer_{i}", ids.device):
                h = F.layer_norm(x, (self.cfg.d_model,), block.ln_w, block.ln_b, self.cfg.layer_norm_eps)
                out = attention(h, block.attn, eligible, scale=inp.scale, all_masked=inp.all_masked)
            traces.append(LayerTrace(i, out, x, x + out.output))
            x = x + out.output  # (B, S, D)
        return traces, self.unembed(x, w)

    def unembed(self, x: Tensor, w: DecoderWeights) -> Tensor:
        """(B, S, D) -> logits (B, S, V)."""
        return F.layer_norm(x, (self.cfg.d_model,), w.ln_final_w, w.ln_final_b, self.cfg.layer_norm_eps) @ w.W_U

    def run(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> ModelRun:
        return self.run_with_logits(inp, device, dtype)[0]

    def run_with_logits(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> tuple[ModelRun, Tensor]:
        """The run and the logits (S, V) after the last computed layer."""
        ids = self.encode(inp)
        masks = self.resolve_masks(inp, len(ids))
        eligible = eligibility(masks, len(ids), device)
        timings: dict[str, float] = {}
        w = self.weights_on(device, dtype)
        traces, logits = self.forward(torch.tensor([ids], device=device), w, eligible, inp, timings)
        config = layer_config(w.blocks[0].attn, self.cfg.n_layers, traces[0].attn.scale_factor)
        config.update(layers_computed=len(traces), next_word=self.predictions(logits[0], len(traces)))
        run = ModelRun(
            model=self.info.name,
            tokens=[self.vocab[i] for i in ids],
            masks=masks,
            eligible=eligible,
            layers=traces,
            config=config,
            timings_ms=timings,
        )
        return run, logits[0]

    def predictions(self, logits: Tensor, layers_computed: int) -> list[dict[str, Any]]:
        """Per position, the most likely next word and its probability (after every layer only)."""
        if layers_computed < self.cfg.n_layers:
            return []
        probs = logits.float().softmax(dim=-1)  # (S, V)
        p, idx = probs.max(dim=-1)
        return [{"word": self.vocab[int(i)], "p": float(v)} for v, i in zip(p, idx, strict=True)]
