"""A user's Hugging Face checkpoint as an attnlab model: its tokenizer.json reads the text, its family's mapping
(engine/models/families/) gives x_0 and the blocks, and every layer is computed by attnlab's engine, so masks,
hooks, perturbations, interventions and decoding act in every layer as they do for the built-in models.

engine/models/checkpoint.py loads one (load_checkpoint, from_transformers); this module is what it makes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from engine.errors import InputError
from engine.feedforward import MixtureOfExperts
from engine.forward import ForwardResult, Network, layer_kinds
from engine.models.base import AttentionModel, Encoded, ModelInfo, NetworkCache, RunConfig, RunInput
from engine.models.declare import Capabilities
from engine.models.families import CheckpointError, Mapped, Sizes
from engine.normaliser import check_length
from engine.stored import converted_per_block
from engine.tokens import TokenizerFailed, TokenPieces, encode

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog because it was in a hurry."


def experts_of(net: Network) -> tuple[int, int] | None:
    """(experts, experts each position uses) of the network's mixture-of-experts layers; None where every layer's
    feed-forward is one dense network."""
    for block in net.blocks:
        if isinstance(block.mlp, MixtureOfExperts):
            return block.mlp.n_experts, block.mlp.top_k
    return None


class CheckpointModel(AttentionModel):
    """Built once from a loaded checkpoint; runs only read its network and tokenizer."""

    name = "checkpoint"
    capabilities = Capabilities(cross_attention=False, predicts_tokens=True)
    pad_token = None  # a batch pads with zero vectors after each item: masked out as keys

    def __init__(
        self,
        name: str,
        family: str,
        sizes: Sizes,
        mapped: Mapped,
        tokenizer: Tokenizer,
        *,
        directory: Path | None = None,
        card: dict[str, Any] | None = None,
        reference: dict[str, Any] | None = None,
    ) -> None:
        # a checkpoint's declaration comes from its config, so it is this instance's, not its class's
        setattr(self, "name", name)  # noqa: B010 (a ClassVar on AttentionModel)
        self.family = family
        self.directory = directory
        self.sizes = sizes
        self.embedding = mapped.embedding
        self.net = NetworkCache(mapped.network)
        self.card: dict[str, Any] = dict(card or {})
        self.reference = reference
        self.pieces = TokenPieces(tokenizer)
        self.architecture = mapped.architecture
        predicts = mapped.network.unembed is not None
        caps = Capabilities(decode=sizes.decoder, batches=True, cross_attention=False, predicts_tokens=predicts)
        setattr(self, "capabilities", caps)  # noqa: B010
        setattr(self, "breaks", dict(mapped.breaks))  # noqa: B010
        # one label per row of the embedding (the loader refuses a tokenizer with ids past them), each piece read
        # alone, not joined to its neighbours
        vocab = [self.pieces.label(i) for i in range(sizes.vocab_size)]
        self.frame = self._frame()
        self._labels = vocab  # every id's label, an encoder's too (info.vocab is None where nothing is predicted)
        self._pool: list[str] | None = None  # built on first use: most runs never draw a probe
        d_head = mapped.network.blocks[0].attn.d_head
        d_v = mapped.network.blocks[0].attn.d_v
        kind = "byte-level BPE" if self.pieces.byte_level else "WordPiece or other pieces"
        self.info = ModelInfo(
            name=name,
            description=(
                f"{name}: a {family} checkpoint ({sizes.n_layers} layers x {sizes.n_heads} heads"
                f"{f' over {sizes.n_kv_heads} K/V groups' if sizes.n_kv_heads != sizes.n_heads else ''}, "
                f"width {sizes.d_model}, {sizes.vocab_size} tokens), every layer computed by attnlab's engine from "
                "its own weights; your masks apply in every layer."
            ),
            n_layers=sizes.n_layers,
            n_heads=sizes.n_heads,
            n_kv_heads=sizes.n_kv_heads,
            d_model=sizes.d_model,
            d_head=d_head,
            d_v=d_v,
            max_tokens=sizes.max_positions,
            tokenizer=f"{kind} from its tokenizer.json ({len(self.pieces.vocab)} pieces)",
            default_text=str(self.card.get("default_text", DEFAULT_TEXT)),
            default_masks=mapped.default_masks,
            vocab=vocab if predicts else None,
            family=family,
            vocab_size=sizes.vocab_size,
            max_positions=sizes.max_positions,
            experts=experts_of(mapped.network),
            sinks=any(block.attn.sinks is not None for block in mapped.network.blocks),
            layer_kinds=layer_kinds(mapped.network),
        )

    def _frame(self) -> tuple[list[str], list[str]]:
        """The special tokens the tokenizer puts before and after a text (from encoding one word)."""
        try:
            p = self.pieces.encode("a")
        except TokenizerFailed as err:  # the checkpoint is refused, with why; the server starts with the others
            raise CheckpointError(f"tokenizer.json: its tokenizer fails on the text 'a' ({err.message})") from err
        lead = 0
        while lead < len(p.ids) and p.special[lead]:
            lead += 1
        trail = len(p.ids)
        while trail > lead and p.special[trail - 1]:
            trail -= 1
        return p.labels[:lead], p.labels[trail:]

    def encode_sequence(self, inp: RunInput) -> Encoded:
        """Pieces of `text` (special tokens added as the tokenizer adds them) or `tokens` as given, embedded."""
        if inp.tokens is not None:
            field_name = "tokens"
            ids, unknown = self.pieces.ids_for(list(inp.tokens))
            if unknown:
                pos, given = unknown[0]
                raise InputError(
                    "tokens",
                    f"{given!r} at position {pos} is not a piece of {self.name}'s vocabulary: give pieces as the "
                    "answers label them (' the') or as raw vocabulary strings",
                )
            labels = self.pieces.labels(ids)
            special = [self.pieces.is_special(i) for i in ids]
        elif inp.text is not None and inp.text.strip():
            field_name = "text"
            check_length(self.pieces.tokenizer.normalizer, inp.text)  # before the text is normalised whole
            p = self.pieces.encode(inp.text)
            ids, labels, special = p.ids, p.labels, p.special
            if all(special):
                raise InputError("text", f"got {len(inp.text)} characters but no piece of text: give at least one word")
        else:
            raise InputError("text", "got no text: give at least one word (or a list of `tokens`)")
        if not ids:
            raise InputError(field_name, "got no tokens: give at least one")
        if len(ids) > self.sizes.max_positions:
            raise InputError(
                field_name,
                f"got {len(ids)} tokens, limit {self.sizes.max_positions} (the positions {self.name} was made for): "
                "shorten the input",
            )
        out_of_range = [i for i in ids if i >= self.sizes.vocab_size]
        if out_of_range:
            raise InputError(
                field_name,
                f"the tokenizer gave id {out_of_range[0]} but {self.name} embeds {self.sizes.vocab_size} ids: "
                "tokenizer.json does not belong to these weights",
            )
        x = self.embedding(torch.tensor(ids, dtype=torch.long)).float()  # (S, D) on the CPU
        return Encoded(labels, x, from_tokens=True, special=tuple(special))

    def count_tokens(self, inp: RunInput) -> int:
        if inp.tokens is None and inp.text is not None:
            check_length(self.pieces.tokenizer.normalizer, inp.text)  # before the text is normalised whole
            return len(encode(self.pieces.tokenizer, inp.text).ids)
        return super().count_tokens(inp)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        """On the CPU the weights as loaded (mapped from the file, in its dtype), each block converted as the pass
        reaches it (engine/stored.py), so that no second copy of the checkpoint is held; on a GPU one copy there."""
        if device.type == "cpu":
            return converted_per_block(self.net.net, device, dtype)
        return self.net.on(device, dtype)

    def run_config(self, net: Network, fwd: ForwardResult, enc: Encoded) -> RunConfig:
        return replace(super().run_config(net, fwd, enc), special=enc.special)

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        _, unknown = self.pieces.ids_for([token])
        if unknown:
            raise InputError("change.token", f"{token!r} is not a piece of {self.name}'s vocabulary")
        return super().swap_token(inp, enc, position, token)

    def token_pool(self) -> list[str]:
        """Whole-word pieces of the vocabulary (no specials, no ## pieces), for random probe sequences."""
        if self._pool is None:
            self._pool = sorted(
                {
                    label
                    for i, label in enumerate(self._labels)
                    if not self.pieces.is_special(i)
                    and label.strip().isascii()
                    and label.strip().isalpha()
                    and len(label.strip()) > 1
                    and not label.startswith("##")
                }
            )
        return self._pool

    def frame_tokens(self, words: list[str]) -> tuple[list[str], int]:
        lead, trail = self.frame
        return [*lead, *words, *trail], len(lead)
