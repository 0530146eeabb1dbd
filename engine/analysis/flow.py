"""Where attention moves information, beyond where it looks: rollout across layers, and value-weighted attention.

    rollout      J_l = rownorm(fuse_h A_l + I) J_{l-1}, J_-1 = I            (Abnar & Zuidema 2020)
                 fuse = mean, max or min over heads; without the residual identity, rownorm(fuse_h A_l)
    value norms  |a_ij v_j W_O^h| = a_ij |v_j W_O^h| per head               (Kobayashi et al. 2020)
                 |a_ij v_j| for a model without W_O (its output is the concatenation of contexts)
    head share   |context_h W_O^h| per head and query: the norm of what head h adds to the layer's output there

A weight map says where a query looks; a value norm says how much it moves from there, so a head that looks hard
at a key whose value is near zero (a sink) moves almost nothing. Rollout multiplies the layers' maps, so it can only
be as faithful as the assumption that attention alone mixes positions (MLPs act per position; the residual is the
identity). Rows of a rollout sum to 1 wherever a row of every layer has a key; a masked cell of every layer stays 0
in the product only where no path of eligible cells reaches it, which is why a causal model's rollout is
lower-triangular and a window's widens by w - 1 a layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from engine.attention import AttentionOutput, AttentionWeights, expand_groups

Fuse = Literal["mean", "max", "min"]
FUSES: tuple[Fuse, ...] = ("mean", "max", "min")


def fuse_heads(weights: Tensor, how: Fuse) -> Tensor:
    """(B, H, S, S) -> (B, S, S): the heads' weights fused cell by cell."""
    if how == "mean":
        return weights.mean(dim=1)
    if how == "max":
        return weights.amax(dim=1)
    if how == "min":
        return weights.amin(dim=1)
    raise ValueError(f"fuse heads by mean, max or min, not {how!r}")


def row_normalise(m: Tensor) -> Tensor:
    """Each row divided by its sum; a row that sums to 0 (a query with no key) stays 0."""
    total = m.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, m / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(m))


def fused_map(w: Tensor, heads: Fuse = "mean", residual: bool = True, what: str = "rollout") -> Tensor:
    """One layer's (B, H, S, S) weights -> (B, S, S) in float64: heads fused, the residual identity added when
    asked, rows normalised. What rollout multiplies and attention flow (attention_flow.py) sends through."""
    if w.shape[-1] != w.shape[-2]:
        raise ValueError(f"{what} needs square maps (keys are the queries' own positions), got {tuple(w.shape)}")
    a = fuse_heads(w.double(), heads)
    if residual:
        a = a + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    return row_normalise(a)


def rollout(layer_weights: Sequence[Tensor], heads: Fuse = "mean", residual: bool = True) -> list[Tensor]:
    """layer_weights: each layer's (B, H, S, S) weights, in order from layer 0. Returns J_l (B, S, S) after each
    layer: J_l[q, k] is the share of position q's state after layer l traced back to input position k. Computed in
    float64, returned in the weights' dtype."""
    out: list[Tensor] = []
    joint: Tensor | None = None
    for w in layer_weights:
        a = fused_map(w, heads, residual)
        joint = a if joint is None else a @ joint  # in float64: 12 products of float32 maps drift
        out.append(joint.to(w.dtype))
    return out


def value_vectors(attn: AttentionOutput, weights: AttentionWeights) -> Tensor:
    """(B, H, S_k, d_out): each key's value as head h writes it to the output, v_j W_O^h (v_j itself without
    W_O). Grouped K/V: a group's values serve each of its heads, through that head's own W_O^h."""
    v = expand_groups(attn.v, attn.weights.shape[1])  # (B, H, S_k, d_v)
    if weights.W_O is None:
        return v
    return torch.einsum("bhkd,hde->bhke", v, weights.W_O.to(device=v.device, dtype=v.dtype))


def value_norms(attn: AttentionOutput, weights: AttentionWeights) -> Tensor:
    """(B, H, S, S_k): |a_ij v_j W_O^h|, what head h moves from key j into query i (0 wherever a_ij is)."""
    moved = value_vectors(attn, weights).norm(dim=-1)  # (B, H, S_k)
    return attn.weights * moved[:, :, None, :]


def head_contributions(attn: AttentionOutput, weights: AttentionWeights) -> Tensor:
    """(B, H, S): |context_h W_O^h| at each query, the norm of head h's part of the layer's output there (the
    output is the sum of these vectors and b_O)."""
    ctx = attn.contexts  # (B, H, S, d_v)
    if weights.W_O is None:
        return ctx.norm(dim=-1)
    return torch.einsum("bhsd,hde->bhse", ctx, weights.W_O.to(device=ctx.device, dtype=ctx.dtype)).norm(dim=-1)
