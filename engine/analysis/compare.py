"""Compare two runs of the same length: B - A per layer and head, and the largest changes.

Pin a result as A, change anything (a mask, the scale, options, a same-length text) and B - A shows what
that change did to every head's weights. Runs of different lengths have no cell-by-cell difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from engine.errors import InputError
from engine.models.base import ModelRun

LARGEST = 10  # changes listed, largest |B - A| first


@dataclass(frozen=True)
class HeadDiff:
    index: int
    diff: Tensor  # (S, S) float64: B - A weights
    max_abs: float
    where: tuple[int, int]  # (query, key) of the largest |diff|


@dataclass(frozen=True)
class LayerDiff:
    index: int
    heads: list[HeadDiff]


@dataclass(frozen=True)
class Change:
    layer: int
    head: int
    query: int
    key: int
    a: float
    b: float
    diff: float


@dataclass(frozen=True)
class Comparison:
    layers: list[LayerDiff]
    max_abs: float
    largest: list[Change]


def compare(a: ModelRun, b: ModelRun, layers: list[int]) -> Comparison:
    """B - A weights for each of `layers` (indices into both runs' computed layers)."""
    sa, sb = len(a.tokens), len(b.tokens)
    if sa != sb:
        raise InputError("b", f"has {sb} tokens but a has {sa}: B - A needs two runs of the same length")
    out: list[LayerDiff] = []
    cells: list[tuple[float, int, int, int, int]] = []
    for i in layers:
        wa, wb = a.layers[i].attn.weights[0].double().cpu(), b.layers[i].attn.weights[0].double().cpu()  # (H, S, S)
        if wa.shape != wb.shape:
            raise InputError(
                "b", f"has {wb.shape[0]} heads in layer {i} but a has {wa.shape[0]}: a difference needs the same heads"
            )
        diff = wb - wa
        heads = []
        for h in range(diff.shape[0]):
            flat = diff[h].abs().flatten()
            top = int(flat.argmax())
            q, k = divmod(top, sb)
            heads.append(HeadDiff(h, diff[h], float(flat[top]), (q, k)))
            n = min(LARGEST, flat.numel())
            values, idx = flat.topk(n)
            cells.extend((float(v), i, h, *divmod(int(j), sb)) for v, j in zip(values, idx, strict=True) if v > 0)
        out.append(LayerDiff(i, heads))
    cells.sort(key=lambda c: -c[0])
    largest = [_change(a, b, layer, h, q, k) for _, layer, h, q, k in cells[:LARGEST]]
    return Comparison(out, max((hd.max_abs for ld in out for hd in ld.heads), default=0.0), largest)


def _change(a: ModelRun, b: ModelRun, layer: int, h: int, q: int, k: int) -> Change:
    wa = float(a.layers[layer].attn.weights[0, h, q, k].double())
    wb = float(b.layers[layer].attn.weights[0, h, q, k].double())
    return Change(layer, h, q, k, wa, wb, wb - wa)
