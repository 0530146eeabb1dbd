"""engine/blockwise.py against a dense NumPy computation in float64: contexts, log-sum-exps, any rectangle of
weights and the block summaries, under every mask, with grouped K/V, and with rows that have no key."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from engine.blockwise import BlockMask, block_counts, flash, summarise, weights


def dense(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray, scale: float) -> tuple[np.ndarray, ...]:
    h, g = q.shape[0], k.shape[0]
    k, v = np.repeat(k, h // g, axis=0), np.repeat(v, h // g, axis=0)
    s = np.einsum("hqd,hkd->hqk", q, k) * scale
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    keyed = np.isfinite(m)
    e = np.where(allowed, np.exp(s - np.where(keyed, m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    w = np.where(keyed, e / np.where(keyed, total, 1.0), 0.0)
    lse = np.where(keyed[..., 0], (m + np.log(np.where(keyed, total, 1.0)))[..., 0], -np.inf)
    return w, w @ v, lse


def allowed_of(mask: BlockMask) -> np.ndarray:
    qi, kj = np.arange(mask.s_q)[:, None], np.arange(mask.s_k)[None, :]
    a = np.ones((mask.s_q, mask.s_k), dtype=bool)
    if mask.causal:
        a &= kj <= qi
    if mask.window is not None:
        a &= np.abs(qi - kj) < mask.window
    if mask.key_padding is not None:
        a &= mask.key_padding.numpy()[None, :]
    for q, k in mask.blocked:
        a[q, k] = False
    return a


MASKS: dict[str, dict[str, object]] = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": 7},
    "causal+window": {"causal": True, "window": 5},
    "padding": {"padding": True},
    "blocked": {"blocked": ((0, 0), (40, 3), (40, 39))},
}


def make(name: str, s: int) -> BlockMask:
    spec = dict(MASKS[name])
    pad = None
    if spec.pop("padding", False):
        pad = torch.ones(s, dtype=torch.bool)
        pad[s - 9 :] = False
        pad[2] = False
    return BlockMask(s, s, key_padding=pad, **spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(MASKS))
@pytest.mark.parametrize(("s", "block"), [(83, 16), (64, 64), (50, 7)])
def test_flash_contexts_and_row_normalisers_equal_the_dense_computation(name: str, s: int, block: int) -> None:
    gen = torch.Generator().manual_seed(s)
    q = torch.randn(4, s, 8, generator=gen, dtype=torch.float64) * 2
    k = torch.randn(2, s, 8, generator=gen, dtype=torch.float64) * 2
    v = torch.randn(2, s, 5, generator=gen, dtype=torch.float64)
    mask, scale = make(name, s), 1 / math.sqrt(8)
    ctx, lse = flash(q, k, v, mask, scale, block=block)
    w_ref, ctx_ref, lse_ref = dense(q.numpy(), k.numpy(), v.numpy(), allowed_of(mask), scale)
    np.testing.assert_allclose(ctx.numpy(), ctx_ref, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(lse.numpy()), np.isinf(lse_ref))
    finite = np.isfinite(lse_ref)
    np.testing.assert_allclose(lse.numpy()[finite], lse_ref[finite], atol=1e-12)
    for rows, cols in [((0, s), (0, s)), ((3, 17), (10, s)), ((s - 1, s), (0, 1))]:
        got = weights(q, k, lse, mask, scale, rows, cols).numpy()
        np.testing.assert_allclose(got, w_ref[:, rows[0] : rows[1], cols[0] : cols[1]], atol=1e-12)


def test_a_row_with_no_key_has_no_normaliser_zero_weights_and_a_zero_context() -> None:
    s = 12
    pad = torch.zeros(s, dtype=torch.bool)  # every key is padding
    q = torch.randn(1, s, 4, dtype=torch.float64)
    ctx, lse = flash(q, q.clone(), q.clone(), BlockMask(s, s, key_padding=pad), 0.5, block=5)
    assert bool(torch.isinf(lse).all()) and not bool(ctx.any())
    assert not bool(weights(q, q, lse, BlockMask(s, s, key_padding=pad), 0.5, (0, s), (0, s)).any())


@pytest.mark.parametrize("name", ["none", "causal", "padding"])
def test_block_summaries_equal_the_dense_maxima_and_means(name: str) -> None:
    s = 70
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, s, 6, generator=gen, dtype=torch.float64) * 3
    k = torch.randn(1, s, 6, generator=gen, dtype=torch.float64) * 3
    mask = make(name, s)
    _, lse = flash(q, k, k.clone(), mask, 0.4, block=16)
    w_ref = dense(q.numpy(), k.numpy(), k.numpy(), allowed_of(mask), 0.4)[0]
    for cell in (8, 16, 64):
        bmax, bsum = summarise(q, k, lse, mask, 0.4, cell, block=16)
        n = math.ceil(s / cell)
        assert bmax.shape == bsum.shape == (2, n, n)
        np.testing.assert_allclose(bmax.numpy(), np.stack([fold(w, cell, "max") for w in w_ref]), atol=1e-6)
        counts = block_counts(s, s, cell).numpy()
        np.testing.assert_allclose(bsum.numpy() / counts, np.stack([fold(w, cell, "mean") for w in w_ref]), atol=1e-6)


def test_a_wrong_rescale_fails_the_same_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: an online softmax that forgets to rescale the running sum when the maximum grows."""
    s = 40
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, s, 4, generator=gen, dtype=torch.float64) * 3
    k = torch.randn(1, s, 4, generator=gen, dtype=torch.float64) * 3
    v = torch.randn(1, s, 3, generator=gen, dtype=torch.float64)
    mask = BlockMask(s, s)
    _, ctx_ref, _ = dense(q.numpy(), k.numpy(), v.numpy(), allowed_of(mask), 0.5)
    real_exp = torch.exp
    calls = {"n": 0}

    def no_rescale(t: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return torch.ones_like(t) if calls["n"] % 2 == 0 else real_exp(t)  # the rescale factor, every 2nd exp

    monkeypatch.setattr(torch, "exp", no_rescale)
    ctx, _ = flash(q, k, v, mask, 0.5, block=8)
    monkeypatch.undo()
    assert np.abs(ctx.numpy() - ctx_ref).max() > 1e-3


def fold(w: np.ndarray, cell: int, agg: str) -> np.ndarray:
    """Block maxima or means of w over cell x cell blocks, the edge blocks cut at w's edge (their mean over the
    cells they hold)."""
    r, c = w.shape
    nr, nc = math.ceil(r / cell), math.ceil(c / cell)
    pad = np.full((nr * cell, nc * cell), np.nan)
    pad[:r, :c] = w
    blocks = pad.reshape(nr, cell, nc, cell)
    return np.nanmax(blocks, axis=(1, 3)) if agg == "max" else np.nanmean(blocks, axis=(1, 3))


@pytest.mark.parametrize("fine", [1, 2, 4, 8])
def test_every_tile_of_every_level_equals_the_dense_weights_folded(fine: int) -> None:
    """Levels 0..2 over 700 positions: exact cells at the deepest, pyramid folds at or above `fine`, exact
    recomputation folded below it; the edge tiles are cut at S."""
    from engine.tiles import deepest, keep, tile, tile_spec

    s = 700
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, s, 8, generator=gen, dtype=torch.float64) * 2
    k = torch.randn(1, s, 8, generator=gen, dtype=torch.float64) * 2
    pad = torch.ones(s, dtype=torch.bool)
    pad[-20:] = False
    mask = BlockMask(s, s, causal=True, key_padding=pad)
    _, lse = flash(q, k, k.clone(), mask, 0.35, block=256)
    run, smax, smean, block = keep(q, k, lse, mask, 0.35, fine, grid=64)
    w_ref = dense(q.numpy(), k.numpy(), k.numpy(), allowed_of(mask), 0.35)[0]
    assert block == 16 and smax.shape == (2, 44, 44)  # the power of two from the fine block up that fits grid 64
    np.testing.assert_allclose(smax[1].numpy(), fold(w_ref[1], 16, "max"), atol=1e-6)
    np.testing.assert_allclose(smean[1].numpy(), fold(w_ref[1], 16, "mean"), atol=1e-6)
    assert deepest(s) == 2
    for z in range(3):
        n = 2**z
        for x in range(n):
            for y in range(n):
                spec = tile_spec(s, s, z, x, y)
                if isinstance(spec, str):
                    assert spec.startswith(("x:", "y:")) and z == 2 and 3 in (x, y)  # 700 < 4 * 256
                    continue
                for head in (0, 1):
                    for agg in ("max", "mean"):
                        want = fold(w_ref[head, spec.q0 : spec.q1, spec.k0 : spec.k1], spec.cell, agg)
                        np.testing.assert_allclose(tile(run, head, spec, agg).numpy(), want, atol=1e-6)
    assert tile_spec(s, s, 3, 0, 0) == "z: got 3; this run has levels 0 to 2"
