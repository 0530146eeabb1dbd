"""Activation patching: which activation carries what the clean input knows and the corrupted one does not.

Two inputs of the same length, clean and corrupted (usually one token apart). Each cell of the grid runs the
corrupted input with one activation taken from the clean run instead, and measures a metric:

    resid_pre   layer x position   the residual stream entering the layer, at that position
    attn_out    layer x position   the attention output (after W_O) added to the stream there
    mlp_out     layer x position   the feed-forward's output there (models with an MLP)
    z           layer x head       the head's contexts at every position (TransformerLens's hook_z), before W_O
    pattern     layer x head       the head's weights at every position, applied to the corrupted values

    recovered = (patched - corrupted) / (clean - corrupted)      1: the cell carries it all; 0: nothing

Metrics: `logit_diff` (logit of `correct` minus logit of `wrong` at `position`; decoders), `loss` (mean next-token
loss on the clean sequence's own next tokens; decoders), `output_distance` (mean over positions of the final
output's L2 distance from the clean one; any model, and the encoders' metric; clean is 0 by definition).

Every cell is one item of a batched forward of the corrupted input (engine.forward, the patch given as data in
Interventions.patch), together with the clean and the corrupted run themselves, so the three metrics come from the
same kernels on the same batch shape: patching layer 0's input at the only changed position gives the clean
run's numbers exactly, and at any other position the corrupted one's exactly. The cells go in chunks whose traces
fit `chunk_bytes`; the cost is one forward per cell (reported in `forwards`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from engine.attention import AllMaskedPolicy
from engine.errors import InputError
from engine.forward import Network, forward
from engine.hooks import patch_source
from engine.interventions import Interventions, Patches
from engine.masks import batch_policy
from engine.models.base import AttentionModel, Encoded, RunInput
from engine.vocab import vocab_index

Hook = Literal["resid_pre", "attn_out", "mlp_out", "z", "pattern"]
BY_POSITION: tuple[Hook, ...] = ("resid_pre", "attn_out", "mlp_out")
BY_HEAD: tuple[Hook, ...] = ("z", "pattern")
MetricKind = Literal["logit_diff", "loss", "output_distance"]


@dataclass(frozen=True)
class Metric:
    kind: MetricKind
    position: int | None = None  # logit_diff: the query position whose logits are read
    correct: int | None = None  # logit_diff: token ids
    wrong: int | None = None


@dataclass(frozen=True)
class PatchResult:
    hook: Hook
    rows: int  # layers
    columns: int  # positions (resid_pre, attn_out, mlp_out) or heads (z, pattern)
    clean_metric: float
    corrupted_metric: float
    metric_grid: list[list[float]]  # rows x columns: the metric with that cell patched
    recovered: list[list[float | None]]  # (patched - corrupted) / (clean - corrupted); None when clean == corrupted
    changed_positions: list[int]  # where the two inputs' embeddings differ
    forwards: int  # forward passes run: one per cell, plus the clean and the corrupted run


def cells(hook: Hook, n_layers: int, n_positions: int, n_heads: int) -> list[tuple[int, int]]:
    """(layer, position) or (layer, head) for every cell of the grid, row by row."""
    columns = n_positions if hook in BY_POSITION else n_heads
    return [(layer, c) for layer in range(n_layers) for c in range(columns)]


def metric_values(metric: Metric, final: Tensor, clean_final: Tensor, targets: Tensor | None) -> Tensor:
    """(B,) the metric of each item's final output (B, S, V or D)."""
    f = final.double()
    if metric.kind == "logit_diff":
        assert metric.position is not None and metric.correct is not None and metric.wrong is not None
        row = f[:, metric.position]
        return row[:, metric.correct] - row[:, metric.wrong]
    if metric.kind == "loss":
        assert targets is not None
        logp = torch.log_softmax(f[:, :-1], dim=-1)  # (B, S - 1, V)
        picked = logp.gather(-1, targets[None, :, None].expand(f.shape[0], -1, 1))[..., 0]
        return -picked.mean(dim=-1)
    return (f - clean_final.double()).norm(dim=-1).mean(dim=-1)


def trace_bytes(model: AttentionModel, inp: RunInput, s: int, itemsize: int) -> int:
    """Bytes one item's forward keeps, roughly: scores and weights per head per layer, a few dozen streams of the
    model's width (q, k, v, contexts, residuals, the MLP's), and the logits. Sizes the chunks."""
    info = model.info
    layers, heads = model.n_layers(inp), model.n_heads(inp)
    width = max(info.d_model or 64, 64)
    per_layer = 2 * heads * s * s + 32 * s * width
    return (layers * per_layer + s * (len(info.vocab) if info.vocab else width)) * itemsize


def token_id(model: AttentionModel, token: str, field: str) -> int:
    """The id whose logit a metric reads: the token's index in the model's vocabulary."""
    vocab = model.info.vocab
    if not vocab:
        raise InputError(field, f"{model.name} has no vocabulary of tokens to read logits for: use output_distance")
    index = vocab_index(vocab).get(token)
    if index is None:
        raise InputError(field, f"{token!r} is not a token of {model.name}'s vocabulary ({len(vocab)} tokens)")
    return index


@dataclass(frozen=True)
class Setup:
    """Both inputs checked, embedded and run once clean, ready for batched patched passes."""

    net: Network
    eligible: Tensor
    policy: AllMaskedPolicy
    scale: bool
    x_clean: Tensor  # (1, S, D)
    x_bad: Tensor
    clean: dict[str, Tensor]  # the clean run's activations at the hook, by hook name (engine/hooks.py)
    targets: Tensor | None
    n_layers: int
    n_heads: int


