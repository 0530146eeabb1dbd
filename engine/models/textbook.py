"""The course chapter's worked example: one head, 5 positions, 4 features, d_k = 2, d_v = 3."""

from __future__ import annotations

import torch

from engine.attention import from_concatenated
from engine.errors import InputError
from engine.forward import Network
from engine.masks import MaskSpec
from engine.models.base import AttentionModel, Encoded, ModelInfo, RunInput, one_layer
from engine.models.declare import Capabilities

X = [
    [1.0, 0.0, 0.2, 0.1],
    [0.8, 0.2, 0.1, 0.3],
    [0.1, 0.9, 0.3, 0.2],
    [0.3, 0.4, 0.8, 0.2],
    [0.2, 0.1, 0.6, 0.9],
]
W_Q = [[0.7, 0.0], [0.1, 0.6], [0.2, 0.4], [0.4, 0.1]]
W_K = [[0.5, 0.2], [0.2, 0.7], [0.6, 0.1], [0.1, 0.5]]
W_V = [[0.4, 0.1, 0.2], [0.2, 0.5, 0.1], [0.1, 0.3, 0.6], [0.5, 0.2, 0.2]]
TOKENS = ["x1", "x2", "x3", "x4", "x5"]


class TextbookModel(AttentionModel):
    name = "textbook"
    reads = frozenset({"text", "tokens", "x", "weights"})  # every number can be replaced; text labels the rows
    capabilities = Capabilities(batches=False)
    needs_input = False  # the chapter's own X
    info = ModelInfo(
        name=name,
        description=(
            "The chapter's worked example: one head over 5 positions with 4 features, d_k = 2, d_v = 3, "
            "no W_O. Default masks: causal, and position 5 is padding. Every number can be replaced."
        ),
        n_layers=1,
        n_heads=1,
        n_kv_heads=1,
        d_model=4,
        d_head=2,
        d_v=3,
        tokenizer="labels for the rows of X (one per position)",
        default_text=" ".join(TOKENS),
        default_masks=MaskSpec(causal=True, padding=(True, True, True, True, False)),
        defaults={"x": X, "w_q": W_Q, "w_k": W_K, "w_v": W_V},
    )

    def encode_sequence(self, inp: RunInput) -> Encoded:
        x = inp.x if inp.x is not None else torch.tensor(X, dtype=torch.float64)
        rows = x.shape[0]
        if inp.tokens is not None:
            tokens = list(inp.tokens)
        elif inp.text is not None:
            tokens = inp.text.split()
        else:
            tokens = TOKENS[:rows] if rows <= len(TOKENS) else [f"x{i + 1}" for i in range(rows)]
        if len(tokens) != rows:
            where = "rows of x" if inp.x is not None else "positions in the textbook example"
            field = "tokens" if inp.tokens is not None else "text"
            raise InputError(field, f"got {len(tokens)} tokens for {rows} {where}: give one label per position")
        return Encoded(tokens, x, from_tokens=False)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        given = inp.weights or {}
        w = from_concatenated(
            given.get("w_q", torch.tensor(W_Q, dtype=torch.float64)),
            given.get("w_k", torch.tensor(W_K, dtype=torch.float64)),
            given.get("w_v", torch.tensor(W_V, dtype=torch.float64)),
            given.get("w_o"),
            n_heads=inp.heads or 1,
            n_kv_heads=inp.kv_heads,
            d_model=inp.x.shape[1] if inp.x is not None else None,
        )
        return one_layer(w.to(device, dtype))
