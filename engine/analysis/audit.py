"""The chapter's audit record for one run: every setting a result depends on, and checks of the result itself.

Beyond the settings (widths, heads, projections, scale, softmax axis, masks, policy, dropout, dtype, device,
lengths) it measures: the score range, mean entropy, the largest weight on a masked key, the largest row-sum
error, peak memory and throughput of the same forward pass, `sdpa_max_diff` (the engine's contexts against
torch's fused scaled_dot_product_attention on the same Q, K, V and mask, with the scale recomputed here from
d_head, not taken from the engine), and, when masks are on, the perturbation verdicts: the same perturbation
/api/perturb runs by default (a seeded random direction of norm 1), through the same code, `demo_bug` included, so
a bug that lets a later token reach an earlier row fails the audit's causal check as it fails the page's.
Throughput counts real tokens only: a padded batch's padding positions are computed but not counted.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from engine.analysis.perturb import Change, perturb
from engine.attention import expand_groups
from engine.measure import measure
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput
from engine.stats import head_stats


def sdpa_max_diff(run: ModelRun, scale: bool) -> float:
    """Largest |engine contexts - SDPA contexts| over every layer, head and query row that has a key."""
    worst = 0.0
    for t in run.layers:
        a, w = t.attn, t.weights
        k, v = expand_groups(a.k, w.n_heads), expand_groups(a.v, w.n_heads)
        mask = a.eligible if a.eligible.dim() == 2 else a.eligible[:, None]
        factor = 1.0 / math.sqrt(w.d_head) if scale else 1.0
        ref = F.scaled_dot_product_attention(a.q.double(), k.double(), v.double(), attn_mask=mask, scale=factor)
        live = a.eligible.any(dim=-1)  # (S,) or (B, S)
        live = live[None, None] if live.dim() == 1 else live[:, None]
        if bool(live.any()):
            diff = (a.contexts.double() - ref).abs().amax(dim=-1)  # (B, H, S)
            worst = max(worst, float(diff.masked_select(live.expand_as(diff)).max()))
    return worst


def perturbation_verdicts(
    model: AttentionModel, inp: RunInput, enc: Encoded, run: ModelRun, device: torch.device, dtype: torch.dtype
) -> list[dict[str, Any]]:
    """For each mask in force, one perturbation at a position that puts something under its claim, with the run's
    own classic bug (if any) in both runs, as /api/perturb runs it. `holds` is None when inconclusive."""
    m, s = run.masks, len(run.tokens)
    positions: dict[str, int] = {}
    if m.causal and s > 1:
        positions["causal"] = s - 1
    if m.window is not None:
        positions["window"] = s // 2
    if m.padding is not None and not all(m.padding):
        positions["padding"] = list(m.padding).index(False)
    out = []
    for mask, p in positions.items():
        result = perturb(model, inp, enc, p, Change("direction"), device, dtype, bug=run.interventions.bug)
        check = next(c for c in result.checks if c.name == mask)
        out.append(
            {
                "mask": mask,
                "position": p,
                "holds": check.holds,
                "max_delta": check.max_delta,
                "reach": result.reach,
                "verdict": result.verdict,
            }
        )
    return out


def audit(
    model: AttentionModel, inp: RunInput, enc: Encoded, run: ModelRun, device: torch.device, dtype: torch.dtype
) -> dict[str, Any]:
    """One record for `run` (a plain run of `inp`, without interventions)."""
    w = run.layers[0].weights
    _, measured = measure(lambda: model.run(inp, device, dtype, encoded=enc), device)
    eligible = run.eligible if run.eligible.dim() == 2 else run.eligible[0]
    stats = [
        s
        for t in run.layers
        for s in head_stats(
            t.attn.scores[0].cpu(), t.attn.weights[0].cpu(), eligible.cpu(), t.weights, broken=run.breaks
        )
    ]
    # no eligible cell at all (every row masked, all_masked "zero"): no score range, rather than min() of nothing
    eligible_scores = (
        [float(v) for t in run.layers for v in torch.aminmax(t.attn.scores[0][:, eligible])]
        if bool(eligible.any())
        else []
    )
    batch = 1 if run.batch_tokens is None else len(run.batch_tokens)
    valid = (
        sum(sum(r) for r in run.batch_padding)
        if run.batch_padding is not None
        else (sum(run.masks.padding) if run.masks.padding is not None else len(run.tokens))
    )
    return {
        "d_model": w.d_model,
        "heads": w.n_heads,
        "kv_heads": w.n_kv_heads,
        "d_k": w.d_head,
        "d_v": w.d_v,
        "layers": len(run.layers),
        "projections": {
            "W_Q": [w.d_model, w.n_heads * w.d_head],
            "W_K": [w.d_model, w.n_kv_heads * w.d_head],
            "W_V": [w.d_model, w.n_kv_heads * w.d_v],
            "W_O": None if w.W_O is None else [w.n_heads * w.d_v, w.d_out],
        },
        "scale": {"on": inp.scale, "factor": run.layers[0].attn.scale_factor},
        "softmax_axis": "keys: the last axis, so each query row sums to 1",
        "masks": run.masks.to_dict(),
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
        "perturbation": perturbation_verdicts(model, inp, enc, run, device, dtype) if run.batch_tokens is None else [],
    }
