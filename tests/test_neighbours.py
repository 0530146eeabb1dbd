"""Neighbour share (engine/vision/neighbours.py): the grid's neighbours counted right, and the share telling a head
that looks next door from one that looks everywhere alike or always at the same patch."""

from __future__ import annotations

import pytest
import torch

from engine.vision.neighbours import locality, most_local, neighbours


@pytest.mark.parametrize(("reach", "corner", "edge", "inside"), [(8, 3, 5, 8), (4, 2, 3, 4)])
def test_a_patch_has_its_neighbours_on_the_grid(reach: int, corner: int, edge: int, inside: int) -> None:
    near = neighbours(4, 5, reach)  # 4 rows of 5: p(0,0) a corner, p(0,2) an edge, p(2,2) inside
    assert near.shape == (20, 20) and torch.equal(near, near.T) and not near.diagonal().any()
    counts = near.sum(-1)
    assert (counts[0], counts[2], counts[2 * 5 + 2]) == (corner, edge, inside)
    assert near[2 * 5 + 2, 1 * 5 + 1] == (1 if reach == 8 else 0)  # p(1,1) is diagonal to p(2,2)


def test_a_reach_other_than_4_or_8_is_refused() -> None:
    with pytest.raises(ValueError, match="got reach 6: a patch's neighbours are its 4 or its 8"):
        neighbours(4, 4, 6)


def layer_of(patch_rows: torch.Tensor) -> torch.Tensor:
    """One image's layer (1, H, 1 + P, 1 + P) from each head's (P, P) patch rows, with a [CLS] row and column."""
    heads, p, _ = patch_rows.shape
    w = torch.zeros(1, heads, 1 + p, 1 + p)
    w[0, :, 0, :] = 1 / (1 + p)
    w[0, :, 1:, 0] = 0.5  # half of every patch row on the [CLS]: the share counts the patches' part only
    w[0, :, 1:, 1:] = 0.5 * patch_rows / patch_rows.sum(-1, keepdim=True)
    return w


def test_the_share_tells_a_local_head_from_a_uniform_and_a_fixed_one() -> None:
    rows = cols = 4
    near = neighbours(rows, cols)
    fixed = torch.zeros(16, 16)
    fixed[:, 5] = 1.0  # every patch looks at p(1,1), and p(1,1) at p(1,2)
    fixed[5] = 0
    fixed[5, 6] = 1.0
    heads = torch.stack([near, torch.ones(16, 16), fixed])  # (3, P, P): local, uniform, fixed
    found = locality([layer_of(heads)], rows, cols, first_patch=1, shuffles=200)
    local, uniform, fixed_head = found
    assert local.share == pytest.approx(1.0) and local.shuffled_high < 0.8
    assert uniform.share == pytest.approx(uniform.uniform) == pytest.approx(84 / 16 / 16)
    # p(1,1) is a neighbour of 8 of the 16 queries, and p(1,2) of p(1,1): 9/16, 1.7 times uniform, yet a deal that
    # puts p(1,1)'s cell inside the grid again scores as high: no more local than chance
    assert fixed_head.share == pytest.approx(9 / 16) and fixed_head.shuffled_high >= fixed_head.share
    best = most_local(found)
    assert (best.layer, best.head) == (0, 0) and best.over_uniform == pytest.approx(16 * 16 / 84)
    assert [h.local for h in found] == [True, False, False]
