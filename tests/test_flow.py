"""`include` rollout, value_norms and head_contributions in /api/attention, checked against NumPy in float64."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.flow import rollout
from engine.models.base import RunInput
from engine.models.induction import InductionModel
from engine.models.random_layer import RandomModel
from tests.fixtures import make_app_client

REPEAT = "red ball king river frog red ball king"
MINILM_TEXT = "The animal didn't cross the street because it was too tired"


@pytest.fixture(scope="module")
def app_client() -> Iterator[TestClient]:
    with make_app_client(models="induction,minilm,random,textbook") as c:
        yield c


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def refused(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/attention", json=body)
    assert r.status_code == 422, r.text
    return dict(r.json()["error"])


def weights_of(body: dict[str, Any]) -> list[np.ndarray]:
    """Each layer's (H, S, S_k) weights, float64."""
    return [np.asarray([h["weights"] for h in layer["heads"]], dtype=np.float64) for layer in body["layers"]]


def numpy_rollout(maps: list[np.ndarray], fuse: str, residual: bool) -> list[np.ndarray]:
    out, joint = [], np.eye(maps[0].shape[-1])
    for w in maps:
        a = {"mean": w.mean(0), "max": w.max(0), "min": w.min(0)}[fuse]
        if residual:
            a = a + np.eye(a.shape[0])
        total = a.sum(-1, keepdims=True)
        a = np.divide(a, total, out=np.zeros_like(a), where=total > 0)
        joint = a @ joint
        out.append(joint)
    return out


@pytest.mark.parametrize(("fuse", "residual"), [("mean", True), ("max", False), ("min", True)])
def test_rollout_equals_numpy_on_minilm(app_client: TestClient, fuse: str, residual: bool) -> None:
    body = post(
        app_client,
        model="minilm",
        text=MINILM_TEXT,
        include=["weights", "rollout"],
        rollout={"heads": fuse, "residual": residual},
    )
    want = numpy_rollout(weights_of(body), fuse, residual)
    for layer, expected in zip(body["layers"], want, strict=True):
        got = np.asarray(layer["rollout"])
        assert got.shape == expected.shape == (len(body["tokens"]),) * 2
        assert np.abs(got - expected).max() < 1e-6
        assert np.abs(got.sum(-1) - 1).max() < 1e-5  # every query keeps a key: rows stay distributions
    # the layers really are multiplied: the last rollout is not the last layer's own fused map
    last_alone = numpy_rollout(weights_of(body)[-1:], fuse, residual)[0]
    assert np.abs(np.asarray(body["layers"][-1]["rollout"]) - last_alone).max() > 1e-2


def test_rollout_of_a_causal_model_stays_lower_triangular_and_a_window_widens_a_layer_at_a_time(
    app_client: TestClient,
) -> None:
    """Induction (2 layers, causal): each rollout is exactly 0 above the diagonal. With a window of 2, layer l's
    rollout reaches back exactly (l + 1) keys (w - 1 = 1 a layer), nonzero on that edge and 0 past it."""
    causal = post(app_client, model="induction", text=REPEAT, include=["rollout"])
    for layer in causal["layers"]:
        r = np.asarray(layer["rollout"])
        assert np.triu(r, 1).max() == 0.0
        assert np.tril(r).min() >= 0.0 and np.diag(r).min() > 0.0
    windowed = post(app_client, model="induction", text=REPEAT, include=["rollout"], masks={"window": 2})
    q, k = np.indices((8, 8))
    for index, layer in enumerate(windowed["layers"]):
        r = np.asarray(layer["rollout"])
        reach = index + 1
        assert r[q - k > reach].max() == 0.0
        assert r[q - k == reach].min() > 0.0


def test_rollout_of_one_layer_shown_runs_through_every_layer_before_it(app_client: TestClient) -> None:
    every = post(app_client, model="minilm", text=MINILM_TEXT, include=["rollout"])
    one = post(app_client, model="minilm", text=MINILM_TEXT, include=["rollout"], layer=3)
    assert len(one["layers"]) == 1
    assert np.abs(np.asarray(one["layers"][0]["rollout"]) - np.asarray(every["layers"][3]["rollout"])).max() < 1e-6


def test_rollout_of_a_batch_is_per_item(app_client: TestClient) -> None:
    texts = ["red ball king river", "frog red"]
    body = post(app_client, model="induction", texts=texts, include=["weights", "rollout"])
    maps = [np.asarray([h["weights"] for h in layer["heads"]], dtype=np.float64) for layer in body["layers"]]
    for item in range(2):
        want = numpy_rollout([m[:, item] for m in maps], "mean", True)
        for layer, expected in zip(body["layers"], want, strict=True):
            assert np.abs(np.asarray(layer["rollout"])[item] - expected).max() < 1e-6


def test_rollout_without_residual_keeps_a_query_with_no_key_at_zero() -> None:
    """A query whose row is masked everywhere (all_masked zero) has no distribution to normalise: its rollout row
    stays 0 and no NaN appears; with the residual identity the row is the query itself."""
    w = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])  # (B, H, S, S): query 1 has no key
    bare = rollout([w, w], "mean", residual=False)
    assert torch.isfinite(bare[-1]).all()
    assert bare[-1][0, 1].tolist() == [0.0, 0.0]
    kept = rollout([w], "mean", residual=True)
    assert kept[0][0, 1].tolist() == [0.0, 1.0]


def value_parts(model: Any, inp: RunInput) -> Any:
    return model.run(inp, torch.device("cpu"), torch.float64)


