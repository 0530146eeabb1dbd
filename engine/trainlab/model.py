"""The lab's model: GPT-2's shape (pre-LN, learned positions, an optional MLP), so that any snapshot is a gpt2
checkpoint that engine/models/checkpoint.py loads as it loads a user's.

    x_0 = wte[id] + wpe[position]                                               (B, T, D)
    per layer: a = x + Attention(ln_1(x));  x' = a + MLP(ln_2(a))               MLP only with spec.mlp
    Attention: q, k, v = ln_1(x) W_Q + b_Q, ...;  scores = q k^T / sqrt(d_head) (no division with scale off),
               causal mask unless spec.causal is False;  z = softmax(scores) v;  out = z W_O + b_O
    logits = ln_f(x) lm_head^T                                                  untied, as tie_word_embeddings false

Initialisation (spec.init): "default" draws each projection from N(0, 1 / fan_in) and the embeddings from
N(0, 0.1^2), as engine/train_induction.py's model; "gpt2" draws every matrix from N(0, 0.02^2) (the projections
into the residual stream 0.02 / sqrt(2 x layers), as GPT-2); "shared" is the default draw with ONE (D, d_head)
W_Q, W_K and W_V per layer that every head of the layer uses for the whole run (tied parameters, not a copy at
the start), so every head of a layer always computes the same pattern.

Training runs attention with torch's fused scaled_dot_product_attention; `forward(tokens, record=[])` computes it
step by step instead and appends each layer's scores and weights (B, H, T, T) to the list: the probe's measures
come from those. The written checkpoint (gpt2_state, gpt2_config) holds zero MLP weights for an attention-only
model (the MLP then adds exactly 0), each shared projection repeated per head, and under config.json's "attnlab"
key the settings transformers' gpt2 has no field for ("causal": false opens it without the causal mask).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.trainlab.spec import MLP_FACTOR, TrainSpec, d_head

LAYER_NORM_EPS = 1e-5
ACTIVATION = "gelu_new"  # GPT-2's tanh GELU, the activation the gpt2 family reads
Record = list[tuple[Tensor, Tensor]]  # per layer: scores and weights, each (B, H, T, T)


def draw(gen: torch.Generator, rows: int, cols: int, std: float) -> nn.Parameter:
    return nn.Parameter(torch.randn(rows, cols, generator=gen) * std)


def zeros(n: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(n))


class Block(nn.Module):
    def __init__(self, spec: TrainSpec, gen: torch.Generator) -> None:
        super().__init__()
        d, self.n_heads, self.d_head = spec.width, spec.heads, d_head(spec)
        self.shared = spec.init == "shared"
        self.causal, self.scale = spec.causal, spec.scale
        gpt2 = spec.init == "gpt2"
        into, out = (0.02, 0.02 / math.sqrt(2 * spec.layers)) if gpt2 else (d**-0.5, d**-0.5)
        qkv = self.d_head if self.shared else d  # shared: one head's columns, used by every head
        self.ln_1 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.W_Q, self.W_K, self.W_V = (draw(gen, d, qkv, into) for _ in range(3))  # (D, H * d_head) or (D, d_head)
        self.b_Q, self.b_K, self.b_V = zeros(qkv), zeros(qkv), zeros(qkv)
        self.W_O, self.b_O = draw(gen, d, d, out), zeros(d)  # (H * d_head, D)
        self.mlp = spec.mlp
        if spec.mlp:
            m = MLP_FACTOR * d
            self.ln_2 = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
            self.W_in, self.b_in = draw(gen, d, m, 0.02 if gpt2 else d**-0.5), zeros(m)
            self.W_out, self.b_out = draw(gen, m, d, out if gpt2 else m**-0.5), zeros(d)

    def projections(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """W_Q, W_K, W_V (D, H * d_head) and their biases (H * d_head,), a shared head repeated per head."""
        found = (self.W_Q, self.W_K, self.W_V, self.b_Q, self.b_K, self.b_V)
        if not self.shared:
            return found
        return tuple(t.repeat(1, self.n_heads) if t.dim() == 2 else t.repeat(self.n_heads) for t in found)  # type: ignore[return-value]

    def forward(self, x: Tensor, record: Record | None = None) -> Tensor:
        x = x + self.attention(self.ln_1(x), record)
        if self.mlp:
            x = x + F.gelu(self.ln_2(x) @ self.W_in + self.b_in, approximate="tanh") @ self.W_out + self.b_out
        return x

    def attention(self, h: Tensor, record: Record | None) -> Tensor:
        b, t, _ = h.shape
        W_Q, W_K, W_V, b_Q, b_K, b_V = self.projections()

        def heads(z: Tensor) -> Tensor:  # (B, T, H * d_head) -> (B, H, T, d_head)
            return z.view(b, t, self.n_heads, self.d_head).transpose(1, 2)

        q, k, v = heads(h @ W_Q + b_Q), heads(h @ W_K + b_K), heads(h @ W_V + b_V)
        factor = self.d_head**-0.5 if self.scale else 1.0
        if record is None:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=factor)
        else:
            scores = (q @ k.transpose(-1, -2)) * factor  # (B, H, T, T)
            if self.causal:
                future = torch.ones(t, t, dtype=torch.bool, device=h.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            weights = scores.softmax(dim=-1)
            record.append((scores, weights))
            z = weights @ v
        return z.transpose(1, 2).reshape(b, t, -1) @ self.W_O + self.b_O


class TrainModel(nn.Module):
    def __init__(self, spec: TrainSpec, vocab_size: int, gen: torch.Generator) -> None:
        super().__init__()
        d = spec.width
        embed_std = 0.02 if spec.init == "gpt2" else 0.1
        self.wte = draw(gen, vocab_size, d, embed_std)  # (V, D)
        self.wpe = draw(gen, spec.positions, d, embed_std)  # (T, D)
        self.blocks = nn.ModuleList(Block(spec, gen) for _ in range(spec.layers))
        self.ln_f = nn.LayerNorm(d, eps=LAYER_NORM_EPS)
        self.lm_head = draw(gen, vocab_size, d, 0.02 if spec.init == "gpt2" else d**-0.5)  # (V, D)

    def forward(self, tokens: Tensor, record: Record | None = None) -> Tensor:
        """tokens (B, T) -> logits (B, T, V); with `record`, each layer's scores and weights appended to it."""
        x = self.wte[tokens] + self.wpe[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, record)
        return self.ln_f(x) @ self.lm_head.T


