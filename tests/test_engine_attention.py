"""The engine against torch's scaled_dot_product_attention, a naive loop, and the invariants of attention."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from engine.attention import AttentionWeights, attention, from_concatenated
from engine.errors import AllMaskedRowsError, InputError, NonFiniteError
from engine.masks import MaskSpec, eligibility
from engine.softmax import masked_softmax


@pytest.fixture(autouse=True)
def float64_by_default() -> Iterator[None]:
    """Compare in float64 so equalities are tight; restore the default afterwards."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def random_weights(
    d_model: int,
    heads: int,
    d_head: int,
    d_v: int | None = None,
    kv_heads: int | None = None,
    w_o: bool = True,
    seed: int = 0,
) -> AttentionWeights:
    g = torch.Generator().manual_seed(seed)
    kv = heads if kv_heads is None else kv_heads
    d_v = d_head if d_v is None else d_v
    return from_concatenated(
        torch.randn(d_model, heads * d_head, generator=g),
        torch.randn(d_model, kv * d_head, generator=g),
        torch.randn(d_model, kv * d_v, generator=g),
        torch.randn(heads * d_v, d_model, generator=g) if w_o else None,
        heads,
        kv,
    )


def naive(x: torch.Tensor, w: AttentionWeights, eligible: torch.Tensor, scale: bool = True) -> torch.Tensor:
    """Attention written as loops over heads, queries and keys: the textbook definition."""
    s = x.shape[0]
    per_group = w.n_heads // w.n_kv_heads
    contexts = []
    for h in range(w.n_heads):
        g = h // per_group
        q, k, v = x @ w.W_Q[h], x @ w.W_K[g], x @ w.W_V[g]
        ctx = torch.zeros(s, w.d_v)
        for i in range(s):
            keys = [j for j in range(s) if eligible[i, j]]
            raw = torch.stack([q[i] @ k[j] for j in keys])
            if scale:
                raw = raw / math.sqrt(w.d_head)
            p = torch.exp(raw - raw.max())
            p = p / p.sum()
            for weight, j in zip(p, keys, strict=True):
                ctx[i] += weight * v[j]
        contexts.append(ctx)
    concat = torch.cat(contexts, dim=-1)
    return concat if w.W_O is None else concat @ w.W_O.reshape(-1, w.W_O.shape[-1])


MASKS = [
    MaskSpec(),
    MaskSpec(causal=True),
    MaskSpec(window=2),
    MaskSpec(causal=True, window=3),
    MaskSpec(padding=(True, True, False, True, True, False, True)),
    MaskSpec(causal=True, padding=(True, True, True, True, True, False, False), blocked=((3, 0), (6, 2))),
    MaskSpec(blocked=((0, 0), (0, 1), (4, 4))),
]


@pytest.mark.parametrize("spec", MASKS)
def test_attention_equals_sdpa_and_naive_loop(spec: MaskSpec) -> None:
    s, d, heads, d_head = 7, 12, 3, 4
    x = torch.randn(s, d, generator=torch.Generator().manual_seed(1))
    w = random_weights(d, heads, d_head, w_o=False)
    eligible = eligibility(spec, s)
    out = attention(x, w, eligible)

    q = torch.einsum("sd,hde->hse", x, w.W_Q)[None]
    k = torch.einsum("sd,hde->hse", x, w.W_K)[None]
    v = torch.einsum("sd,hde->hse", x, w.W_V)[None]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=eligible)
    torch.testing.assert_close(out.contexts, ref)
    torch.testing.assert_close(out.output[0], naive(x, w, eligible))


def test_unscaled_equals_sdpa_with_scale_one() -> None:
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
    w = random_weights(8, 2, 4, w_o=False)
    out = attention(x, w, scale=False)
    q, k, v = (torch.einsum("sd,hde->hse", x, m)[None] for m in (w.W_Q, w.W_K, w.W_V))
    torch.testing.assert_close(out.contexts, F.scaled_dot_product_attention(q, k, v, scale=1.0))
    assert out.scale_factor == 1.0


def test_key_and_value_widths_may_differ_and_w_o_projects() -> None:
    x = torch.randn(6, 10, generator=torch.Generator().manual_seed(3))
    w = random_weights(10, 2, d_head=3, d_v=5, w_o=True)
    out = attention(x, w)
    assert out.q.shape == (1, 2, 6, 3) and out.v.shape == (1, 2, 6, 5)
    assert out.contexts.shape == (1, 2, 6, 5) and out.concat.shape == (1, 6, 10)
    torch.testing.assert_close(out.output[0], naive(x, w, torch.ones(6, 6, dtype=torch.bool)))


