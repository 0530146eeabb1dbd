"""The chapter's audit record for one run: every setting a result depends on, and checks of the result itself.

Beyond the settings (widths, heads, projections, scale, softmax axis, masks, policy, dropout, dtype, device,
lengths) it measures: the score range, mean entropy, the largest weight on a masked key, the largest row-sum
error, peak memory and throughput of the same forward pass, `sdpa_max_diff` (the engine's contexts against
torch's fused scaled_dot_product_attention on the same Q, K, V and the layer's own mask, with the scale
recomputed here from d_head or the layer's declared factor, not taken from the engine; a softcapped layer's
reference caps its scores here, in float64, as the fused kernel cannot), and, when masks are on, the perturbation
verdicts: the same perturbation /api/perturb runs by default (a seeded random direction of norm 1), through the
same code, `demo_bug` included, so a bug that lets a later token reach an earlier row fails the audit's causal check
as it fails the page's.
Throughput counts real tokens only: a padded batch's padding positions are computed but not counted.

Read off the weights themselves (engine/analysis/weight_checks.py): `softmax_axis`, the axis the weights sum to 1
along, measured beside the declared one, and `repeated_rows`, identical weight rows within a head. Heads of unequal
widths (`head_widths`) get their own projection shapes and scale factors (`projections.per_head`,
`scale.per_head`). A batch reports every text's padding mask (`masks.padding`, one list per text) and the
perturbation verdicts per text (`item`), each run as /api/perturb runs that item, in order while their forward
passes fit the bound it is given (`max_runs`, counted before any runs); the texts past it are listed unchecked.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engine.analysis.perturb import perturb
from engine.analysis.perturb_kernel import Case, Change
from engine.analysis.weight_checks import repeated_rows, softmax_axis
from engine.attention import AttentionOutput, AttentionWeights, expand_groups, scale_factor
from engine.forward import LayerTrace
from engine.measure import measure
from engine.models.base import ModelRun
from engine.softcap import softcap
from engine.stats import head_stats


def sdpa_max_diff(run: ModelRun, scale: bool) -> float:
    """Largest |engine contexts - SDPA contexts| over every layer, head and query row that has a key; heads of
    unequal widths each with their own 1 / sqrt(d_k^h), the padded columns adding nothing to Q K^T."""
    worst = 0.0
    for t in run.layers:
        a, w = t.attn, t.weights
        k, v = expand_groups(a.k, w.n_heads), expand_groups(a.v, w.n_heads)
        mask = a.eligible if a.eligible.dim() == 2 else a.eligible[:, None]  # the layer's own (a local window)
        q = a.q.double()
        if w.head_widths is not None:  # each head its own 1 / sqrt(d_k^h), put on its queries
            own = [1.0 / math.sqrt(d) if scale else 1.0 for d in w.head_widths]  # recomputed, not the engine's
            q = q * torch.tensor(own, dtype=q.dtype, device=q.device)[:, None, None]
            factor = 1.0
        else:
            declared = 1.0 / math.sqrt(w.d_head) if w.scale is None else w.scale
            factor = declared if scale else 1.0
        if w.softcap is None and w.sinks is None:
            ref = F.scaled_dot_product_attention(q, k.double(), v.double(), attn_mask=mask, scale=factor)
        else:  # c tanh(s / c) on the scores, the sink logit as one more column, the masked softmax, written out
            s = q @ k.double().transpose(-1, -2) * factor
            capped = (s if w.softcap is None else softcap(s, w.softcap)).masked_fill(~mask, float("-inf"))
            if w.sinks is not None:  # the sink takes weight and has no value: its column is dropped after
                sink = w.sinks.double().view(1, -1, 1, 1).expand(*capped.shape[:-1], 1)
                capped = torch.cat([capped, sink], dim=-1)
            ref = torch.softmax(capped, dim=-1)[..., : k.shape[2]] @ v.double()
        live = a.eligible.any(dim=-1)  # (S,) or (B, S)
        live = live[None, None] if live.dim() == 1 else live[:, None]
        if bool(live.any()):
            diff = (a.contexts.double() - ref).abs().amax(dim=-1)  # (B, H, S)
            worst = max(worst, float(diff.masked_select(live.expand_as(diff)).max()))
    return worst


# forward passes one perturbation of a batch text runs beside the audited run: the changed batch, and the text alone,
# unpadded (padding invariance)
BATCH_PASSES = 2


def verdict_positions(run: ModelRun) -> list[tuple[int | None, dict[str, int]]]:
    """For each text (`item`; None for one sequence), the position each mask in force is tested at: its last real
    one for causal, its middle for window, its first padding one for padding."""
    m, s = run.masks, len(run.tokens)
    items = [None] if run.batch_padding is None else list(range(len(run.batch_padding)))
    plan = []
    for item in items:
        padding = m.padding if item is None or run.batch_padding is None else run.batch_padding[item]
        real = s if padding is None else sum(padding)
        positions: dict[str, int] = {}
        if m.causal and real > 1:
            positions["causal"] = real - 1 if item is not None else s - 1
        if m.window is not None:
            positions["window"] = real // 2 if item is not None else s // 2
        if padding is not None and not all(padding):
            positions["padding"] = list(padding).index(False)
        plan.append((item, positions))
    return plan


def within_runs(
    plan: list[tuple[int | None, dict[str, int]]], max_runs: int | None
) -> tuple[list[tuple[int | None, dict[str, int]]], list[int]]:
    """The texts of a batch checked in order while their forward passes (BATCH_PASSES a distinct position) fit in
    `max_runs`, and the items left unchecked from the first that does not fit. One sequence is always checked (at
    most three positions, one pass each); so is everything when `max_runs` is None."""
    if max_runs is None or plan[0][0] is None:
        return plan, []
    used = 0
    for n, (_, positions) in enumerate(plan):
        used += BATCH_PASSES * len(set(positions.values()))
        if used > max_runs:
            return plan[:n], [item for item, _ in plan[n:] if item is not None]
    return plan, []


def perturbation_verdicts(
    case: Case, run: ModelRun, plan: list[tuple[int | None, dict[str, int]]] | None = None
) -> list[dict[str, Any]]:
    """For each mask in force, one perturbation at a position that puts something under its claim, with the run's
    own classic bug (if any) in both runs, as /api/perturb runs it. `holds` is None when inconclusive. A batch: the
    same for each text of `plan` (default every text: verdict_positions), each as /api/perturb runs that item;
    `item` is None for one sequence."""
    base = run if run.source_tokens is None else None  # the run as given is each perturbation's unchanged run
    out = []
    for item, positions in verdict_positions(run) if plan is None else plan:
        results = {}
        for mask, p in positions.items():
            if p not in results:  # one run answers every mask whose claim it tests
                results[p] = perturb(case, p, Change("direction"), item=item, base=base)
            result = results[p]
            check = next(c for c in result.checks if c.name == mask)
            out.append(
                {
                    "mask": mask,
                    "item": item,
                    "position": p,
                    "holds": check.holds,
                    "max_delta": check.max_delta,
                    "reach": result.reach,
                    "verdict": result.verdict,
                }
            )
    return out


def head_shapes(w: AttentionWeights, scale: bool, factor: float) -> tuple[list[dict[str, Any]], list[float]]:
    """Each head's own projection shapes ([rows, columns] of the part of W_Q, W_K, W_V, W_O it reads) and its score
    factor: 1 / sqrt(its own d_k) for heads of unequal widths, else the layer's `factor` for every head."""
    widths = w.head_widths or (w.d_head,) * w.n_heads
    values = w.value_widths or (w.d_v,) * w.n_heads
    shapes = [
        {
            "head": h,
            "W_Q": [w.d_model, widths[h]],
            "W_K": [w.d_model, widths[h]],
            "W_V": [w.d_model, values[h]],
            "W_O": None if w.W_O is None else [values[h], w.d_out],
        }
        for h in range(w.n_heads)
    ]
    factors = [scale_factor(d, scale) for d in widths] if w.head_widths is not None else [factor] * w.n_heads
    return shapes, factors


