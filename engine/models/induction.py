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
the first "ball" ("king"), and the model predicts it: `next_word` in the run's config, from the logits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from engine.attention import from_concatenated
from engine.errors import InputError
from engine.forward import Block, Network, Unembed
from engine.masks import MaskSpec
from engine.models.base import AttentionModel, Encoded, ModelInfo, NetworkCache, RunInput
from engine.models.declare import Capabilities, ModelSource
from engine.norms import LayerNorm

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
class Embedding:
    W_E: Tensor  # (V, D)
    W_pos: Tensor  # (n_ctx, D)


def load_checkpoint(path: Path) -> tuple[InductionConfig, list[str], Embedding, Network]:
    """The architecture and vocabulary (from the metadata) and the weights, split per head."""
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        sd = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (safe_open is not a dict)
    cfg = InductionConfig(**json.loads(meta["config"]))
    vocab = list(json.loads(meta["vocab"]))
    assert len(vocab) == cfg.vocab_size, (len(vocab), cfg.vocab_size)
    eps = cfg.layer_norm_eps
    blocks = tuple(
        Block(
            attn=from_concatenated(
                sd[f"blocks.{i}.W_Q"], sd[f"blocks.{i}.W_K"], sd[f"blocks.{i}.W_V"], sd[f"blocks.{i}.W_O"], cfg.n_heads
            ),
            residual=True,
            ln_pre=LayerNorm(sd[f"blocks.{i}.ln.weight"], sd[f"blocks.{i}.ln.bias"], eps),
        )
        for i in range(cfg.n_layers)
    )
    unembed = Unembed(LayerNorm(sd["ln_final.weight"], sd["ln_final.bias"], eps), sd["W_U"])
    return cfg, vocab, Embedding(sd["W_E"], sd["W_pos"]), Network(blocks, unembed)


class InductionModel(AttentionModel):
    """Built once: construction reads the checkpoint; runs only read the weights."""

    name = "induction"
    capabilities = Capabilities(cross_attention=False, predicts_tokens=True)
    pad_token = None  # no padding word in the vocabulary: a batch pads with zero vectors

    architecture = "pre-LN attention-only decoder: x' = x + Attention(LayerNorm(x)); logits = LayerNorm(x) W_U"

    @classmethod
    def build(cls, source: ModelSource | None = None) -> InductionModel:
        """From `source`, a directory holding induction.safetensors; else the checkpoint committed here."""
        return cls(CHECKPOINT if source is None else source.directory / CHECKPOINT.name)

    def __init__(self, path: Path = CHECKPOINT) -> None:
        self.cfg, self.vocab, self.embedding, net = load_checkpoint(path)
        self.net = NetworkCache(net)
        self.word_ids = {w: i for i, w in enumerate(self.vocab)}
        c = self.cfg
        self.info = ModelInfo(
            name=self.name,
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

    def encode_sequence(self, inp: RunInput) -> Encoded:
        """Words of `text` or `tokens`, validated against the vocabulary and the context length, embedded."""
        field_name = "tokens" if inp.tokens is not None else "text"
        words = list(inp.tokens) if inp.tokens is not None else (inp.text or "").split()
        if not words:
            raise InputError(field_name, "got no words: give at least one")
        if len(words) > self.cfg.n_ctx:
            raise InputError(
                field_name,
                f"got {len(words)} tokens, limit {self.cfg.n_ctx} "
                "(the induction model's trained positions): shorten the input",
            )
        for i, w in enumerate(words):
            if w not in self.word_ids:
                raise InputError(
                    field_name,
                    f"unknown word {w!r} at position {i}: the induction model knows {self.cfg.vocab_size} words "
                    "(listed in its vocab), lower-case, separated by spaces",
                )
        ids = torch.tensor([self.word_ids[w] for w in words])
        # (S, D) in float64, so a float64 run sums the embeddings at full precision
        x = self.embedding.W_E[ids].double() + self.embedding.W_pos[: len(words)].double()
        return Encoded(words, x, from_tokens=True)

    def token_pool(self) -> list[str]:
        return list(self.vocab)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        return self.net.on(device, dtype)

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        if token not in self.word_ids:
            raise InputError(
                "change.token",
                f"unknown word {token!r}: the induction model knows {self.cfg.vocab_size} words (listed in its vocab)",
            )
        return super().swap_token(inp, enc, position, token)