def test_value_norms_and_head_contributions_equal_numpy_on_induction(app_client: TestClient) -> None:
    """|a_ij v_j W_O^h| and |context_h W_O^h| from the API against the engine's own v, contexts and W_O in float64;
    the heads' output vectors plus b_O sum to the layer's output, and each contribution is at most the sum of its
    row's value norms (the triangle inequality, strict where a row mixes keys)."""
    body = post(app_client, model="induction", text=REPEAT, include=["weights", "value_norms", "head_contributions"])
    run = value_parts(InductionModel(), RunInput(text=REPEAT))
    strict_somewhere = False
    for index, layer in enumerate(body["layers"]):
        a = run.layers[index].attn
        w = run.layers[index].weights
        assert w.W_O is not None
        v = a.v[0].repeat_interleave(a.weights.shape[1] // a.v.shape[1], dim=0).numpy()  # (H, S, d_v)
        w_o = w.W_O.numpy()  # (H, d_v, D)
        weights = a.weights[0].numpy()
        parts = np.einsum("hsd,hde->hse", a.contexts[0].numpy(), w_o)
        b_o = w.b_O.numpy() if w.b_O is not None else 0.0
        assert np.abs(parts.sum(0) + b_o - a.output[0].numpy()).max() < 1e-10
        for h, head in enumerate(layer["heads"]):
            moved = np.linalg.norm(v[h] @ w_o[h], axis=-1)
            want = weights[h] * moved[None, :]
            got = np.asarray(head["value_norms"])
            assert np.abs(got - want).max() < 1e-5 * max(1.0, want.max())
            contribution = np.asarray(head["contribution"])
            assert np.abs(contribution - np.linalg.norm(parts[h], axis=-1)).max() < 1e-5 * max(1.0, moved.max())
            assert (contribution <= got.sum(-1) * (1 + 1e-5) + 1e-6).all()
            strict_somewhere |= bool((contribution < got.sum(-1) * 0.99).any())
    assert strict_somewhere


def test_a_model_without_w_o_moves_its_values_themselves(app_client: TestClient) -> None:
    """The textbook model concatenates its contexts (no W_O): value norms are a_ij |v_j|, contributions |context|."""
    body = post(
        app_client, model="textbook", include=["weights", "qkv", "contexts", "value_norms", "head_contributions"]
    )
    assert body["config"]["has_w_o"] is False
    for head in body["layers"][0]["heads"]:
        v, weights = np.asarray(head["v"]), np.asarray(head["weights"])
        assert np.abs(np.asarray(head["value_norms"]) - weights * np.linalg.norm(v, axis=-1)[None, :]).max() < 1e-6
        assert np.abs(np.asarray(head["contribution"]) - np.linalg.norm(head["contexts"], axis=-1)).max() < 1e-6


def test_value_norms_follow_grouped_values_through_each_heads_own_w_o(app_client: TestClient) -> None:
    """random with 4 heads sharing 2 K/V groups: heads of one group read the same values but write them through
    different W_O^h, so their value norms differ while their weights' zeros agree."""
    options = {"d_model": 8, "heads": 4, "kv_heads": 2}
    body = post(app_client, model="random", text="a b c d e", include=["weights", "value_norms"], options=options)
    run = RandomModel().run(RunInput(text="a b c d e", options=options), torch.device("cpu"), torch.float64)
    a, w = run.layers[0].attn, run.layers[0].weights
    assert a.v.shape[1] == 2 and w.W_O is not None
    heads = body["layers"][0]["heads"]
    for h, head in enumerate(heads):
        moved = np.linalg.norm(a.v[0, h // 2].numpy() @ w.W_O[h].numpy(), axis=-1)
        want = a.weights[0, h].numpy() * moved[None, :]
        assert np.abs(np.asarray(head["value_norms"]) - want).max() < 1e-5
    assert np.abs(np.asarray(heads[0]["value_norms"]) - np.asarray(heads[1]["value_norms"])).max() > 1e-3


def test_rollout_options_and_sources_are_refused_by_name(app_client: TestClient) -> None:
    err = refused(app_client, model="induction", text=REPEAT, rollout={"heads": "max"})
    assert err["field"] == "rollout" and "include rollout" in err["message"]
    err = refused(app_client, model="induction", text=REPEAT, include=["rollout"], rollout={"heads": "median"})
    assert err["field"].startswith("rollout")
    err = refused(app_client, model="induction", text=REPEAT, include=["rollout"], rollout={"residual": "yes"})
    assert err["field"].startswith("rollout")
    err = refused(
        app_client,
        model="random",
        text="a b c",
        include=["rollout"],
        source={"text": "x y z w"},
        options={"d_model": 8},
    )
    assert err["field"] == "include" and "source" in err["message"]


def test_value_norms_and_rollout_count_towards_the_answer_limit(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """induction: 2 layers x 4 heads x 8 x 8 weights = 512 values (+ 64 eligible); value norms double them, and
    rollout adds 2 x 64: past a limit of 600 values, refused before the run."""
    with make_client(models="induction", max_result_values=600) as c:
        ok = c.post("/api/attention", json={"model": "induction", "text": REPEAT, "include": ["weights"]})
        assert ok.status_code == 200, ok.text
        for extra in ("value_norms", "rollout"):
            r = c.post("/api/attention", json={"model": "induction", "text": REPEAT, "include": ["weights", extra]})
            assert r.status_code == 422, (extra, r.text)
            assert r.json()["error"]["code"] == "too_large"