def whole_row(a: AttentionOutput) -> torch.Tensor:
    """(B, H, S, S_k + 1): a sink layer's weights with each row's sink weight as the last column."""
    assert a.sink_weight is not None
    return torch.cat([a.weights, a.sink_weight[..., None]], dim=-1)


def audit(case: Case, run: ModelRun, max_runs: int | None = None) -> dict[str, Any]:
    """One record for `run`: the run of the case's input as given, with no intervention but the case's classic bug,
    if any (it is also the unchanged run of every perturbation). `max_runs`: the most forward passes a batch's
    perturbation verdicts may run, counted before any runs (within_runs); the texts past it are
    `perturbation_unchecked`."""
    inp, device, dtype = case.inp, case.device, case.dtype
    plan, unchecked = within_runs(verdict_positions(run), max_runs)
    w = run.layers[0].weights
    _, measured = measure(lambda: case.model.run(inp, device, dtype, encoded=case.enc), device)
    eligible = run.eligible if run.eligible.dim() == 2 else run.eligible[0]

    def own(t: LayerTrace) -> torch.Tensor:
        """The eligibility layer t attended under (a local layer's is narrowed by its window), item 0's."""
        return t.attn.eligible if t.attn.eligible.dim() == 2 else t.attn.eligible[0]

    stats = [
        s
        for t in run.layers
        for s in head_stats(
            t.attn.scores[0].cpu(),
            t.attn.weights[0].cpu(),
            own(t).cpu(),
            t.weights,
            broken=run.breaks,
            sink_weight=None if t.attn.sink_weight is None else t.attn.sink_weight[0].cpu(),
        )
    ]
    # no eligible cell at all (every row masked, all_masked "zero"): no score range, rather than min() of nothing
    eligible_scores = (
        [float(v) for t in run.layers for v in torch.aminmax(t.attn.scores[0][:, own(t)])]
        if bool(eligible.any())
        else []
    )
    batch = 1 if run.batch_tokens is None else len(run.batch_tokens)
    valid = (
        sum(sum(r) for r in run.batch_padding)
        if run.batch_padding is not None
        else (sum(run.masks.padding) if run.masks.padding is not None else len(run.tokens))
    )
    per_head, factors = head_shapes(w, inp.scale, run.layers[0].attn.scale_factor)
    equal_heads = w.head_widths is None
    masks = run.masks.to_dict()
    if run.batch_padding is not None:  # each text's own padding mask
        masks["padding"] = [list(r) for r in run.batch_padding]
    real = None if run.batch_padding is None else torch.tensor(run.batch_padding, dtype=torch.bool)
    if real is None and run.masks.padding is not None and run.source_tokens is None:
        real = torch.tensor([run.masks.padding], dtype=torch.bool)
    # each layer's whole softmax: a layer with learned sinks (gpt-oss) with its sink weight as one more column
    rows = [t.attn.weights if t.attn.sink_weight is None else whole_row(t.attn) for t in run.layers]
    weights = [t.attn.weights for t in run.layers]
    return {
        "d_model": w.d_model,
        "heads": w.n_heads,
        "kv_heads": w.n_kv_heads,
        "d_k": w.d_head if equal_heads else None,
        "d_v": w.d_v if equal_heads else None,
        "layers": len(run.layers),
        "projections": {
            "W_Q": [w.d_model, sum(p["W_Q"][1] for p in per_head)],
            "W_K": [w.d_model, w.n_kv_heads * w.d_head if equal_heads else sum(p["W_K"][1] for p in per_head)],
            "W_V": [w.d_model, w.n_kv_heads * w.d_v if equal_heads else sum(p["W_V"][1] for p in per_head)],
            "W_O": None if w.W_O is None else [sum(p["W_V"][1] for p in per_head), w.d_out],
            "per_head": per_head,
        },
        "scale": {
            "on": inp.scale,
            "factor": factors[0] if len(set(factors)) == 1 else None,
            "per_head": factors,
        },
        "softmax_axis": softmax_axis(rows),
        "repeated_rows": repeated_rows(weights, real, batch=run.batch_padding is not None),
        "masks": masks,
        "all_masked": inp.all_masked,
        "dropout": 0.0,
        "dtype": str(dtype).removeprefix("torch."),
        "device": str(device),
        "batch": batch,
        "seq_len": len(run.tokens),
        "valid_tokens": valid,
        "score_range": [min(eligible_scores), max(eligible_scores)] if eligible_scores else None,
        "entropy": sum(s.mean_entropy for s in stats) / len(stats),
        "max_masked_weight": max(s.max_masked_weight for s in stats),
        "max_row_sum_error": max(s.max_row_sum_error for s in stats),
        "cache_policy": "none: every position computed in one pass (see /api/decode for a KV cache)",
        "peak_bytes": measured.peak_bytes,
        "peak_method": measured.method,
        "ms": measured.ms,
        "tokens_per_s": valid / (measured.ms / 1000.0) if measured.ms > 0 else None,
        "throughput": "tokens_per_s counts real tokens (valid_tokens) per second of the measured forward pass; "
        "padding positions are computed but not counted",
        "sdpa_max_diff": sdpa_max_diff(run, inp.scale),
        "perturbation": perturbation_verdicts(case, run, plan),
        "perturbation_unchecked": unchecked,
    }
