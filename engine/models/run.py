"""What a run reads and returns: the model's description, the parsed input, the input tokenised and embedded
once, and the run with every layer's named tensors. Plain data; AttentionModel in base.py produces it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from engine.attention import AllMaskedPolicy
from engine.errors import InputError
from engine.forward import ForwardResult, LayerKind, LayerTrace
from engine.hooks import cache, stored
from engine.interventions import NO_INTERVENTIONS, Interventions
from engine.masks import MaskSpec, batch_reason_grids, cross_reason_grids, reason_grids


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    n_layers: int
    n_heads: int  # per layer (for models with options, at the default options)
    n_kv_heads: int
    d_model: int
    d_head: int  # key/query width per head
    d_v: int  # value width per head
    max_tokens: int | None = None  # the model's own limit (positions it has embeddings for)
    tokenizer: str = "whitespace"
    default_text: str | None = None
    default_masks: MaskSpec | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the options the model takes: option -> default value
    defaults: dict[str, Any] = field(default_factory=dict)  # the numbers it runs on where a request gives none
    vocab: list[str] | None = None
    family: str | None = None  # a checkpoint's config model_type ("gpt2", "llama", ...)
    vocab_size: int | None = None  # ids the model embeds and predicts over, where it has a vocabulary of ids
    max_positions: int | None = None  # positions the model was made for (a checkpoint's config)
    experts: tuple[int, int] | None = None  # a mixture of experts: (experts per layer, experts each position uses)
    sinks: bool = False  # its layers have learned per-head sink logits (gpt-oss)
    layer_kinds: tuple[LayerKind, ...] | None = None  # each layer's kind (local or global); None: every one global


@dataclass(frozen=True)
class SourceInput:
    """Cross-attention: the sequence keys and values come from (queries come from the run's own input)."""

    text: str | None = None
    tokens: list[str] | None = None
    x: Tensor | None = None  # (S_k, D)
    padding: tuple[bool, ...] | None = None  # one per source position: True = real, False = padding


@dataclass
class RunInput:
    """One request to a model, already parsed. Tensors are (S, D)."""

    text: str | None = None
    tokens: list[str] | None = None
    x: Tensor | None = None
    texts: list[str] | None = None  # a batch: each text tokenised, all padded to the longest
    source: SourceInput | None = None  # cross-attention
    weights: dict[str, Tensor] | None = None  # w_q, w_k, w_v, optional w_o: D x (heads * width)
    heads: int | None = None
    kv_heads: int | None = None
    head_widths: tuple[int, ...] | None = None  # custom weights: each head's own d_k (engine/unequal.py)
    options: dict[str, Any] = field(default_factory=dict)
    masks: MaskSpec | None = None  # None: the model's default masks
    scale: bool = True
    all_masked: AllMaskedPolicy = "error"
    last_layer: int | None = None  # compute layers 0..last_layer; None: all
    scores: Tensor | None = None  # (S, S) a score matrix typed in, used as given (engine/models/given.py)
    pattern: Tensor | None = None  # (S, S) attention weights typed in, used as given
    values: Tensor | None = None  # (S, d_v) value vectors for the contexts of typed-in scores or weights
    pixels: Tensor | None = None  # (C, H, W) or (B, C, H, W) an image resized and normalised (image models)


@dataclass(frozen=True)
class InputShape:
    """What a run of one input will be, known before it runs: the model's layers and heads for this input, their
    widths, and what its answer can hold. `AttentionModel.encode` gives it with the encoding, so a caller bounds a
    run from the encoding alone and never asks the model again. Widths that options or custom weights set are known
    only once the network is built (the run's RunConfig has them): None here; a width it gives is the run's."""

    n_layers: int  # layers the model has
    n_heads: int  # query heads per layer
    d_model: int | None  # width of x_0
    d_head: int | None  # query/key width per head
    d_v: int | None  # value width per head
    final: int  # columns of the final output: the vocabulary where the model predicts tokens, else its width (>= 1)
    top_k: int  # experts each position uses in a mixture of experts; 0 where the feed-forward is dense
    local: tuple[bool, ...]  # per layer: it has a window of its own (a local layer); () where every layer is global
    masks: MaskSpec  # the masks asked for, else the model's own (their padding fitted to the length at the run)


@dataclass(frozen=True)
class Encoded:
    """An input tokenised and embedded once: the request's tokens and the x_0 that layer 0 reads, and the shape of
    the run that reads them."""

    tokens: list[str]  # for a batch: the first item's, padded
    x: Tensor  # (S, D) on the CPU, before any intervention; (B, S, D) for a batch
    from_tokens: bool  # x was computed from the token strings, so swapping a token means something
    unknown: tuple[tuple[int, str], ...] = ()  # (position, given string) for tokens outside the vocabulary
    batch_tokens: tuple[tuple[str, ...], ...] | None = None  # a batch: B x S labels, padded with [PAD]
    real: tuple[tuple[bool, ...], ...] | None = None  # a batch: B x S, False where an item is padding
    source: Encoded | None = None  # cross-attention: keys and values come from this sequence
    source_padding: tuple[bool, ...] | None = None  # one per source position: False = padding
    special: tuple[bool, ...] | None = None  # one per position: True = a special token the tokenizer added
    shape: InputShape | None = None  # what its run will be; None before encode gives it (encode_sequence's)
    patch_grid: tuple[int, int] | None = None  # an image's (rows, cols) of patches; None for a text

    @property
    def batch(self) -> int | None:
        return None if self.batch_tokens is None else len(self.batch_tokens)


@dataclass(frozen=True)
class RunConfig:
    """What a run computed, for the page and scripts to read."""

    n_layers: int  # layers the model has
    layers_computed: int  # layers this run computed (0..layer)
    n_heads: int  # query heads per layer
    n_kv_heads: int  # K/V groups per layer
    d_model: int  # width of x_0
    d_head: int  # query/key width per head
    d_v: int  # value width per head
    d_out: int  # width of the attention output (after W_O, or the concatenation)
    has_w_o: bool
    scale_factor: float  # what Q K^T was multiplied by
    architecture: str  # the block's data flow, in words
    d_mlp: int | None = None  # feed-forward width, for models with one
    unknown_tokens: tuple[dict[str, Any], ...] = ()  # [{position, given}] mapped to [UNK]
    next_word: tuple[dict[str, Any], ...] = ()  # per position, the most likely next token and its probability
    batch: int | None = None  # B, for a batch of texts
    source_len: int | None = None  # S_k, for cross-attention
    special: tuple[bool, ...] | None = None  # per position, a special token ([CLS], <s>...); None: not known
    head_widths: tuple[int, ...] | None = None  # heads of unequal widths: each head's d_k (custom head_widths)
    value_widths: tuple[int, ...] | None = None  # and each head's d_v
    patch_grid: tuple[int, int] | None = None  # an image's (rows, cols) of patches (tokens p(row,col)); None: a text


@dataclass
class ModelRun:
    model: str
    tokens: list[str]
    masks: MaskSpec
    eligible: Tensor  # (S, S)
    result: ForwardResult
    config: RunConfig
    interventions: Interventions = NO_INTERVENTIONS
    timings_ms: dict[str, float] = field(default_factory=dict)
    batch_tokens: tuple[tuple[str, ...], ...] | None = None  # a batch: every item's labels, padded
    batch_padding: tuple[tuple[bool, ...], ...] | None = None  # a batch: B x S, False where an item is padding
    source_tokens: list[str] | None = None  # cross-attention: the key/value sequence's labels
    source_padding: tuple[bool, ...] | None = None  # cross-attention: False where a source position is padding
    breaks: dict[str, str] = field(default_factory=dict)  # the model's: statistics' assumptions that fail, and why
    # the masks described at the run, so that an answer is written from the run's data alone: their plain values
    # ({causal, padding, window, blocked}: MaskSpec.to_dict) and, for one sequence (no batch, no source), how many
    # (query, key) pairs each leaves eligible on its own and all together (engine/masks.py pair_counts; else None)
    mask_values: dict[str, Any] = field(default_factory=dict)
    pairs: dict[str, int] | None = None

    @property
    def layers(self) -> list[LayerTrace]:
        return self.result.layers

    @property
    def logits(self) -> Tensor | None:
        return self.result.logits

    def reason_grids(self) -> dict[str, Tensor]:
        """Why each cell of `eligible` is masked, one grid of its shape per mask in force (True = that mask excludes
        the cell): (S, S), (B, S, S) for a batch (each item's own padding), (S, S_k) with a source. A cell is eligible
        exactly when no grid marks it."""
        s = len(self.tokens)
        if self.batch_padding is not None:
            return batch_reason_grids(self.masks, self.batch_padding, s)
        if self.source_tokens is not None:
            return cross_reason_grids(self.masks, s, len(self.source_tokens), self.source_padding)
        return reason_grids(self.masks, s)

    def cache(self) -> dict[str, Tensor]:
        """Every intermediate by TransformerLens's hook name: blocks.0.attn.hook_pattern, ... (engine/hooks.py)."""
        return cache(self.result)

    def tensors(self) -> list[Tensor]:
        """The tensors the run holds (what its bytes are), nothing worked out from them."""
        return [self.eligible, *stored(self.result)]


def top_predictions(logits: Tensor, vocab: list[str], k: int) -> list[list[dict[str, Any]]]:
    """logits (S, V) -> per position the k most likely next tokens, [{token, p}], most likely first."""
    logits = logits.float()  # (S, V); no (S, V) softmax is made: p = exp(logit - logsumexp) for the k alone
    top, idx = logits.topk(min(k, logits.shape[-1]), dim=-1)
    p = (top - logits.logsumexp(dim=-1, keepdim=True)).exp()
    return [
        [{"token": vocab[int(i)], "p": float(v)} for v, i in zip(pr, ir, strict=True)]
        for pr, ir in zip(p.tolist(), idx.tolist(), strict=True)
    ]


def row_labels(inp: RunInput, rows: int, of: str) -> list[str]:
    """Labels for the `rows` rows of a matrix the person gave (`of`: "x", "scores"): `tokens` as given, `text` split
    at whitespace, else x1..xS; a count that does not match the rows is refused by the field that gave it."""
    if inp.tokens is not None:
        tokens = list(inp.tokens)
    elif inp.text is not None:
        tokens = inp.text.split()
    else:
        tokens = [f"x{i + 1}" for i in range(rows)]
    if len(tokens) != rows:
        field = "tokens" if inp.tokens is not None else "text"
        raise InputError(field, f"got {len(tokens)} token labels for {rows} rows of {of}: give one per row")
    return tokens


def whitespace_tokens(inp: RunInput) -> list[str]:
    if inp.tokens is not None:
        tokens = list(inp.tokens)
        field_name = "tokens"
    elif inp.text is not None:
        tokens = inp.text.split()
        field_name = "text"
    else:
        raise InputError("text", "give one of text, tokens or x")
    if not tokens:
        raise InputError(field_name, "got no tokens: give at least one")
    return tokens
