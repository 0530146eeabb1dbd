"""Interventions: changes to a forward pass, given as data.

A claim about attention ("causal masking holds", "head 1.3 copies the next token") is tested by changing
one thing and watching what moves. Each change here is a value that `engine.forward.forward` reads at a
named hook point, so every model runs the same code with or without them:

    InputShift    hook_full_embed       x_0[position] += amount (every feature), or, with a seed, += a seeded
                                        random direction of norm `amount` with its mean removed (a LayerNorm
                                        removes a uniform shift; it cannot remove this)
    EdgeEdit      blocks.l.attn.hook_pattern   W[head, query, key] = weight, the row's other eligible
                                        weights rescaled by (1 - weight) / (their sum), so the row still sums to 1
    HeadAblation  blocks.l.attn.hook_z  contexts of the head set to 0 ("zero") or to their mean over the
                                        live query positions ("mean"), before W_O

Zero-ablating head h therefore changes the layer's attention output by exactly -contexts_h W_O[h].
A ClassicBug (softmax over queries, a flipped mask, a normalisation over the sequence axis) computes one of the
chapter's common bugs on purpose, so a page can show what it looks like. norm_over_sequence is the one a heatmap
cannot see: every layer's attention input is standardised over the positions (each feature minus its mean over
the sequence, over its spread), so every position reads the ones after it through the statistics while the
causal map stays exactly triangular; the perturbation test finds the leak.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from engine.errors import InputError

AblationMode = Literal["zero", "mean"]
ClassicBug = Literal["softmax_over_queries", "flipped_mask", "norm_over_sequence"]
SOFTMAX_BUGS = ("softmax_over_queries", "flipped_mask")  # the ones computed inside the softmax


@dataclass(frozen=True)
class HeadAblation:
    layer: int
    head: int
    mode: AblationMode = "zero"


@dataclass(frozen=True)
class EdgeEdit:
    layer: int
    head: int
    query: int  # row
    key: int  # column
    weight: float  # the new attention weight, in [0, 1]


@dataclass(frozen=True)
class ValueShift:
    """A seeded random direction of norm `amount` added to position `position`'s value vector in every layer (after
    W_V, before the weights mix it): only queries that attend to that key can move."""

    position: int
    amount: float
    seed: int = 0
    item: int | None = None  # the batch item whose value moves; None: every item


@dataclass(frozen=True)
class InputShift:
    position: int
    amount: float  # seed None: added to every feature of the position's input vector; else the direction's norm
    seed: int | None = None  # a seeded random direction (mean removed) instead of the same amount everywhere
    item: int | None = None  # the batch item whose input moves; None: every item


PatchHook = Literal["resid_pre", "attn_out", "mlp_out", "z", "pattern"]
PATCH_HOOK_NAMES: dict[PatchHook, str] = {  # each patchable activation's hook name (engine/hooks.py)
    "resid_pre": "blocks.{layer}.hook_resid_pre",  # (B, S, D)
    "attn_out": "blocks.{layer}.hook_attn_out",  # (B, S, d_out)
    "mlp_out": "blocks.{layer}.hook_mlp_out",  # (B, S, D)
    "z": "blocks.{layer}.attn.hook_z",  # (B, S, H, d_v)
    "pattern": "blocks.{layer}.attn.hook_pattern",  # (B, H, S, S_k)
}


def hook_name(hook: PatchHook, layer: int) -> str:
    """The hook name under which a patch source holds `hook`'s activation of `layer`."""
    return PATCH_HOOK_NAMES[hook].format(layer=layer)


@dataclass(frozen=True)
class Patches:
    """Activation patching as data: batch item b takes the activations named by cells[b] from the clean run:
    (layer, position) pairs for resid_pre, attn_out and mlp_out, (layer, head) pairs for z and pattern; an empty
    tuple leaves item b as it is. `clean` holds the clean input's own activations (batch 1, through the same
    network) by hook name, as TransformerLens's patching reads `clean_cache[name]`: engine/hooks.py's
    `patch_source` makes it from a pass (engine/analysis/patch.py)."""

    hook: PatchHook
    cells: tuple[tuple[tuple[int, int], ...], ...]
    clean: Mapping[str, Tensor]

    def at(self, hook: PatchHook, layer: int) -> tuple[list[int], list[int]]:
        """(items, positions or heads) patched at this hook in this layer."""
        if hook != self.hook:
            return [], []
        found = [(b, i) for b, item in enumerate(self.cells) for (at_layer, i) in item if at_layer == layer]
        return [b for b, _ in found], [i for _, i in found]

    def apply(self, hook: PatchHook, layer: int, t: Tensor) -> Tensor:
        """t (B, S, ...) for positions, (B, H, ...) for heads, with the patched items' slices from the clean
        activation (1, ...) of that hook and layer."""
        items, where = self.at(hook, layer)
        if not items:
            return t
        clean = self.clean[hook_name(hook, layer)]
        if hook == "z":
            clean = clean.transpose(1, 2)  # hook_z (1, S, H, d_v) -> the contexts' (1, H, S, d_v)
        out = t.clone()
        out[items, where] = clean[0, where].to(out.dtype)
        return out