def next_token_losses(logits: Tensor, tokens: Tensor) -> Tensor:
    """(B, T, V), (B, T) -> (B, T - 1): the loss of predicting token t + 1 at position t."""
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")


def mean_loss(losses: Tensor, counted: Tensor | None) -> Tensor:
    return losses.mean() if counted is None else losses[counted].mean()


def parameter_groups(model: TrainModel) -> dict[str, list[Tensor]]:
    """The gradient-norm groups: embed, positions, layerN.attn (ln_1 and the projections), layerN.mlp, unembed."""
    groups: dict[str, list[Tensor]] = {"embed": [model.wte], "positions": [model.wpe]}
    for i, block in enumerate(model.blocks):
        assert isinstance(block, Block)
        groups[f"layer{i}.attn"] = [*block.ln_1.parameters(), block.W_Q, block.W_K, block.W_V]
        groups[f"layer{i}.attn"] += [block.b_Q, block.b_K, block.b_V, block.W_O, block.b_O]
        if block.mlp:
            groups[f"layer{i}.mlp"] = [*block.ln_2.parameters(), block.W_in, block.b_in, block.W_out, block.b_out]
    groups["unembed"] = [*model.ln_f.parameters(), model.lm_head]
    return groups


@torch.no_grad()
def gpt2_state(model: TrainModel) -> dict[str, Tensor]:
    """The model's weights under GPT2LMHeadModel's names (Conv1D weights are (in, out), as W here)."""
    d = model.wte.shape[1]
    out: dict[str, Tensor] = {"transformer.wte.weight": model.wte, "transformer.wpe.weight": model.wpe}
    for i, block in enumerate(model.blocks):
        assert isinstance(block, Block)
        p = f"transformer.h.{i}"
        W_Q, W_K, W_V, b_Q, b_K, b_V = block.projections()
        out |= {f"{p}.ln_1.weight": block.ln_1.weight, f"{p}.ln_1.bias": block.ln_1.bias}
        out |= {f"{p}.attn.c_attn.weight": torch.cat([W_Q, W_K, W_V], dim=1)}
        out |= {f"{p}.attn.c_attn.bias": torch.cat([b_Q, b_K, b_V])}
        out |= {f"{p}.attn.c_proj.weight": block.W_O, f"{p}.attn.c_proj.bias": block.b_O}
        m = MLP_FACTOR * d
        if block.mlp:
            out |= {f"{p}.ln_2.weight": block.ln_2.weight, f"{p}.ln_2.bias": block.ln_2.bias}
            out |= {f"{p}.mlp.c_fc.weight": block.W_in, f"{p}.mlp.c_fc.bias": block.b_in}
            out |= {f"{p}.mlp.c_proj.weight": block.W_out, f"{p}.mlp.c_proj.bias": block.b_out}
        else:  # attention-only: an MLP of zeros adds exactly 0 to the residual stream
            out |= {f"{p}.ln_2.weight": torch.ones(d), f"{p}.ln_2.bias": torch.zeros(d)}
            out |= {f"{p}.mlp.c_fc.weight": torch.zeros(d, m), f"{p}.mlp.c_fc.bias": torch.zeros(m)}
            out |= {f"{p}.mlp.c_proj.weight": torch.zeros(m, d), f"{p}.mlp.c_proj.bias": torch.zeros(d)}
    out |= {"transformer.ln_f.weight": model.ln_f.weight, "transformer.ln_f.bias": model.ln_f.bias}
    out["lm_head.weight"] = model.lm_head
    return {name: t.detach().to(torch.float32).clone().contiguous() for name, t in out.items()}


def gpt2_config(spec: TrainSpec, vocab_size: int, step: int) -> dict[str, Any]:
    """config.json as transformers writes a GPT2LMHeadModel's, with the lab's own settings under "attnlab"."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": vocab_size,
        "n_positions": spec.positions,
        "n_embd": spec.width,
        "n_layer": spec.layers,
        "n_head": spec.heads,
        "n_inner": MLP_FACTOR * spec.width,
        "activation_function": ACTIVATION,
        "layer_norm_epsilon": LAYER_NORM_EPS,
        "scale_attn_weights": spec.scale,
        "tie_word_embeddings": False,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "torch_dtype": "float32",
        "attnlab": {
            "causal": spec.causal,
            "task": spec.task,
            "mlp": spec.mlp,
            "init": spec.init,
            "step": step,
            "seed": spec.seed,
        },
    }
