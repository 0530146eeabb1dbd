"""POST /api/perturb, /api/intervene and /api/compare through a real app: contracts, numbers, named 422s."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures import make_app_client
from tests.helpers import assert_error

SENTENCE = "The animal didn't cross the street because it was too tired"
R = {"model": "random", "text": "the cat sat on the mat"}


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


@pytest.fixture(scope="module")
def trained() -> Iterator[TestClient]:
    with make_app_client(models="minilm,induction") as c:
        yield c


# ---- perturb -------------------------------------------------------------------------------------------------------


def test_perturb_proves_causal_masking_on_minilm(trained: TestClient) -> None:
    body = {"model": "minilm", "text": SENTENCE, "masks": {"causal": True}, "position": 10}
    resp = trained.post("/api/perturb", json=body)
    assert resp.status_code == 200, resp.text
    r = resp.json()
    assert r["tokens"][10] == "it" and r["tokens_after"] == r["tokens"]
    assert [layer["index"] for layer in r["layers"]] == list(range(6))
    for row in [*(layer["delta"] for layer in r["layers"]), r["final_delta"]]:
        assert row[:10] == [0.0] * 10 and row[10] > 0
    assert r["checks"] == [
        {
            "name": "causal",
            "claim": r["checks"][0]["claim"],
            "holds": True,
            "max_delta": 0.0,
            "protected": list(range(10)),
            "tested": True,
            "first_leak": None,
            "protected_by_layer": [list(range(10))] * 6,
        }
    ]
    assert r["verdict"].startswith("Causal masking holds") and "0–9" in r["verdict"]
    # the same request without the mask: no claim, and earlier positions move
    free = trained.post("/api/perturb", json={**body, "masks": {}}).json()
    assert free["checks"] == [] and max(free["layers"][0]["delta"][:10]) > 0


def test_perturb_window_protects_each_layer_its_own_positions(trained: TestClient) -> None:
    body = {"model": "minilm", "text": SENTENCE, "masks": {"window": 2}, "position": 6}
    r = trained.post("/api/perturb", json=body).json()
    (check,) = r["checks"]
    S = len(r["tokens"])
    # a window of 2 lets a change travel one position a layer: after layer l, |q - 6| > l + 1 cannot move
    assert check["protected_by_layer"] == [[q for q in range(S) if abs(q - 6) > layer + 1] for layer in range(6)]
    assert check["protected"] == check["protected_by_layer"][-1]
    for layer, protected in zip(r["layers"], check["protected_by_layer"], strict=True):
        assert all(layer["delta"][q] == 0.0 for q in protected)


def test_perturb_swaps_a_token(trained: TestClient) -> None:
    body = {"model": "induction", "text": "red ball king red ball king", "position": 4}
    r = trained.post("/api/perturb", json={**body, "change": {"kind": "token", "token": "moon"}}).json()
    assert r["tokens_after"][4] == "moon" and r["change"] == {"kind": "token", "token": "moon"}
    assert r["final"].startswith("the logits") and r["final_delta"][:4] == [0.0] * 4 and r["final_delta"][4] > 0


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({**R, "position": 6}, "position", "0..5"),
        ({**R, "position": 1, "layer": 0}, "layer", "leave layer out"),
        ({**R, "position": 1, "include": ["weights"]}, "include", "leave include out"),
        ({"model": "textbook", "position": 1, "change": {"kind": "token", "token": "x"}}, "change.kind", "shift"),
        ({**R, "position": 1, "change": {"kind": "shift", "amount": 1e9}}, "change.amount", "1000"),
        ({**R, "position": 1, "change": {"kind": "melt"}}, "change", "shift"),
        ({**R, "change": {"kind": "shift"}}, "position", "Field required"),
    ],
)
def test_perturb_bad_input_names_the_field(client: TestClient, body: dict[str, Any], field: str, words: str) -> None:
    assert_error(client.post("/api/perturb", json=body), 422, field, words)


# ---- intervene -----------------------------------------------------------------------------------------------------


def test_intervene_edit_on_the_textbook_example_is_exact(client: TestClient) -> None:
    edit = {"layer": 0, "head": 0, "query": 2, "key": 0, "weight": 0.9}
    r = client.post("/api/intervene", json={"model": "textbook", "edit": [edit], "include": ["weights", "contexts"]})
    assert r.status_code == 200, r.text
    b = r.json()
    before = np.array(b["before"]["layers"][0]["heads"][0]["weights"])
    after = np.array(b["after"]["layers"][0]["heads"][0]["weights"])
    assert after[2, 0] == pytest.approx(0.9, abs=1e-7)
    np.testing.assert_allclose(after[2, 1:3], before[2, 1:3] * 0.1 / (1 - before[2, 0]), atol=1e-7)
    assert after[2, 3:].tolist() == [0.0, 0.0]  # causal and padding: still exactly 0
    np.testing.assert_array_equal(np.delete(after, 2, axis=0), np.delete(before, 2, axis=0))
    assert b["edit"] == [edit] and b["ablate"] == [] and b["predictions"] is None and b["loss_before"] is None
    assert b["final_delta"][2] > 0 and b["final_delta"][:2] == [0.0, 0.0] and b["final_delta"][3:] == [0.0, 0.0]


def test_intervene_zero_ablation_matches_the_attention_endpoint(client: TestClient) -> None:
    body = {**R, "options": {"heads": 4}, "include": ["contexts", "output"]}
    r = client.post("/api/intervene", json={**body, "ablate": [{"layer": 0, "head": 2}]}).json()
    plain = client.post("/api/attention", json=body).json()
    assert r["before"]["layers"][0]["output"] == plain["layers"][0]["output"]
    assert np.abs(np.array(r["after"]["layers"][0]["heads"][2]["contexts"])).max() == 0.0
    assert r["ablate"] == [{"layer": 0, "head": 2, "mode": "zero"}]
    out_change = np.abs(np.array(r["after"]["layers"][0]["output"]) - np.array(plain["layers"][0]["output"]))
    np.testing.assert_allclose(out_change.max(axis=1), r["layers"][0]["delta"], atol=1e-6)


def test_intervene_on_induction_breaks_the_predictions(trained: TestClient) -> None:
    words = random.Random(0).sample(trained.get("/api/models").json()["models"][1]["vocab"], 24)
    body = {"model": "induction", "tokens": words + words, "include": ["weights"], "layer": 1, "top_k": 3}
    ablate = [{"layer": 1, "head": h, "mode": "zero"} for h in range(4)]
    r = trained.post("/api/intervene", json={**body, "ablate": ablate}).json()
    assert [layer["index"] for layer in r["before"]["layers"]] == [1]  # `layer` shapes the result
    assert len(r["layers"]) == 2 and r["layers"][0]["delta"] == [0.0] * 48  # every layer ran; layer 0 untouched
    before = [p[0]["token"] for p in r["predictions"]["before"]]
    after = [p[0]["token"] for p in r["predictions"]["after"]]
    assert all(len(p) == 3 for p in r["predictions"]["before"])
    right_before = sum(before[t] == words[t - 23] for t in range(24, 47))
    right_after = sum(after[t] == words[t - 23] for t in range(24, 47))
    assert right_before >= 20 and right_after <= 3
    assert r["loss_after"] > r["loss_before"] + 1.0
    assert len(r["losses_before"]) == 47


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"ablate": [{"layer": 1, "head": 0}]}, "ablate[0].layer", "layers 0..0"),
        ({"ablate": [{"layer": 0, "head": 0}, {"layer": 0, "head": 0}]}, "ablate[1]", "twice"),
        ({"ablate": [{"layer": 0, "head": 0, "mode": "half"}]}, "ablate[0].mode", "zero"),
        ({"edit": [{"layer": 0, "head": 0, "query": 0, "key": 0, "weight": 1.5}]}, "edit[0].weight", "1"),
        ({"edit": [{"layer": 0, "head": 0, "query": 9, "key": 0, "weight": 0.5}]}, "edit[0].query", "0..5"),
        (
            {"edit": [{"layer": 0, "head": 0, "query": 0, "key": 3, "weight": 0.5}], "masks": {"causal": True}},
            "edit[0].key",
            "masked",
        ),
        ({"top_k": 0}, "top_k", "greater than or equal to 1"),
    ],
)
def test_intervene_bad_input_names_the_field(client: TestClient, extra: dict[str, Any], field: str, words: str) -> None:
    assert_error(client.post("/api/intervene", json={**R, **extra}), 422, field, words)


# ---- compare -------------------------------------------------------------------------------------------------------


def test_compare_is_b_minus_a_of_the_attention_results(trained: TestClient) -> None:
    a = {"model": "minilm", "text": SENTENCE, "layer": 2}
    b = {**a, "masks": {"causal": True}}
    r = trained.post("/api/compare", json={"a": a, "b": b})
    assert r.status_code == 200, r.text
    c = r.json()
    wa = [np.array(h["weights"]) for h in trained.post("/api/attention", json=a).json()["layers"][0]["heads"]]
    wb = [np.array(h["weights"]) for h in trained.post("/api/attention", json=b).json()["layers"][0]["heads"]]
    (layer,) = c["layers"]
    assert layer["index"] == 2 and len(layer["heads"]) == 12
    for h, head in enumerate(layer["heads"]):
        diff = np.array(head["diff"])
        np.testing.assert_allclose(diff, wb[h] - wa[h], atol=1e-6)
        assert head["max_abs"] == pytest.approx(np.abs(diff).max(), abs=1e-6)
        q, k = head["where"]
        assert abs(diff[q, k]) == pytest.approx(head["max_abs"], abs=1e-6)
    assert c["max_abs"] == max(h["max_abs"] for h in layer["heads"])
    top = c["largest"]
    assert len(top) == 10 and [abs(t["diff"]) for t in top] == sorted((abs(t["diff"]) for t in top), reverse=True)
    assert abs(top[0]["diff"]) == pytest.approx(c["max_abs"]) and top[0]["b"] - top[0]["a"] == pytest.approx(
        top[0]["diff"]
    )


def test_compare_of_identical_runs_is_zero(client: TestClient) -> None:
    c = client.post("/api/compare", json={"a": R, "b": R}).json()
    assert c["max_abs"] == 0.0 and c["largest"] == []


@pytest.mark.parametrize(
    ("b", "field", "words"),
    [
        ({"model": "random", "text": "a b"}, "b", "has 2 tokens but a has 6"),
        ({**R, "layer": 0}, "b.layer", "a.layer is None"),
        ({**R, "options": {"heads": 8}}, "b", "has 8 heads in layer 0 but a has 4"),
        ({**R, "masks": {"window": 0}}, "b.masks.window", "greater than or equal to 1"),
        ({**R, "masks": {"padding": [True]}}, "b.masks.padding", "1 padding flags for 6 positions"),
        ({"model": "gpt9", "text": "a"}, "b.model", "unknown model"),
    ],
)
def test_compare_bad_input_names_the_side(client: TestClient, b: dict[str, Any], field: str, words: str) -> None:
    assert_error(client.post("/api/compare", json={"a": R, "b": b}), 422, field, words)


# ---- invariants over every mask combination --------------------------------------------------------------------


@st.composite
def perturbations(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 7))
    masks: dict[str, Any] = {"causal": draw(st.booleans())}
    if draw(st.booleans()):
        masks["padding"] = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if draw(st.booleans()):
        masks["window"] = draw(st.integers(1, n + 1))
    masks["blocked"] = draw(st.lists(st.lists(st.integers(0, n - 1), min_size=2, max_size=2), max_size=n))
    return {
        "model": "random",
        "tokens": [f"w{i}" for i in draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))],
        "options": {"d_model": 8, "heads": 2, "seed": draw(st.integers(0, 3)), "positions": True},
        "masks": masks,
        "all_masked": "zero",
        "position": draw(st.integers(0, n - 1)),
        "change": {"kind": "shift", "amount": draw(st.sampled_from([-3.0, 0.5, 2.0]))},
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(perturbations())
def test_every_mask_claim_holds_on_the_engine(client: TestClient, body: dict[str, Any]) -> None:
    resp = client.post("/api/perturb", json=body)
    assert resp.status_code == 200, resp.text[:300]
    r = resp.json()
    expected = {"causal"} if body["masks"]["causal"] else set()
    expected |= {"window"} if "window" in body["masks"] else set()
    expected |= {"padding"} if "padding" in body["masks"] else set()
    if any(k == body["position"] != q for q, k in body["masks"]["blocked"]):
        expected.add("blocked")
    assert {c["name"] for c in r["checks"]} == expected
    assert all(c["holds"] is not False for c in r["checks"]), r["checks"]
    assert "Leak" not in r["verdict"]
    # inconclusive only where the change did not reach the output (every row masked, all_masked zero: all zeros)
    if r["reach"] < r["reach_threshold"]:
        assert r["verdict"].startswith(("Inconclusive", "No mask")), r["verdict"]
    else:
        assert all(c["holds"] is True for c in r["checks"]), r["checks"]


def test_a_lone_surrogate_as_the_replacement_token_is_named(client: TestClient) -> None:
    body = {**R, "position": 1, "change": {"kind": "token", "token": "\ud800"}}
    resp = client.post("/api/perturb", content=json.dumps(body), headers={"content-type": "application/json"})
    assert_error(resp, 422, "change.token", "string")
