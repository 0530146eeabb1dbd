"""What every attention source ("model") offers: a description, an encoder and a network; one shared run.

A model only says how it reads an input (`encode`: tokens and x_0) and what its layers are (`network`);
`AttentionModel.run` is the one run set-up every model shares (masks, device, the forward pass of
engine.forward with any interventions), so the web layer, the analyses and the tests all read the same
named tensors the forward pass produced.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from engine import stop
from engine.attention import AttentionWeights
from engine.errors import InputError
from engine.forward import Block, ForwardResult, Network, forward, narrowest
from engine.interventions import NO_INTERVENTIONS, Interventions
from engine.masks import MaskSpec, batch_policy, cross_eligibility, eligibility, pair_counts, within_window
from engine.models.declare import HEAD_COUNTS, INPUT_FIELDS, Capabilities, InputField, ModelSource, able, reading
from engine.models.run import (
    Encoded,
    InputShape,
    ModelInfo,
    ModelRun,
    RunConfig,
    RunInput,
    SourceInput,
    row_labels,
    top_predictions,
    whitespace_tokens,
)
from engine.timing import timed

# the run's data types live in run.py; they stay importable from here
__all__ = [
    "AttentionModel",
    "Encoded",
    "InputShape",
    "ModelInfo",
    "ModelRun",
    "NetworkCache",
    "RunConfig",
    "RunInput",
    "SourceInput",
    "one_layer",
    "row_labels",
    "top_predictions",
    "whitespace_tokens",
]


class AttentionModel(ABC):
    """A model says how it reads an input (`encode`) and what its layers are (`network`); `run` is shared.

    Its declaration (engine/models/declare.py) is the class attributes below: a new model family sets them and
    writes `encode_sequence` and `network`; the checks, /api/models and every message pointing to other models
    read them."""

    name: ClassVar[str]  # the model's name in requests and in the registry (engine/models/__init__.py)
    reads: ClassVar[frozenset[InputField]] = frozenset({"text", "tokens"})
    capabilities: ClassVar[Capabilities] = Capabilities()
    breaks: ClassVar[Mapping[str, str]] = {}  # a statistic's assumption (engine/stats.py) -> why it fails here
    install: ClassVar[str | None] = None  # the command that installs the package its weights come from
    needs_input: ClassVar[bool] = True  # False: it runs on its own numbers when a request gives no input
    serves_bare_x: ClassVar[bool] = False  # the model a request with x (and weights) but no model name runs on
    info: ModelInfo
    architecture: str = "one multi-head attention layer: the output is the attention output itself"
    pad_token: str | None = "[PAD]"  # what a batch pads short items with; None: zero vectors

    @classmethod
    def build(cls, source: ModelSource | None = None) -> AttentionModel:
        """The model, its weights read from `source` (a checkpoint directory) or its own default."""
        if source is not None:
            raise ValueError(f"{cls.name} makes its own weights: it reads no checkpoint (got {source.directory})")
        return cls()

    def __repr__(self) -> str:
        """One line, as a notebook prints a model: its name, family, size and (a checkpoint) its match to
        transformers: <attnlab model mine: llama, 2 layers x 4 heads, width 32; matches transformers 5.24.0 to 3e-7>"""
        i = self.info

        def count(n: int, what: str) -> str:
            return f"{n} {what}{'' if n == 1 else 's'}"

        said = f"<attnlab model {self.name}: {i.family or self.name}, {count(i.n_layers, 'layer')} x "
        said += f"{count(i.n_heads, 'head')}, width {i.d_model}"
        ref: dict[str, Any] | None = getattr(self, "reference", None)
        if ref and ref.get("max_abs_diff"):
            worst = max(ref["max_abs_diff"].values())
            size = "0" if worst == 0 else f"{worst:.0e}".replace("e-0", "e-")
            # past 1e-4 in float32 a weight is mapped wrong, as the page says it (static/js/modelinfo.js)
            match = f"matches {ref['library']} to" if worst <= 1e-4 else f"differs from {ref['library']} by up to"
            said += f"; {match} {size}"
        elif ref:
            said += f"; not compared with transformers: {ref.get('reason')}"
        return said + ">"

    @abstractmethod
    def encode_sequence(self, inp: RunInput) -> Encoded:
        """Validate one sequence's input, tokenise it and build x_0 (S, D) on the CPU."""

    @abstractmethod
    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        """The blocks (and unembedding) this input runs through, on `device` in `dtype`."""

    def encode(self, inp: RunInput) -> Encoded:
        """The input as a run reads it: one sequence, a batch of texts padded to the longest, or a sequence with
        a cross-attention source; with the shape of its run (`input_shape`)."""
        self.refuse_unread(inp)
        if inp.texts is not None:
            if inp.source is not None:
                raise InputError("source", "a batch of texts and a cross-attention source cannot be combined")
            enc = self.encode_batch(inp)
        else:
            enc = self.encode_sequence(inp)
        if inp.source is not None:
            src = self.encode_source(inp)
            padding = inp.source.padding
            if padding is not None and len(padding) != len(src.tokens):
                raise InputError(
                    "source.padding",
                    f"got {len(padding)} padding flags for {len(src.tokens)} source positions: give one per position",
                )
            enc = replace(enc, source=src, source_padding=padding)
        return replace(enc, shape=self.input_shape(inp))

    def input_shape(self, inp: RunInput) -> InputShape:
        """What a run of `inp` will be, from the model's declaration and the input's options: its layers and heads,
        their widths where the model declares them (options, custom weights or typed-in matrices set them at the
        run), its final output's columns, its experts, its local layers and the masks it asks for."""
        info = self.info
        own = not (inp.options or inp.weights)
        if self.capabilities.predicts_tokens:
            final = len(info.vocab) if info.vocab else info.vocab_size or 1
        else:
            final = info.d_model or 1  # a lower bound where options or weights set the width
        return InputShape(
            n_layers=self.n_layers(inp),
            n_heads=self.n_heads(inp),
            d_model=info.d_model or None if own else None,  # 0: the model's width is its input's (custom, given)
            d_head=info.d_head or None if own else None,
            d_v=info.d_v or None if own else None,
            final=final,
            top_k=info.experts[1] if info.experts is not None else 0,
            local=tuple(kind.window is not None for kind in info.layer_kinds or ()),
            masks=inp.masks if inp.masks is not None else info.default_masks or MaskSpec(),
        )

    def encode_source(self, inp: RunInput) -> Encoded:
        """The cross-attention source, read the way this model reads its own input."""
        assert inp.source is not None
        if not self.capabilities.cross_attention:
            raise InputError(
                "source",
                f"{self.name} has no cross-attention weights; models with cross-attention: {able('cross_attention')}",
            )
        src = inp.source
        given = [name for name in ("text", "tokens", "x") if getattr(src, name) is not None]
        if not given:
            raise InputError("source", "give the source as text, tokens or x")
        for name in given:
            if name not in self.reads:
                raise InputError(f"source.{name}", self.unread(name))
        try:
            return self.encode_sequence(replace(inp, text=src.text, tokens=src.tokens, x=src.x, source=None))
        except InputError as err:
            raise InputError(f"source.{err.field}", err.message) from err

    def encode_batch(self, inp: RunInput) -> Encoded:
        """Each text tokenised alone, then padded to the longest with `pad_token` (or zero vectors)."""
        assert inp.texts is not None
        if not self.capabilities.batches:
            raise InputError("texts", f"{self.name} takes no batch of texts; models that take one: {able('batches')}")
        if not inp.texts:
            raise InputError("texts", "got no texts: give at least one")
        items = []
        for i, text in enumerate(inp.texts):
            try:
                items.append(self.encode_sequence(replace(inp, text=text, tokens=None, texts=None)))
            except InputError as err:
                raise InputError(f"texts[{i}]", err.message) from err
        s = max(len(item.tokens) for item in items)
        xs, labels, real = [], [], []
        for item in items:
            n = len(item.tokens)
            padded = item.tokens + ["[PAD]"] * (s - n)
            if n == s:
                x = item.x
            elif self.pad_token is not None and item.from_tokens:
                pad_tokens = item.tokens + [self.pad_token] * (s - n)
                x = self.encode_sequence(replace(inp, text=None, tokens=pad_tokens, texts=None)).x
            else:
                x = torch.cat([item.x, item.x.new_zeros(s - n, item.x.shape[1])])
            xs.append(x.to(items[0].x.dtype))
            labels.append(tuple(padded))
            real.append(tuple([True] * n + [False] * (s - n)))
        return Encoded(
            tokens=list(labels[0]),
            x=torch.stack(xs),
            from_tokens=items[0].from_tokens,
            batch_tokens=tuple(labels),
            real=tuple(real),
        )

    def refuse_unread(self, inp: RunInput) -> None:
        """The one check of what a model reads: an input field it does not read is a 422 naming the field, never
        silently ignored; so is an option it does not take, and a head count where its weights are its own."""
        for name in INPUT_FIELDS:
            value = getattr(inp, name)
            if name not in self.reads and (bool(value) if name == "options" else value is not None):
                raise InputError(f"options.{sorted(value)[0]}" if name == "options" else name, self.unread(name))
        unknown = sorted(set(inp.options) - set(self.info.options))
        if unknown:
            raise InputError(
                f"options.{unknown[0]}", f"unknown option; {self.name} takes {', '.join(self.info.options)}"
            )
        if "weights" in self.reads:
            return
        for count in HEAD_COUNTS:
            if getattr(inp, count) is not None:
                where = f"set by options.{count}" if count in self.info.options else f"{self.info.n_heads} per layer"
                raise InputError(count, f"{self.name} has its own heads ({where}): leave {count} out")

    def unread(self, name: str) -> str:
        """Why `name` is refused, and which models read it."""
        reads = ", ".join(f for f in INPUT_FIELDS if f in self.reads)
        if name == "options":
            return f"{self.name} takes no options (it reads {reads}); models with options: {reading(name)}"
        return f"{self.name} does not read {name} (it reads {reads}); models that read {name}: {reading(name)}"

    def count_tokens(self, inp: RunInput) -> int:
        """Positions of one sequence's input, counted without embedding anything, so a caller can refuse an input
        past its token limit before any tensor is built: `tokens` and the rows of `x` as given, `text` split at
        whitespace; 0 when the model supplies its own input."""
        if inp.tokens is not None:
            return len(inp.tokens)
        if inp.x is not None:
            return int(inp.x.shape[0])
        return len(inp.text.split()) if inp.text is not None else 0

    def tokenize(self, inp: RunInput) -> list[str]:
        """The token labels this input produces (without running anything)."""
        return self.encode(inp).tokens

    def eligibility(self, inp: RunInput, enc: Encoded, device: torch.device) -> tuple[MaskSpec, Tensor]:
        """The masks in force and the eligibility matrix: (S, S), (B, S, S) for a batch, (S, S_k) with a source."""
        s = len(enc.tokens)
        given = inp.masks
        if given is not None and (enc.real is not None or enc.source is not None):
            for name, value in (("padding", given.padding), ("padded", given.padded)):
                if value is None:
                    continue
                if enc.real is not None:
                    why = f"a batch fills each item's padding from its length: leave masks.{name} out"
                else:
                    why = "with a source, padding marks key positions: give it as source.padding"
                raise InputError(f"masks.{name}", why)
        masks = self.resolve_masks(inp, s)
        if enc.real is not None:
            return masks, torch.stack([eligibility(replace(masks, padding=r), s, device) for r in enc.real])
        if enc.source is not None:
            return masks, cross_eligibility(masks, s, len(enc.source.tokens), enc.source_padding, device)
        return masks, eligibility(masks, s, device)

    def run(
        self,
        inp: RunInput,
        device: torch.device,
        dtype: torch.dtype,
        *,
        interventions: Interventions = NO_INTERVENTIONS,
        encoded: Encoded | None = None,
        after: ModelRun | None = None,
    ) -> ModelRun:
        """Every layer up to inp.last_layer on `device` in `dtype`, with `interventions` applied.

        `encoded` is this input's `encode(inp)` when the caller already has it, so a request is tokenised once.
        `after`: a run of this same input, device, dtype and interventions that stopped at an earlier layer; its
        layers are kept and the forward goes on from there (the first layers drawn while the rest compute).
        """
        stop.check()  # nobody waits for this run any more: do not start it
        enc = encoded if encoded is not None else self.encode(inp)
        last = self.last_layer(inp)
        s = len(enc.tokens)
        assert after is None or (len(after.layers) <= last + 1 and after.interventions == interventions), "not a part"
        masks, eligible = self.eligibility(inp, enc, device) if after is None else (after.masks, after.eligible)
        net = self.network(inp, device, dtype)
        keys = None if enc.source is None else len(enc.source.tokens)  # with a source, values come from it
        interventions.validate(len(net.blocks), net.held(0).attn.n_heads, s, keys)
        timings: dict[str, float] = {} if after is None else dict(after.timings_ms)
        with timed(timings, "embed", device) if after is None else nullcontext():  # (a continued pass reads after's)
            x = enc.x.to(device=device, dtype=dtype)
            x = x[None] if x.dim() == 2 else x  # (B, S, D)
            source = None if enc.source is None else enc.source.x.to(device=device, dtype=dtype)[None]
        fwd = forward(
            x,
            net,
            eligible,
            scale=inp.scale,
            all_masked=batch_policy(within_window(eligible, narrowest(net)), enc.real, inp.all_masked),
            interventions=interventions,
            last_layer=last,
            timings=timings,
            source=source,
            after=None if after is None else after.result,
        )
        return ModelRun(
            model=self.name,
            tokens=enc.tokens,
            masks=masks,
            eligible=eligible,
            result=fwd,
            config=self.run_config(net, fwd, enc),
            interventions=interventions,
            timings_ms=timings,
            batch_tokens=enc.batch_tokens,
            batch_padding=enc.real,
            source_tokens=None if enc.source is None else enc.source.tokens,
            source_padding=None if enc.source_padding is None else tuple(enc.source_padding),
            breaks=dict(self.breaks),
            mask_values=masks.to_dict(),
            pairs=pair_counts(masks, s) if enc.real is None and enc.source is None else None,
        )

    def run_config(self, net: Network, fwd: ForwardResult, enc: Encoded) -> RunConfig:
        w = net.held(0).attn  # its widths and pieces: a checkpoint's block as stored, nothing converted
        mlp = net.held(0).mlp
        next_word: tuple[dict[str, Any], ...] = ()
        if fwd.logits is not None and self.info.vocab is not None and enc.batch is None:
            next_word = tuple(row[0] for row in top_predictions(fwd.logits[0], self.info.vocab, 1))
        return RunConfig(
            n_layers=len(net.blocks),
            layers_computed=len(fwd.layers),
            n_heads=w.n_heads,
            n_kv_heads=w.n_kv_heads,
            d_model=w.d_model,
            d_head=w.d_head,
            d_v=w.d_v,
            d_out=w.d_out,
            has_w_o=w.W_O is not None,
            scale_factor=fwd.layers[0].attn.scale_factor,
            architecture=self.architecture,
            d_mlp=None if mlp is None else mlp.d_mlp,
            unknown_tokens=tuple({"position": i, "given": t} for i, t in enc.unknown),
            next_word=next_word,
            batch=enc.batch,
            source_len=None if enc.source is None else len(enc.source.tokens),
            special=enc.special,
        )

    def n_layers(self, inp: RunInput) -> int:
        return self.info.n_layers

    def n_heads(self, inp: RunInput) -> int:
        """Query heads per layer for this input (options or custom weights can set it)."""
        return inp.heads or self.info.n_heads

    def last_layer(self, inp: RunInput) -> int:
        """The last layer a run computes: inp.last_layer, checked, or the model's last."""
        n = self.n_layers(inp)
        if inp.last_layer is None:
            return n - 1
        if not 0 <= inp.last_layer < n:
            raise InputError("layer", f"got layer {inp.last_layer}: {self.name} has layers 0..{n - 1}")
        return inp.last_layer

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        """The same input with the token at `position` replaced: a 422 naming `change.token` where the model
        cannot embed it. Models whose x_0 does not come from token strings cannot swap at all."""
        if not enc.from_tokens:
            raise InputError(
                "change.kind",
                f"{self.name} reads x, not token strings: a token swap changes nothing; shift the input instead",
            )
        tokens = list(enc.tokens)
        tokens[position] = token
        return replace(inp, text=None, tokens=tokens)

    def token_pool(self) -> list[str] | None:
        """Tokens a random probe sequence may be drawn from; None: the model only runs its own fixed input."""
        return self.info.vocab

    def frame_tokens(self, words: list[str]) -> tuple[list[str], int]:
        """The tokens a run needs around `words` (special tokens, say), and the position of words[0]."""
        return words, 0

    def resolve_masks(self, inp: RunInput, seq_len: int) -> MaskSpec:
        if inp.masks is not None:
            return inp.masks.with_length(seq_len)
        default = self.info.default_masks or MaskSpec()
        if default.padding is not None and len(default.padding) != seq_len:
            default = MaskSpec(causal=default.causal, window=default.window)
        return default


class NetworkCache:
    """A trained model's fixed network, converted once per (device, dtype) and kept; runs only read it."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self._moved: dict[tuple[str, torch.dtype], Network] = {}

    def on(self, device: torch.device, dtype: torch.dtype) -> Network:
        key = (str(device), dtype)
        if key not in self._moved:
            self._moved[key] = self.net.to(device, dtype)
        return self._moved[key]


def one_layer(w: AttentionWeights) -> Network:
    """A network of one attention layer whose output is the attention output (textbook, random, custom)."""
    return Network(blocks=(Block(attn=w, residual=False),))
