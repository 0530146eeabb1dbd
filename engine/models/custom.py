"""Your own numbers: an S x D matrix X and the projection matrices, one layer."""

from __future__ import annotations

from dataclasses import replace

import torch

from engine.attention import from_concatenated
from engine.errors import InputError
from engine.forward import ForwardResult, Network
from engine.models.base import AttentionModel, Encoded, ModelInfo, RunInput, one_layer, row_labels
from engine.models.declare import Capabilities
from engine.models.run import RunConfig


class CustomModel(AttentionModel):
    name = "custom"
    reads = frozenset({"text", "tokens", "x", "weights"})  # text and tokens label the rows of x
    capabilities = Capabilities(batches=False)
    serves_bare_x = True
    info = ModelInfo(
        name=name,
        description=(
            "Your own X (S x D) and weights w_q, w_k (D x heads*d_k), w_v (D x heads*d_v), optional w_o; "
            "`heads` says how many heads the columns hold, `kv_heads` how many K/V groups."
        ),
        n_layers=1,
        n_heads=1,
        n_kv_heads=1,
        d_model=0,
        d_head=0,
        d_v=0,
        tokenizer="labels for the rows of x (default x1..xS)",
    )

    def encode_sequence(self, inp: RunInput) -> Encoded:
        if inp.x is None:
            raise InputError("x", "the custom model needs x (S x D numbers) and weights")
        tokens = row_labels(inp, inp.x.shape[0], "x")
        return Encoded(tokens, inp.x, from_tokens=False)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        if inp.weights is None:
            raise InputError("weights", "x needs weights {w_q, w_k, w_v, optional w_o} to compute attention")
        w = from_concatenated(
            inp.weights["w_q"],
            inp.weights["w_k"],
            inp.weights["w_v"],
            inp.weights.get("w_o"),
            n_heads=inp.heads or 1,
            n_kv_heads=inp.kv_heads,
            d_model=inp.x.shape[1] if inp.x is not None else None,
            head_widths=inp.head_widths,
        )
        return one_layer(w.to(device, dtype))

    def run_config(self, net: Network, fwd: ForwardResult, enc: Encoded) -> RunConfig:
        """With head_widths: each head's d_k and d_v (d_head and d_v are then the widest; scale_factor head 0's)."""
        w = net.blocks[0].attn
        config = super().run_config(net, fwd, enc)
        return replace(config, head_widths=w.head_widths, value_widths=w.value_widths)
