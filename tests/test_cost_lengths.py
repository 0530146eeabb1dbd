"""/api/cost with `measure_lengths`: dense and blockwise attention measured here at several lengths, on the same
random Q, K, V. Both give the same contexts; the dense pass's peak memory grows with S^2 and the blockwise pass's
does not; every refusal names its field and its limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

import engine.analysis.lengths as lengths_module
from engine.analysis.cost import CostQuery
from engine.analysis.lengths import dense, lengths_flops
from engine.blockwise import BlockMask, flash
from tests.fixtures import make_app_client
from tests.helpers import assert_error

SHAPE = {"heads": 2, "d_model": 32, "layers": 3}


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    """One request measured at 256, 1024 and 4096 tokens (2 heads of d_head 16, float32, blocks of 256 keys)."""

    with make_app_client(models="textbook") as client:
        resp = client.post("/api/cost", json={**SHAPE, "measure_lengths": [256, 1024, 4096]})
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def test_both_passes_give_the_same_contexts_at_every_length(measured: dict[str, Any]) -> None:
    lengths = measured["lengths"]
    assert lengths["block"] == 256 and lengths["measured_dtype"] == "float32"
    assert [p["seq_len"] for p in lengths["points"]] == [256, 1024, 4096]
    for p in lengths["points"]:
        assert 0.0 <= p["max_abs_diff"] < 1e-5, p
        assert p["dense_ms"] > 0 and p["blockwise_ms"] > 0


def test_dense_memory_grows_with_the_square_and_blockwise_does_not(measured: dict[str, Any]) -> None:
    at = {p["seq_len"]: p for p in measured["lengths"]["points"]}
    # 4x the length: 16x the dense scores, and the blockwise pass holds one block of them whatever the length
    assert at[4096]["dense_peak_bytes"] / at[1024]["dense_peak_bytes"] > 8
    assert at[4096]["blockwise_peak_bytes"] / at[1024]["blockwise_peak_bytes"] < 8
    assert at[4096]["blockwise_peak_bytes"] < at[4096]["dense_peak_bytes"] / 8
    # the prediction is the cost panel's formula for one layer at batch 1: H x S^2 x 4 bytes
    for s, p in at.items():
        assert p["predicted_score_bytes"] == 2 * s * s * 4
        assert p["predicted_block_bytes"] == 2 * min(s, 256) ** 2 * 4
        assert p["dense_peak_bytes"] >= p["predicted_score_bytes"]  # the scores are held whole, and more
    # the formulas of the rest of the answer are those of the request's own shape, untouched by the lengths
    assert measured["query"]["measure_lengths"] == [256, 1024, 4096] and measured["measured"] is None


def test_without_lengths_nothing_is_measured(client: TestClient) -> None:
    r = client.post("/api/cost", json=SHAPE).json()
    assert r["lengths"] is None and not {"measure_lengths", "measure_block"} & set(r["query"])


def test_the_check_can_fail_on_a_wrong_blockwise_pass(monkeypatch: pytest.MonkeyPatch, client: TestClient) -> None:
    """A blockwise pass whose contexts are off by 1e-3: the difference the answer reports shows it."""

    def off(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, scale: float, block: int):  # type: ignore[no-untyped-def]
        contexts, lse = flash(q, k, v, mask, scale, block)
        return contexts + 1e-3 * torch.randn_like(contexts), lse

    monkeypatch.setattr(lengths_module, "flash", off)
    r = client.post("/api/cost", json={**SHAPE, "measure_lengths": [64]}).json()
    assert r["lengths"]["points"][0]["max_abs_diff"] > 1e-5


def test_the_dense_pass_is_the_softmax_of_the_whole_scores() -> None:
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 40, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    want = torch.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1) @ v
    assert torch.allclose(dense(q, k, v, 0.5), want, atol=1e-12)
    got, _ = flash(q, k, v, BlockMask(40, 40), 0.5, 16)
    assert torch.allclose(got, want, atol=1e-12)


def test_grouped_kv_heads_measure_too(client: TestClient) -> None:
    r = client.post("/api/cost", json={"heads": 4, "kv_heads": 2, "d_model": 32, "measure_lengths": [100, 300]})
    assert r.status_code == 200, r.text
    assert all(p["max_abs_diff"] < 1e-5 for p in r.json()["lengths"]["points"])


@pytest.mark.parametrize(
    ("body", "settings", "field", "words"),
    [
        ({"measure_lengths": [4096] * 3, "heads": 12}, {"max_lengths_flops": 10**9}, "measure_lengths",
         ("FLOPs", "ATTNLAB_MAX_LENGTHS_FLOPS")),
        ({"measure_lengths": [8192], "heads": 1, "d_model": 16}, {"max_lengths_scores": 10**6}, "measure_lengths",
         ("1 x 8,192^2 = 67,108,864 scores", "ATTNLAB_MAX_LENGTHS_SCORES")),
        ({"measure_lengths": [64], "heads": 8, "d_model": 64}, {"max_heads": 4}, "heads", ("ATTNLAB_MAX_HEADS",)),
        ({"measure_lengths": [64], "d_model": 2048, "heads": 8}, {}, "d_model", ("ATTNLAB_MAX_WIDTH",)),
        ({"measure_lengths": [64], "heads": 5}, {}, "heads", ("width must divide by heads",)),
        ({"measure_lengths": []}, {}, "measure_lengths", ()),
        ({"measure_lengths": [0]}, {}, "measure_lengths[0]", ()),
        ({"measure_lengths": [64] * 13}, {}, "measure_lengths", ()),
        ({"measure_lengths": [64], "measure_block": 8}, {}, "measure_block", ()),
    ],
)  # fmt: skip
def test_refusals_name_their_field(
    shared_client: Callable[..., TestClient],
    body: dict[str, Any],
    settings: dict[str, Any],
    field: str,
    words: tuple[str, ...],
) -> None:
    calls: list[int] = []
    real = lengths_module.measure_point
    client = shared_client(**settings)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lengths_module, "measure_point", lambda *a, **k: calls.append(1) or real(*a, **k))
        assert_error(client.post("/api/cost", json=body), 422, field, *words)
    assert calls == []  # refused before anything ran


def test_the_work_bound_counts_both_passes_three_times() -> None:
    q = CostQuery(heads=2, d_model=32)
    assert lengths_flops(q, [256, 512]) == 2 * 3 * 4 * 2 * 16 * (256**2 + 512**2)
