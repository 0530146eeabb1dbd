"""Neighbour share: how local a head is on an image's patch grid.

A patch p(r,c)'s neighbours are the patches one step away on the grid: its 8 (rows and columns differ by at most 1,
not both 0) or its 4 (one of them differs by 1, the other by 0). A corner patch has 3 (or 2), an edge patch 5 (or 3).
For one head's weights W (S, S) over [CLS], registers and the P = rows x cols patches, with the patches' block
W_pp (P, P) taken from the patch queries to the patch keys:

    share(q)    = sum_{k in N(q)} W_pp[q, k] / sum_k W_pp[q, k]    of the weight the patch q puts on patches, the
                                                                    part on its neighbours N(q)
    share       = mean over the images and the patch queries q of share(q)
    uniform     = mean over q of |N(q)| / P                        what a head that weighs every patch alike gets
    shuffled    = share with the grid's cells dealt to the patches at random (the same weights; N(q) the cells
                  next to where q's cell was dealt): `shuffles` deals from a seed, their mean and highest

A head that looks at a patch's neighbours scores well above `uniform` and above every shuffled deal; a head that
looks everywhere alike, or at the same few patches whatever the query (the middle of the digit, say), scores about
the same on the grid as on a shuffled one. A head is called local here when it does both: a share at least
LOCAL_OVER_UNIFORM times uniform, and above the highest shuffled deal. Self is no neighbour: a head that keeps to
its own patch scores 0.

Since the share is linear in the weights, each head's weights are averaged over the images first (mean_weights),
and every deal costs one (P, P) product.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

REACHES = (4, 8)  # the two neighbourhoods: rook's moves or king's moves
LOCAL_OVER_UNIFORM = 2.0  # a local head's share is at least this many times a uniform head's


def neighbours(rows: int, cols: int, reach: int = 8) -> Tensor:
    """(P, P) with 1.0 where key patch k is a neighbour of query patch q, patches in reading order (row by row)."""
    if reach not in REACHES:
        raise ValueError(f"got reach {reach}: a patch's neighbours are its 4 or its 8")
    r = torch.arange(rows).repeat_interleave(cols)  # (P,) each patch's row
    c = torch.arange(cols).repeat(rows)  # (P,) each patch's column
    dr = (r[:, None] - r[None, :]).abs()  # (P, P)
    dc = (c[:, None] - c[None, :]).abs()
    near = (dr <= 1) & (dc <= 1) & ((dr + dc) > 0)
    if reach == 4:
        near &= (dr + dc) == 1
    return near.float()


def mean_weights(weights: Tensor, first_patch: int) -> Tensor:
    """(H, P, P): each head's patch-to-patch weights, each row made to sum to 1 over the patches, averaged over the
    images. `weights` is one layer's (B, H, S, S) with the patches at positions first_patch ... S - 1."""
    w = weights[:, :, first_patch:, first_patch:].double()  # (B, H, P, P)
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-30)
    return w.mean(0)


def share(mean: Tensor, near: Tensor) -> Tensor:
    """(H,): each head's neighbour share, from mean_weights' (H, P, P) and a (P, P) neighbourhood."""
    return (mean * near.to(mean.dtype)).sum(-1).mean(-1)


@dataclass(frozen=True)
class HeadLocality:
    layer: int
    head: int
    share: float  # the mean share of a patch's weight (over patches) on its neighbours
    uniform: float  # the same for a head that weighs every patch alike
    shuffled_mean: float  # the mean over the shuffled deals
    shuffled_high: float  # the highest of them

    @property
    def over_uniform(self) -> float:
        return self.share / self.uniform

    @property
    def local(self) -> bool:
        return self.over_uniform >= LOCAL_OVER_UNIFORM and self.share > self.shuffled_high


def locality(
    layers: list[Tensor], rows: int, cols: int, first_patch: int, reach: int = 8, shuffles: int = 100, seed: int = 0
) -> list[HeadLocality]:
    """Every layer's every head, in order, from each layer's (B, H, S, S) weights over the same images."""
    if rows * cols < 2:
        raise ValueError(f"got a {rows} x {cols} grid: a patch needs another to have neighbours")
    if shuffles < 1:
        raise ValueError(f"got {shuffles} shuffles: the control needs at least one deal")
    near = neighbours(rows, cols, reach)
    uniform = float(near.sum(-1).mean()) / (rows * cols)
    gen = torch.Generator().manual_seed(seed)
    deals = [torch.randperm(rows * cols, generator=gen) for _ in range(shuffles)]
    shuffled_nears = [near[p][:, p] for p in deals]  # the grid's cells dealt to the patches as p says
    found = []
    for layer, weights in enumerate(layers):
        mean = mean_weights(weights, first_patch)
        on_grid = share(mean, near)
        shuffled = torch.stack([share(mean, n) for n in shuffled_nears])  # (shuffles, H)
        for head in range(mean.shape[0]):
            found.append(
                HeadLocality(
                    layer,
                    head,
                    share=float(on_grid[head]),
                    uniform=uniform,
                    shuffled_mean=float(shuffled[:, head].mean()),
                    shuffled_high=float(shuffled[:, head].max()),
                )
            )
    return found


def most_local(found: list[HeadLocality]) -> HeadLocality:
    """The head whose neighbour share stands highest over uniform (the first such, in layer and head order)."""
    return max(found, key=lambda h: (h.over_uniform, -h.layer, -h.head))