def test_grouped_kv_equals_plain_attention_with_repeated_kv() -> None:
    d, heads, groups, d_head = 16, 8, 2, 4
    x = torch.randn(9, d, generator=torch.Generator().manual_seed(4))
    grouped = random_weights(d, heads, d_head, kv_heads=groups)
    per_group = heads // groups
    plain = AttentionWeights(
        W_Q=grouped.W_Q,
        W_K=grouped.W_K.repeat_interleave(per_group, dim=0),
        W_V=grouped.W_V.repeat_interleave(per_group, dim=0),
        W_O=grouped.W_O,
    )
    eligible = eligibility(MaskSpec(causal=True), 9)
    a, b = attention(x, grouped, eligible), attention(x, plain, eligible)
    assert a.k.shape[1] == groups and b.k.shape[1] == heads
    torch.testing.assert_close(a.weights, b.weights)
    torch.testing.assert_close(a.output, b.output)


def test_rows_sum_to_one_and_ineligible_keys_get_exactly_zero() -> None:
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(5))
    w = random_weights(6, 2, 3)
    eligible = eligibility(MaskSpec(causal=True, window=3, blocked=((5, 4),)), 8)
    out = attention(x, w, eligible)
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(1, 2, 8))
    assert bool((out.weights[:, :, ~eligible] == 0).all())
    assert bool((out.weights[:, :, eligible] > 0).all())


def test_future_perturbation_leaves_earlier_outputs_unchanged_under_causal() -> None:
    s = 8
    x = torch.randn(s, 6, generator=torch.Generator().manual_seed(6))
    w = random_weights(6, 2, 3)
    eligible = eligibility(MaskSpec(causal=True), s)
    base = attention(x, w, eligible).output[0]
    for j in range(s):
        moved = x.clone()
        moved[j] += torch.randn(6, generator=torch.Generator().manual_seed(100 + j)) * 3
        out = attention(moved, w, eligible).output[0]
        torch.testing.assert_close(out[:j], base[:j], rtol=0, atol=1e-12)
        assert float((out[j:] - base[j:]).abs().max()) > 1e-3  # the perturbed position and later ones do move


def test_padded_position_change_leaves_the_others_unchanged() -> None:
    s = 6
    padding = (True, True, True, False, True, True)
    x = torch.randn(s, 6, generator=torch.Generator().manual_seed(7))
    w = random_weights(6, 2, 3)
    eligible = eligibility(MaskSpec(padding=padding), s)
    base = attention(x, w, eligible).output[0]
    moved = x.clone()
    moved[3] = 50.0
    out = attention(moved, w, eligible).output[0]
    keep = [i for i in range(s) if i != 3]
    torch.testing.assert_close(out[keep], base[keep], rtol=0, atol=1e-12)
    # without the padding mask the same change does move the others: the test can fail
    free = attention(moved, w).output[0]
    assert float((free[keep] - attention(x, w).output[0][keep]).abs().max()) > 1e-3


def test_all_masked_rows_error_names_the_rows() -> None:
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(8))
    w = random_weights(4, 1, 2)
    eligible = eligibility(MaskSpec(padding=(False, True, True, True), blocked=((2, 1), (2, 2), (2, 3))), 4)
    eligible[0] = False
    with pytest.raises(AllMaskedRowsError) as err:
        attention(x, w, eligible, all_masked="error")
    assert err.value.rows == [0, 2]
    assert "0, 2" in str(err.value)


def test_all_masked_rows_zero_policy_gives_zero_weights_and_contexts() -> None:
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(9))
    w = random_weights(4, 2, 2, w_o=False)
    eligible = eligibility(MaskSpec(blocked=((1, 0), (1, 1), (1, 2), (1, 3))), 4)
    out = attention(x, w, eligible, all_masked="zero")
    assert bool((out.weights[0, :, 1] == 0).all()) and bool((out.contexts[0, :, 1] == 0).all())
    assert not bool(out.weights.isnan().any())
    torch.testing.assert_close(out.weights[0, :, [0, 2, 3]].sum(-1), torch.ones(2, 3))


