"""Why scores are divided by sqrt(d_k) (the chapter's Figure 21.5), measured.

For q and k with independent N(0, sigma^2) coordinates, q . k is a sum of d_k products of variance sigma^4,
so its standard deviation grows like sigma^2 sqrt(d_k); divided by sqrt(d_k) it stays at sigma^2. Unscaled,
wide heads feed the softmax ever larger scores: its entropy falls and its largest weight tends to 1
(saturation, vanishing gradients). Each width draws `samples` query rows against `keys` keys.

The work is samples x keys x d_k products per width: the rows are drawn in chunks of at most CHUNK_VALUES floats
(only the (samples, keys) dot products are kept), and the sweep stops between chunks when nobody waits for it
(engine.stop). How much a request may ask for is the caller's limit: `sweep_values` counts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine import stop
from engine.errors import InputError
from engine.stats import row_entropy


@dataclass(frozen=True)
class SweepRow:
    d_k: int
    std_unscaled: float  # std of q . k
    std_scaled: float  # std of q . k / sqrt(d_k)
    expected_std_unscaled: float  # sigma^2 sqrt(d_k)
    expected_std_scaled: float  # sigma^2
    entropy_unscaled: float  # mean softmax entropy of a row of `keys` scores, nats (ln keys = uniform)
    entropy_scaled: float
    max_weight_unscaled: float  # mean largest weight of a row
    max_weight_scaled: float


CHUNK_VALUES = 4_000_000  # floats of k drawn at once (32 MB in float64)


def sweep_values(widths: list[int], samples: int, keys: int) -> int:
    """q.k products a sweep computes: samples x keys x d_k for each width."""
    return samples * keys * sum(widths)


def draw_dots(rows: int, keys: int, d: int, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """`rows` queries against `keys` keys each, coordinates N(0, sigma^2): their dot products, (rows, keys)."""
    q = torch.randn(rows, 1, d, generator=gen, dtype=torch.float64) * sigma  # (rows, 1, d_k)
    k = torch.randn(rows, keys, d, generator=gen, dtype=torch.float64) * sigma  # (rows, keys, d_k)
    return (q * k).sum(dim=-1)  # (rows, keys)


def scale_sweep(
    widths: list[int], samples: int = 2000, seed: int = 0, variance: float = 1.0, keys: int = 16
) -> list[SweepRow]:
    if not widths:
        raise InputError("widths", "give at least one d_k")
    if variance <= 0:
        raise InputError("variance", f"got {variance}: a variance must be positive")
    for i, d in enumerate(widths):
        if d < 1:
            raise InputError(f"widths[{i}]", f"got d_k = {d}: must be at least 1")
    gen = torch.Generator().manual_seed(seed)
    sigma = math.sqrt(variance)
    rows = []
    for d in widths:
        per_chunk = max(1, CHUNK_VALUES // (keys * d))
        parts = []
        for start in range(0, samples, per_chunk):
            stop.check()  # the client has gone: no more chunks
            parts.append(draw_dots(min(per_chunk, samples - start), keys, d, sigma, gen))
        dots = torch.cat(parts)  # (samples, keys)
        scaled = dots / math.sqrt(d)
        w_u, w_s = dots.softmax(dim=-1), scaled.softmax(dim=-1)
        rows.append(
            SweepRow(
                d_k=d,
                std_unscaled=float(dots.std()),
                std_scaled=float(scaled.std()),
                expected_std_unscaled=variance * math.sqrt(d),
                expected_std_scaled=variance,
                entropy_unscaled=float(row_entropy(w_u).mean()),
                entropy_scaled=float(row_entropy(w_s).mean()),
                max_weight_unscaled=float(w_u.amax(dim=-1).mean()),
                max_weight_scaled=float(w_s.amax(dim=-1).mean()),
            )
        )
    return rows