@dataclass(frozen=True)
class LayerInterventions:
    """What one layer's attention changes: edits on its weights, ablations on its contexts, patched heads."""

    edits: tuple[EdgeEdit, ...] = ()
    ablations: tuple[HeadAblation, ...] = ()
    bug: ClassicBug | None = None  # a classic bug computed on purpose, as a labelled demonstration
    patch: Patches | None = None  # z or pattern patched from the clean run in this layer
    layer: int = 0
    value: tuple[ValueShift, ...] = ()  # value vectors moved in this layer


@dataclass(frozen=True)
class Interventions:
    ablate: tuple[HeadAblation, ...] = ()
    edit: tuple[EdgeEdit, ...] = ()
    shift: tuple[InputShift, ...] = ()
    bug: ClassicBug | None = None  # every layer computes this classic bug (a demonstration, never a default)
    patch: Patches | None = None  # activation patching: one clean activation per batch item
    value: tuple[ValueShift, ...] = ()  # value vectors moved, in every layer

    def is_empty(self) -> bool:
        return not (self.ablate or self.edit or self.shift or self.bug or self.patch or self.value)

    def for_layer(self, layer: int) -> LayerInterventions | None:
        edits = tuple(e for e in self.edit if e.layer == layer)
        ablations = tuple(a for a in self.ablate if a.layer == layer)
        patch = self.patch if self.patch is not None and self.patch.hook in ("z", "pattern") else None
        patch = patch if patch is not None and patch.at(patch.hook, layer)[0] else None
        if not (edits or ablations or self.bug or patch or self.value):
            return None
        return LayerInterventions(edits, ablations, self.bug, patch, layer, self.value)

    def validate(self, n_layers: int, n_heads: int, seq_len: int, key_len: int | None = None) -> None:
        """Every index inside the model and the sequence, each (layer, head) ablated once, each cell edited once.
        `key_len`: the positions values come from where that is not the sequence (a cross-attention source)."""
        seen_heads: set[tuple[int, int]] = set()
        for i, a in enumerate(self.ablate):
            _check_layer_head(f"ablate[{i}]", a.layer, a.head, n_layers, n_heads)
            if a.mode not in ("zero", "mean"):
                raise InputError(f"ablate[{i}].mode", f"got {a.mode!r}: must be 'zero' or 'mean'")
            if (a.layer, a.head) in seen_heads:
                raise InputError(f"ablate[{i}]", f"layer {a.layer} head {a.head} is listed twice: ablate it once")
            seen_heads.add((a.layer, a.head))
        seen_cells: set[tuple[int, int, int, int]] = set()
        for i, e in enumerate(self.edit):
            _check_layer_head(f"edit[{i}]", e.layer, e.head, n_layers, n_heads)
            for name, pos in (("query", e.query), ("key", e.key)):
                if not 0 <= pos < seq_len:
                    raise InputError(
                        f"edit[{i}].{name}",
                        f"got position {pos}: the sequence has {seq_len} positions, 0..{seq_len - 1}",
                    )
            if not 0.0 <= e.weight <= 1.0:
                raise InputError(f"edit[{i}].weight", f"got {e.weight}: an attention weight is in [0, 1]")
            cell = (e.layer, e.head, e.query, e.key)
            if cell in seen_cells:
                raise InputError(
                    f"edit[{i}]", f"cell query {e.query} -> key {e.key} of L{e.layer}H{e.head} is edited twice"
                )
            seen_cells.add(cell)
        for i, s in enumerate(self.shift):
            if not 0 <= s.position < seq_len:
                raise InputError(f"shift[{i}].position", f"got position {s.position}: {_positions(seq_len)}")
        keys = seq_len if key_len is None else key_len
        for i, vs in enumerate(self.value):
            if not 0 <= vs.position < keys:
                raise InputError(f"value[{i}].position", f"got position {vs.position}: {_positions(keys)}")


def _positions(seq_len: int) -> str:
    return f"the sequence has {seq_len} positions, 0..{seq_len - 1}"