def setup(
    model: AttentionModel,
    clean_inp: RunInput,
    clean: Encoded,
    corrupted_inp: RunInput,
    corrupted: Encoded,
    hook: Hook,
    metric: Metric,
    device: torch.device,
    dtype: torch.dtype,
) -> Setup:
    s = len(corrupted.tokens)
    if len(clean.tokens) != s:
        raise InputError(
            "corrupted",
            f"has {s} tokens and clean has {len(clean.tokens)}: patching needs inputs of the same length",
        )
    net = model.network(corrupted_inp, device, dtype)
    if hook == "mlp_out" and all(b.mlp is None for b in net.held_blocks):
        raise InputError("hook", f"{model.name} has no feed-forward: patch resid_pre, attn_out, z or pattern")
    _, eligible = model.eligibility(corrupted_inp, corrupted, device)
    _, clean_eligible = model.eligibility(clean_inp, clean, device)
    if not torch.equal(eligible, clean_eligible):
        raise InputError("corrupted.masks", "the clean and corrupted inputs must have the same masks")
    policy = batch_policy(eligible, corrupted.real, corrupted_inp.all_masked)
    x_clean = clean.x.to(device=device, dtype=dtype).reshape(1, s, -1)
    x_bad = corrupted.x.to(device=device, dtype=dtype).reshape(1, s, -1)
    clean_run = forward(x_clean, net, eligible, scale=clean_inp.scale, all_masked=policy)
    if metric.kind != "output_distance" and clean_run.logits is None:
        raise InputError("metric.kind", f"{model.name} predicts no tokens: use output_distance")
    targets = None
    if metric.kind == "loss":
        targets = torch.tensor([token_id(model, t, "metric.kind") for t in clean.tokens[1:]], device=device)
    return Setup(
        net,
        eligible,
        policy,
        clean_inp.scale,
        x_clean,
        x_bad,
        patch_source(clean_run, hook),
        targets,
        len(net.blocks),
        net.held(0).attn.n_heads,
    )


def patched_metrics(
    st: Setup,
    hook: Hook,
    items: list[tuple[tuple[int, int], ...]],
    metric: Metric,
    chunk: int,
) -> tuple[float, float, list[float]]:
    """(clean, corrupted, one metric per item): each item the corrupted input with its cells patched from the
    clean run; the clean and corrupted runs are items 0 and 1 of the first batch."""
    plan: list[tuple[tuple[int, int], ...] | None] = [None, (), *items]  # None: the clean input itself
    values: list[float] = []
    clean_final: Tensor | None = None  # the batch's own clean item: output_distance is 0 there exactly
    for start in range(0, len(plan), chunk):
        part = plan[start : start + chunk]
        x = torch.cat([st.x_clean if p is None else st.x_bad for p in part])
        patches = Patches(hook, tuple(p or () for p in part), st.clean)
        out = forward(
            x, st.net, st.eligible, scale=st.scale, all_masked=st.policy, interventions=Interventions(patch=patches)
        )
        if clean_final is None:
            clean_final = out.final[:1]
        values.extend(metric_values(metric, out.final, clean_final, st.targets).tolist())
    for v in values:
        if not math.isfinite(v):
            raise InputError("metric", "a patched run gave a non-finite metric")
    return values[0], values[1], values[2:]


def patch(
    model: AttentionModel,
    clean_inp: RunInput,
    clean: Encoded,
    corrupted_inp: RunInput,
    corrupted: Encoded,
    hook: Hook,
    metric: Metric,
    device: torch.device,
    dtype: torch.dtype,
    *,
    chunk_bytes: int = 256 * 2**20,
) -> PatchResult:
    """The patching grid for `hook` (see the module docstring): one batched pass per chunk of cells."""
    st = setup(model, clean_inp, clean, corrupted_inp, corrupted, hook, metric, device, dtype)
    s = len(corrupted.tokens)
    grid = cells(hook, st.n_layers, s, st.n_heads)
    per_item = max(1, trace_bytes(model, corrupted_inp, s, torch.finfo(dtype).bits // 8))
    chunk = max(2, min(len(grid) + 2, chunk_bytes // per_item))
    clean_value, corrupted_value, cell_values = patched_metrics(st, hook, [(c,) for c in grid], metric, chunk)
    columns = s if hook in BY_POSITION else st.n_heads
    metric_grid = [cell_values[r * columns : (r + 1) * columns] for r in range(st.n_layers)]
    gap = clean_value - corrupted_value
    recovered = [[(v - corrupted_value) / gap + 0.0 if gap != 0 else None for v in row] for row in metric_grid]
    changed = (st.x_clean[0] != st.x_bad[0]).any(dim=-1).nonzero().flatten().tolist()
    return PatchResult(
        hook=hook,
        rows=st.n_layers,
        columns=columns,
        clean_metric=clean_value,
        corrupted_metric=corrupted_value,
        metric_grid=metric_grid,
        recovered=recovered,
        changed_positions=changed,
        forwards=len(grid) + 2,
    )


def recovered_by(
    model: AttentionModel,
    clean_inp: RunInput,
    clean: Encoded,
    corrupted_inp: RunInput,
    corrupted: Encoded,
    hook: Hook,
    together: list[tuple[int, int]],
    metric: Metric,
    device: torch.device,
    dtype: torch.dtype,
) -> float | None:
    """The share recovered when every cell in `together` is patched at once (all layer-1 heads' z, say)."""
    st = setup(model, clean_inp, clean, corrupted_inp, corrupted, hook, metric, device, dtype)
    clean_value, corrupted_value, (value,) = patched_metrics(st, hook, [tuple(together)], metric, 3)
    gap = clean_value - corrupted_value
    return (value - corrupted_value) / gap if gap != 0 else None
