"""`include: ["attention_flow"]` in /api/attention, and engine/analysis/attention_flow.py, checked against a plain
augmenting-path max-flow in float64 written here (no scipy), on hand-made maps and on the real models."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.attention_flow import FLOW_MAX_TOKENS, attention_flow, flow_work, fused_maps
from tests.fixtures import make_app_client

REPEAT = "red ball king river frog red ball king"
MINILM_TEXT = "The animal didn't cross the street because it was too tired"


def reference_max_flow(cap: np.ndarray, source: int, sink: int) -> float:
    """Edmonds-Karp on a dense float64 capacity matrix."""
    n = cap.shape[0]
    residual = cap.astype(np.float64).copy()
    total = 0.0
    while True:
        parent = [-1] * n
        parent[source] = source
        queue = deque([source])
        while queue and parent[sink] == -1:
            u = queue.popleft()
            for v in np.nonzero(residual[u] > 1e-15)[0]:
                if parent[v] == -1:
                    parent[v] = u
                    queue.append(int(v))
        if parent[sink] == -1:
            return total
        path, v = [], sink
        while v != source:
            path.append((parent[v], v))
            v = parent[v]
        push = min(residual[u, v] for u, v in path)
        for u, v in path:
            residual[u, v] -= push
            residual[v, u] += push
        total += push


def reference_flow(maps: list[np.ndarray], t: int) -> np.ndarray:
    """F_t (S, S) for one item: node (level l, position q) is l * S + q; an edge (l + 1, q) -> (l, k) carries
    maps[l][q, k]; each row divided by its sum."""
    s = maps[0].shape[0]
    n = (t + 2) * s
    cap = np.zeros((n, n))
    for level in range(t + 1):
        cap[(level + 1) * s : (level + 2) * s, level * s : (level + 1) * s] = maps[level]
    flows = np.array([[reference_max_flow(cap, (t + 1) * s + q, k) for k in range(s)] for q in range(s)])
    total = flows.sum(-1, keepdims=True)
    return np.divide(flows, total, out=np.zeros_like(flows), where=total > 0)


def random_weights(s: int, layers: int, heads: int, causal: bool, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(layers):
        scores = torch.randn(1, heads, s, s, generator=g, dtype=torch.float64) * 2
        if causal:
            scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
        out.append(scores.softmax(-1))
    return out


@pytest.mark.parametrize(("causal", "residual", "fuse"), [(True, True, "mean"), (False, False, "max")])
def test_flow_equals_a_plain_max_flow_in_float64(causal: bool, residual: bool, fuse: Any) -> None:
    weights = random_weights(6, 3, 2, causal, seed=1)
    got = attention_flow(weights, fuse, residual)
    maps = [m[0].numpy() for m in fused_maps(weights, fuse, residual)]
    for t in range(3):
        want = reference_flow(maps, t)
        assert np.abs(got[t][0].numpy() - want).max() < 1e-7, t
    # after layer 0 the flow is the layer's own fused map; later it is not rollout's product
    assert np.abs(got[0][0].numpy() - maps[0]).max() < 1e-7
    rolled = maps[2] @ maps[1] @ maps[0]
    assert np.abs(got[2][0].numpy() - rolled).max() > 1e-3


def test_a_bottleneck_limits_the_flow_where_rollout_adds_up_paths() -> None:
    """Two layers over 3 positions. Query 2 reaches key 0 only through position 1 (capacity 0.5 into it, then 0.1
    on to key 0), so its flow to key 0 is 0.1 before normalising, where rollout would give 0.05."""
    a0 = np.array([[1.0, 0, 0], [0.1, 0.9, 0], [0, 0, 1.0]])
    a1 = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0.5, 0.5]])
    weights = [torch.tensor(a)[None, None] for a in (a0, a1)]
    flow = attention_flow(weights, "mean", residual=False)[1][0].numpy()
    raw = np.array([0.1, 0.5, 0.5])  # key 0: min(0.5, 0.1); key 1: min(0.5, 0.9); key 2: 0.5
    assert np.abs(flow[2] - raw / raw.sum()).max() < 1e-7
    assert np.abs(flow[0] - [1, 0, 0]).max() < 1e-7


def test_the_work_counts_reachable_pairs_times_edges_and_skips_layer_0() -> None:
    weights = random_weights(5, 2, 1, causal=True, seed=0)
    maps = fused_maps(weights)
    edges = 15  # a causal 5 x 5 map has 15 cells, all positive after a softmax
    assert flow_work(maps, [0]) == 0
    assert flow_work(maps, [1]) == 15 * (2 * edges)  # 15 reachable pairs over the edges of levels 0 and 1
    assert flow_work(maps, [0, 1]) == flow_work(maps, [1])


@pytest.fixture(scope="module")
def app_client() -> Iterator[TestClient]:
    with make_app_client(models="induction,minilm,random") as c:
        yield c


def test_the_api_answers_each_layers_flow_as_the_engine_computes_it(app_client: TestClient) -> None:
    r = app_client.post(
        "/api/attention", json={"model": "induction", "text": REPEAT, "include": ["weights", "attention_flow"]}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    weights = [
        torch.tensor([h["weights"] for h in layer["heads"]], dtype=torch.float64)[None] for layer in body["layers"]
    ]
    maps = [m[0].numpy() for m in fused_maps(weights)]
    for t, layer in enumerate(body["layers"]):
        got = np.asarray(layer["attention_flow"])
        assert got.shape == (8, 8)
        assert np.triu(got, 1).max() == 0.0  # causal: a later key is unreachable
        assert np.abs(got - reference_flow(maps, t)).max() < 1e-6  # float32 weights, float64 reference
    one = app_client.post(
        "/api/attention", json={"model": "minilm", "text": MINILM_TEXT, "include": ["attention_flow"], "layer": 2}
    )
    assert one.status_code == 200, one.text
    assert len(one.json()["layers"]) == 1 and one.json()["layers"][0]["index"] == 2


def test_flow_past_its_bounds_is_refused_by_name(
    app_client: TestClient, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    words = " ".join(["red"] * (FLOW_MAX_TOKENS - 1))  # with [CLS] and [SEP]: one position past the limit
    r = app_client.post("/api/attention", json={"model": "minilm", "text": words, "include": ["attention_flow"]})
    assert r.status_code == 422 and r.json()["error"]["field"] == "include", r.text
    assert str(FLOW_MAX_TOKENS) in r.json()["error"]["message"]
    r = app_client.post(
        "/api/attention",
        json={
            "model": "random",
            "text": "a b c",
            "include": ["attention_flow"],
            "source": {"text": "x y z w"},
            "options": {"d_model": 8},
        },
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "include" and "source" in r.json()["error"]["message"]
    with make_client(models="induction", max_flow_work=1000) as c:
        r = c.post("/api/attention", json={"model": "induction", "text": REPEAT, "include": ["attention_flow"]})
        assert r.status_code == 422 and r.json()["error"]["code"] == "too_large", r.text
        assert "ATTNLAB_MAX_FLOW_WORK" in r.json()["error"]["message"]
        ok = c.post(
            "/api/attention", json={"model": "induction", "text": REPEAT, "include": ["attention_flow"], "layer": 0}
        )
        assert ok.status_code == 200, ok.text  # layer 0's flow is its map: no max-flow to count