def _check_layer_head(field: str, layer: int, head: int, n_layers: int, n_heads: int) -> None:
    if not 0 <= layer < n_layers:
        raise InputError(f"{field}.layer", f"got layer {layer}: the model has layers 0..{n_layers - 1}")
    if not 0 <= head < n_heads:
        raise InputError(f"{field}.head", f"got head {head}: each layer has heads 0..{n_heads - 1}")


NO_INTERVENTIONS = Interventions()


def random_direction(d_model: int, seed: int, norm: float) -> Tensor:
    """(D,) float64: a seeded Gaussian with its mean removed, scaled to `norm`. With its mean gone a LayerNorm
    cannot remove it the way it removes a uniform shift (only a width of 1, which has no direction, can)."""
    v = torch.randn(d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if d_model > 1:
        v = v - v.mean()
    return v * (norm / float(v.norm()))


def shift_input(x: Tensor, shifts: Sequence[InputShift]) -> Tensor:
    """x (B, S, D) -> a copy with each shift added at its position (of its item, or of every item): `amount` on
    every feature, or a seeded random direction of norm `amount`."""
    if not shifts:
        return x
    x = x.clone()
    for s in shifts:
        items = slice(None) if s.item is None else s.item
        if s.seed is None:
            x[items, s.position, :] += s.amount
        else:
            x[items, s.position, :] += random_direction(x.shape[-1], s.seed, s.amount).to(x)
    return x


def shift_values(v: Tensor, shifts: Sequence[ValueShift]) -> Tensor:
    """v (B, G, S, d_v) -> a copy with each shift's direction added to its position's value in every group."""
    if not shifts:
        return v
    v = v.clone()
    for s in shifts:
        items = slice(None) if s.item is None else s.item
        v[items, :, s.position, :] += random_direction(v.shape[-1], s.seed, s.amount).to(v)
    return v


def edit_weights(weights: Tensor, eligible: Tensor, edits: Sequence[EdgeEdit]) -> Tensor:
    """weights (B, H, S, S) -> a copy with each edited cell set, its row's other eligible weights rescaled.

    The edited key must be eligible (an ineligible key holds exactly 0 by the mask's promise), and the row
    must keep a way to sum to 1: a weight below 1 on a row whose other eligible keys all hold 0 cannot.
    """
    if not edits:
        return weights
    weights = weights.clone()
    allowed = eligible if eligible.dim() == 2 else eligible[0]  # (S, S); edits name one sequence's cells
    for i, e in enumerate(edits):
        if not bool(allowed[e.query, e.key]):
            raise InputError(
                f"edit[{i}].key",
                f"query {e.query} -> key {e.key} is masked: an edit may only move weight between eligible keys",
            )
        row = weights[:, e.head, e.query, :]  # (B, S), a view
        others = allowed[e.query].clone()
        others[e.key] = False
        rest = (row * others).sum(dim=-1, keepdim=True)  # (B, 1)
        if e.weight < 1.0 and bool((rest <= 0).any()):
            raise InputError(
                f"edit[{i}].weight",
                f"the other eligible keys of query {e.query} hold no weight, so weight {e.weight} would leave the row "
                "summing below 1: set it to 1, or edit a row with more than one eligible key",
            )
        factor = torch.where(rest > 0, (1.0 - e.weight) / rest.clamp_min(torch.finfo(row.dtype).tiny), 0.0)
        new_row = torch.where(others, row * factor, torch.zeros_like(row))
        new_row[:, e.key] = e.weight
        weights[:, e.head, e.query, :] = new_row
    return weights


def ablate_contexts(contexts: Tensor, eligible: Tensor, ablations: Sequence[HeadAblation]) -> Tensor:
    """contexts (B, H, S, d_v) -> a copy with each ablated head's contexts zeroed or replaced by their mean.

    The mean is over live query positions (those with an eligible key): a padded-out or all-masked row
    does not pull it toward 0.
    """
    if not ablations:
        return contexts
    contexts = contexts.clone()
    live = eligible.any(dim=-1)  # (S,) or (B, S)
    if live.dim() == 1:
        live = live[None].expand(contexts.shape[0], -1)
    live_f = live.to(contexts.dtype)[..., None]  # (B, S, 1)
    for a in ablations:
        if a.mode == "zero":
            contexts[:, a.head] = 0
        else:
            z = contexts[:, a.head]  # (B, S, d_v)
            mean = (z * live_f).sum(dim=1, keepdim=True) / live_f.sum(dim=1, keepdim=True).clamp_min(1)
            contexts[:, a.head] = torch.where(live[..., None], mean.expand_as(z), torch.zeros_like(z))
    return contexts
