"""One untrained multi-head attention layer with seeded weights.

Token embeddings are a deterministic function of the token string (and the seed), so a repeated
token gets the same vector. Without positional encodings attention is permutation-equivariant:
reorder the tokens and the weights reorder with them. `positions=True` adds sinusoidal encodings.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from engine.attention import AttentionWeights, from_concatenated
from engine.errors import InputError
from engine.forward import Network
from engine.models.base import (
    AttentionModel,
    Encoded,
    ModelInfo,
    RunInput,
    one_layer,
    whitespace_tokens,
)


@dataclass(frozen=True)
class RandomConfig:
    d_model: int = 64  # width of the token vectors
    heads: int = 4  # query heads; d_head = d_model / heads
    kv_heads: int | None = None  # K/V groups (None: one per head); must divide heads
    seed: int = 0  # seeds the weights and the token embeddings
    positions: bool = False  # add sinusoidal position encodings to the embeddings

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads


OPTIONS = {f.name: f.default for f in fields(RandomConfig)}  # option -> default, as /api/models serves them
OPTION_NAMES = tuple(OPTIONS)


def parse_config(options: dict[str, Any]) -> RandomConfig:
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise InputError(f"options.{unknown[0]}", f"unknown option; random takes {', '.join(OPTION_NAMES)}")
    cfg = RandomConfig(**{k: v for k, v in options.items() if v is not None})
    if cfg.d_model < 1:
        raise InputError("options.d_model", f"got width {cfg.d_model}: width must be >= 1")
    if cfg.heads < 1:
        raise InputError("options.heads", f"got {cfg.heads} heads: need at least 1")
    if cfg.d_model % cfg.heads:
        raise InputError("options.heads", f"got {cfg.heads} heads for width {cfg.d_model}: width must divide by heads")
    if cfg.n_kv_heads < 1 or cfg.heads % cfg.n_kv_heads:
        raise InputError(
            "options.kv_heads", f"got {cfg.n_kv_heads} K/V heads for {cfg.heads} heads: heads must divide by kv_heads"
        )
    if not 0 <= cfg.seed < 2**63:
        raise InputError("options.seed", f"got seed {cfg.seed}: must be in 0..2^63-1")
    return cfg


def token_embedding(token: str, d_model: int, seed: int) -> Tensor:
    """A fixed N(0, 1) vector per (token string, seed): same token, same vector."""
    digest = hashlib.sha256(f"{seed}\x00{token}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))
    return torch.randn(d_model, generator=gen, dtype=torch.float64)


def sinusoidal_positions(seq_len: int, d_model: int) -> Tensor:
    """(S, D): PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(p / 10000^(2i/D))."""
    pos = torch.arange(seq_len, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(seq_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return pe


def layer_weights(cfg: RandomConfig) -> AttentionWeights:
    """Weights ~ N(0, 1/D), so with N(0, 1) embeddings Q and K entries have unit variance."""
    gen = torch.Generator().manual_seed(cfg.seed)
    d, h, g = cfg.d_model, cfg.heads, cfg.n_kv_heads
    d_head = d // h

    def draw(rows: int, cols: int) -> Tensor:
        return torch.randn(rows, cols, generator=gen, dtype=torch.float64) / math.sqrt(rows)

    return from_concatenated(draw(d, h * d_head), draw(d, g * d_head), draw(d, g * d_head), draw(d, d), h, g)


class RandomModel(AttentionModel):
    name = "random"
    reads = frozenset({"text", "tokens", "x", "options"})
    info = ModelInfo(
        name=name,
        description=(
            "One untrained multi-head layer with seeded weights. Options: d_model, heads, kv_heads (grouped "
            "K/V), seed, positions (sinusoidal). Embeddings depend only on the token string, so without "
            "positions attention is permutation-equivariant."
        ),
        n_layers=1,
        n_heads=RandomConfig.heads,
        n_kv_heads=RandomConfig.heads,
        d_model=RandomConfig.d_model,
        d_head=RandomConfig.d_model // RandomConfig.heads,
        d_v=RandomConfig.d_model // RandomConfig.heads,
        tokenizer="whitespace",
        default_text="the cat sat on the mat",
        options=OPTIONS,
    )

    def token_pool(self) -> list[str]:
        """Any string is a token here; probe sequences draw from w0 .. w999."""
        return [f"w{i}" for i in range(1000)]

    def n_heads(self, inp: RunInput) -> int:
        return parse_config(inp.options).heads

    def encode_sequence(self, inp: RunInput) -> Encoded:
        cfg = parse_config(inp.options)
        if inp.x is not None:
            tokens = [f"x{i + 1}" for i in range(inp.x.shape[0])]
            if inp.text is not None or inp.tokens is not None:
                tokens = whitespace_tokens(inp)
            if len(tokens) != inp.x.shape[0]:
                field = "tokens" if inp.tokens is not None else "text"
                raise InputError(
                    field, f"got {len(tokens)} token labels for {inp.x.shape[0]} rows of x: give one per row"
                )
            if inp.x.shape[1] != cfg.d_model:
                raise InputError("x", f"has width {inp.x.shape[1]} but the random layer has d_model = {cfg.d_model}")
            return Encoded(tokens, inp.x, from_tokens=False)
        tokens = whitespace_tokens(inp)
        return Encoded(tokens, self.embed(tokens, cfg), from_tokens=True)

    def embed(self, tokens: list[str], cfg: RandomConfig) -> Tensor:
        x = torch.stack([token_embedding(t, cfg.d_model, cfg.seed) for t in tokens])
        if cfg.positions:
            x = x + sinusoidal_positions(len(tokens), cfg.d_model)
        return x

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        return one_layer(layer_weights(parse_config(inp.options)).to(device, dtype))