def test_masked_softmax_is_stable_for_huge_scores() -> None:
    scores = torch.tensor([[[[1e30, -1e30, 0.0], [3.0, 1e30, 2.0]]]])
    eligible = torch.tensor([[True, True, False], [True, False, True]])
    w = masked_softmax(scores, eligible)
    assert not bool(w.isnan().any())
    torch.testing.assert_close(w[0, 0, 0], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(w[0, 0, 1], torch.tensor([math.e / (1 + math.e), 0.0, 1 / (1 + math.e)]))


def test_overflowing_scores_raise_instead_of_returning_inf() -> None:
    x = torch.full((3, 2), 1e20, dtype=torch.float32)
    w = from_concatenated(*(torch.full((2, 2), 1e20, dtype=torch.float32) for _ in range(3)), None, 1)
    with pytest.raises(NonFiniteError):
        attention(x, w)


def test_batch_equals_each_sequence_alone() -> None:
    g = torch.Generator().manual_seed(10)
    xs = torch.randn(3, 5, 8, generator=g)
    w = random_weights(8, 4, 2, kv_heads=2)
    eligible = torch.stack(
        [
            eligibility(MaskSpec(causal=True), 5),
            eligibility(MaskSpec(window=2), 5),
            eligibility(MaskSpec(padding=(True, True, True, False, False)), 5),
        ]
    )
    batched = attention(xs, w, eligible)
    for i in range(3):
        alone = attention(xs[i], w, eligible[i])
        torch.testing.assert_close(batched.weights[i], alone.weights[0])
        torch.testing.assert_close(batched.output[i], alone.output[0])


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        ((8, 3, 8, 8, None), "weights.w_q", "divide by heads"),
        ((8, 4, 6, 8, None), "weights.w_k", "kv_heads x d_head"),
        ((8, 4, 8, 8, 3), "kv_heads", "divide by kv_heads"),
    ],
)
def test_from_concatenated_names_the_field_and_numbers(
    args: tuple[int, int, int, int, int | None], field: str, words: str
) -> None:
    d, heads, k_cols, v_cols, kv = args
    with pytest.raises(InputError) as err:
        from_concatenated(torch.zeros(d, 8), torch.zeros(d, k_cols), torch.zeros(d, v_cols), None, heads, kv)
    assert err.value.field == field and words in err.value.message


@pytest.mark.parametrize("mask", ["causal", "window", "random", "empty rows", "none", "padded batch"])
def test_the_tiled_softmax_and_contexts_equal_the_whole_row_ones(mask: str) -> None:
    """From TILED_FROM bytes of weights the layer runs softmax_contexts (64 query rows at a time, only up to the last
    key a block may see, the mask added only where a block has masked keys): the same weights bit for bit, exact
    zeros off the mask, and the same contexts within float32 rounding, as the whole-row masked_softmax followed by
    weights @ V."""
    from engine.softmax import TILED_FROM, key_spans, softmax_contexts

    g = torch.Generator().manual_seed(0)
    b, h, s, d = (2 if mask == "padded batch" else 1), 12, 520, 32  # 520: a last block of 8 rows
    assert h * s * s * 4 >= TILED_FROM
    scores = torch.randn(b, h, s, s, generator=g) * 3
    v = torch.randn(b, s, h, d, generator=g).transpose(1, 2)  # V as the layer makes it: a view of (B, S, H * d)
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    eligible = {
        "causal": k <= q,
        "window": (k <= q) & (q - k < 40),
        "random": torch.rand(s, s, generator=g) < 0.3,
        "empty rows": (k <= q) & (q % 97 != 5),
        "none": torch.ones(s, s, dtype=torch.bool),
        # two sequences, the second padded after 300 tokens: its padded keys are masked in every row
        "padded batch": torch.stack([k <= q, (k <= q) & (k < 300)]),
    }[mask]
    keyed = bool(eligible.any(dim=-1).all())
    want = masked_softmax(scores, eligible, every_row_keyed=keyed)
    weights, contexts = softmax_contexts(scores, eligible, v, torch.empty_like(scores), every_row_keyed=keyed)
    assert torch.equal(weights, want)
    assert bool((weights.transpose(0, 1)[:, (~eligible).expand(b, s, s)] == 0).all())
    assert torch.allclose(contexts, want @ v, atol=1e-5, rtol=1e-5)
    # each block's extent, one past the last key any of its rows may see, and the keys before it that need the mask
    for block, (lo, hi, end) in enumerate(key_spans(eligible, 64)):
        rows = eligible[..., block * 64 : (block + 1) * 64, :].reshape(-1, s)  # every batch's rows of the block
        seen = rows.any(dim=0).nonzero()
        assert end == (int(seen.max()) + 1 if len(seen) else 0)
        shut = (~rows[:, :end]).any(dim=0).nonzero()
        assert (lo, hi) == ((int(shut.min()), int(shut.max()) + 1) if len(shut) else (0, 0))
