"""Attention sinks: the keys nearly every query parks its weight on (the first token, [CLS], [SEP]), and a view
that looks past them.

    sink_mass       per head: the mean over queries with a key of the weight on the sink positions
    hidden view     the sink columns set to 0 and, with renormalise, each row divided by what is left, so the rest
                    of the row reads as a distribution again (a row with nothing left stays 0)

The view changes what is drawn, never the forward pass: every other output (contexts, the model's output, stats
other than sink_mass) is the model's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from engine.analysis.flow import row_normalise


def key_mask(hidden: Sequence[int], s_k: int, device: torch.device) -> Tensor:
    """(S_k,) True on the hidden key positions."""
    mask = torch.zeros(s_k, dtype=torch.bool, device=device)
    if hidden:
        mask[list(hidden)] = True
    return mask


def hide_keys(weights: Tensor, hidden: Sequence[int], renormalise: bool) -> Tensor:
    """weights (..., S, S_k) with the hidden key columns at 0, each row renormalised over the rest when asked."""
    mask = key_mask(hidden, weights.shape[-1], weights.device)
    out = weights.masked_fill(mask, 0.0)
    return row_normalise(out) if renormalise else out


def sink_mass(weights: Tensor, hidden: Sequence[int], eligible: Tensor | None = None) -> Tensor:
    """weights (H, S, S_k) -> (H,): mean over queries with an eligible key of the weight on the hidden keys."""
    columns = sorted(set(hidden))
    per_row = weights[..., columns].sum(dim=-1)  # (H, S): only the hidden columns are read
    rows = eligible.any(dim=-1) if eligible is not None else torch.ones(weights.shape[-2], dtype=torch.bool)
    if not bool(rows.any()):
        return torch.zeros(weights.shape[0], dtype=weights.dtype, device=weights.device)
    return per_row[:, rows.to(per_row.device)].mean(dim=-1)
