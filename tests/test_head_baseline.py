"""The shuffled baseline of the head-type scores: a head built to attend to the previous token stands far above its
shuffles, a uniform head does not; the shuffles keep each row's weights on its eligible keys; seeded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.head_baseline import SHUFFLED, draw_shuffles, shuffled
from engine.masks import causal_mask
from tests.helpers import assert_error

S = 10
SHARP = 8.0  # q.k = SHARP^2 on the previous token, 0 elsewhere: about all of a row's weight on it


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def built_heads(s: int = S) -> dict[str, Any]:
    """The custom model with two heads on one-hot positions: head 0 a previous-token head (q_i = c e_i, k_j = c
    e_(j+1)), head 1 uniform (W_Q = 0: every score 0)."""
    eye = torch.eye(s)
    shift = torch.diag(torch.ones(s - 1), 1)  # e_j -> e_(j+1)
    w_q = torch.cat([SHARP * eye, torch.zeros(s, s)], dim=1)
    w_k = torch.cat([SHARP * shift, SHARP * eye], dim=1)
    w_v = torch.cat([eye, eye], dim=1)
    return {
        "model": "custom",
        "x": eye.tolist(),
        "weights": {"w_q": w_q.tolist(), "w_k": w_k.tolist(), "w_v": w_v.tolist()},
        "heads": 2,
        "masks": {"causal": True},
        "include": ["baseline"],
    }


def heads_of(client: TestClient, **extra: Any) -> list[dict[str, Any]]:
    resp = client.post("/api/heads", json={**built_heads(), **extra})
    assert resp.status_code == 200, resp.text[:400]
    return resp.json()["heads"]  # type: ignore[no-any-return]


def test_a_previous_token_head_stands_far_above_its_shuffles_and_a_uniform_head_does_not(client: TestClient) -> None:
    sharp, uniform = heads_of(client)
    assert sharp["previous_token"] > 0.99
    base = sharp["baselines"]["previous_token"]
    # chance: a query's weight on one of its q + 1 eligible keys, 1 / (q + 1), averaged over q = 1..S-1
    chance = sum(1 / (q + 1) for q in range(1, S)) / (S - 1)
    assert base["mean"] == pytest.approx(chance, abs=0.06)
    assert base["above"] == pytest.approx(sharp["previous_token"] - base["mean"])
    assert base["above"] > 0.6 and base["z"] > 3
    flat = uniform["baselines"]["previous_token"]
    assert uniform["previous_token"] == pytest.approx(chance)
    assert abs(flat["above"]) < 1e-9 and flat["std"] < 1e-9 and flat["z"] is None  # its shuffles are itself
    # a local head's weight lies nearer than its shuffles put it; entropy has no baseline (a shuffle keeps it)
    assert sharp["baselines"]["mean_distance"]["above"] < -1
    assert set(sharp["baselines"]) == set(SHUFFLED)
    assert sharp["baselines"]["bracket_match"] is None and sharp["bracket_match"] is None


def test_the_baseline_is_seeded(client: TestClient) -> None:
    first, again = heads_of(client, seed=3), heads_of(client, seed=3)
    other = heads_of(client, seed=4)
    assert first == again
    assert first[0]["baselines"]["previous_token"] != other[0]["baselines"]["previous_token"]
    assert first[0]["previous_token"] == other[0]["previous_token"]  # the score itself does not depend on it


def test_without_the_include_there_is_no_baseline(client: TestClient) -> None:
    body = {**built_heads(), "include": []}
    rows = client.post("/api/heads", json=body).json()["heads"]
    assert all(r["baselines"] is None for r in rows)


def test_a_shuffle_moves_each_rows_weights_among_its_eligible_keys_only() -> None:
    eligible = causal_mask(S)
    eligible[5, 2] = False  # a blocked cell
    gen = torch.Generator().manual_seed(0)
    w = torch.rand(3, S, S, generator=gen, dtype=torch.float64) * eligible
    shuffles = draw_shuffles(eligible, 5, seed=1)
    moved_any = False
    for sources in shuffles.sources:
        out = shuffled(w, shuffles.slots, sources)
        assert bool((out[:, ~eligible] == 0).all())  # masked keys keep their 0
        for q in range(S):
            keys = eligible[q]
            assert torch.equal(out[:, q, keys].sort(dim=-1).values, w[:, q, keys].sort(dim=-1).values)
        moved_any |= not torch.equal(out, w)
    assert moved_any
    again = draw_shuffles(eligible, 5, seed=1)
    assert torch.equal(again.sources, shuffles.sources)


def test_too_much_shuffling_is_a_422_naming_permutations(make_client: Any) -> None:
    with make_client(max_baseline_values=1000) as small:
        resp = small.post("/api/heads", json={**built_heads(), "permutations": 20})  # 20 x 1 x 2 x 100 = 4000
    assert_error(resp, 422, "permutations", "limit 1,000")
