"""Invariants of masked multi-head attention over random shapes and masks (hypothesis)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.attention import attention, from_concatenated
from engine.masks import MaskSpec, eligibility


@st.composite
def cases(draw: st.DrawFn) -> tuple[torch.Tensor, object, MaskSpec, int]:
    s = draw(st.integers(1, 10))
    kv = draw(st.integers(1, 3))
    heads = kv * draw(st.integers(1, 3))
    d_head = draw(st.integers(1, 5))
    d_v = draw(st.integers(1, 5))
    d = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(s, d, generator=g, dtype=torch.float64)
    w = from_concatenated(
        torch.randn(d, heads * d_head, generator=g, dtype=torch.float64),
        torch.randn(d, kv * d_head, generator=g, dtype=torch.float64),
        torch.randn(d, kv * d_v, generator=g, dtype=torch.float64),
        None,
        heads,
        kv,
    )
    spec = MaskSpec(
        causal=draw(st.booleans()),
        padding=tuple(draw(st.lists(st.booleans(), min_size=s, max_size=s))) if draw(st.booleans()) else None,
        window=draw(st.none() | st.integers(1, s + 1)),
        blocked=tuple(draw(st.lists(st.tuples(st.integers(0, s - 1), st.integers(0, s - 1)), max_size=2 * s))),
    )
    return x, w, spec, seed


@settings(max_examples=150, deadline=None)
@given(cases())
def test_weights_are_a_distribution_over_eligible_keys(case: tuple[torch.Tensor, object, MaskSpec, int]) -> None:
    x, w, spec, _ = case
    s = x.shape[0]
    eligible = eligibility(spec, s)
    out = attention(x, w, eligible, all_masked="zero")  # type: ignore[arg-type]
    weights = out.weights[0]  # (H, S, S)
    assert torch.isfinite(weights).all() and torch.isfinite(out.output).all()
    assert (weights >= 0).all()
    assert (weights[:, ~eligible] == 0).all()
    live = eligible.any(-1)
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[:, live], torch.ones_like(sums[:, live]))
    assert (sums[:, ~live] == 0).all()
    assert (out.contexts[0][:, ~live] == 0).all()


@settings(max_examples=150, deadline=None)
@given(cases())
def test_contexts_equal_sdpa_on_rows_with_an_eligible_key(case: tuple[torch.Tensor, object, MaskSpec, int]) -> None:
    x, w, spec, _ = case
    eligible = eligibility(spec, x.shape[0])
    out = attention(x, w, eligible, all_masked="zero")  # type: ignore[arg-type]
    live = eligible.any(-1)
    if not live.any():
        return
    heads = out.q.shape[1]
    k = out.k.repeat_interleave(heads // out.k.shape[1], dim=1)
    v = out.v.repeat_interleave(heads // out.v.shape[1], dim=1)
    ref = F.scaled_dot_product_attention(out.q, k, v, attn_mask=eligible)
    torch.testing.assert_close(out.contexts[0][:, live], ref[0][:, live])
