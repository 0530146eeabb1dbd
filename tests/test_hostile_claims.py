"""Hostile inputs against the claim tests and their neighbours: every one a named 422 or a true answer, never a 500,
and every claim test able to fail on the model it runs on (demo_bug is the negative control)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from tests.helpers import assert_error

IND = {"model": "induction", "text": "red ball king river frog clock"}
MINI = {"model": "minilm", "text": "the cat sat on the mat", "masks": {"causal": True}}
HUGE = 2**64  # outside 64 bits: orjson, torch and numpy cannot hold it


@pytest.fixture(scope="module")
def trained() -> Iterator[TestClient]:
    settings = Settings(device="cpu", models="minilm,induction,random,textbook", allowed_hosts="testserver")
    with TestClient(create_app(settings)) as c:
        yield c


def _endpoints(masks: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    body = {**IND, "masks": masks}
    return [
        ("/api/attention", body),
        ("/api/heads", body),
        ("/api/heads/top", {**body, "query": 1, "key": 0}),
        ("/api/perturb", {**body, "position": 1}),
        ("/api/intervene", body),
        ("/api/decode", body),
        ("/api/export", body),
        ("/api/compare", {"a": body, "b": IND}),
    ]


# (endpoint, body, field, words): each a 422 naming the field
ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    *((ep, b, "masks.blocked[0][1]", "9223372036854775807") for ep, b in _endpoints({"blocked": [[0, HUGE]]})),
    *((ep, b, "masks.padded[0]", "9223372036854775807") for ep, b in _endpoints({"padded": [HUGE]})),
    *((ep, b, "masks.blocked[0][0]", "-9223372036854775808") for ep, b in _endpoints({"blocked": [[-HUGE, 0]]})),
]


def _field(endpoint: str, field: str) -> str:
    return f"a.{field}" if endpoint == "/api/compare" else field


@pytest.mark.parametrize(("endpoint", "body", "field", "words"), ERRORS, ids=[f"{e[0]} {e[2]}" for e in ERRORS])
def test_hostile_input_is_a_named_422(
    trained: TestClient, endpoint: str, body: dict[str, Any], field: str, words: str
) -> None:
    assert_error(trained.post(endpoint, json=body), 422, _field(endpoint, field), words)


def _one_token_loss(r: dict[str, Any]) -> None:
    assert r["tokens"] == ["red"]
    assert r["loss_before"] is None and r["loss_after"] is None
    assert r["losses_before"] == [] and r["losses_after"] == []


def _audit_of_nothing(r: dict[str, Any]) -> None:
    a = r["audit"]
    assert a["score_range"] is None and a["max_masked_weight"] == 0.0


def _masked_pair(r: dict[str, Any]) -> None:
    assert r["masked"] is True and r["reasons"] == ["causal"], r
    assert r["heads"] == []


def _blocked_sentence(r: dict[str, Any]) -> None:
    check = next(c for c in r["checks"] if c["name"] == "blocked")
    assert check["holds"] is True
    assert "none" not in r["verdict"] and "all 6 layers" not in r["verdict"], r["verdict"]
    assert "query 3" in r["verdict"] and "layer 0" in r["verdict"], r["verdict"]


def _real_tokens_per_s(r: dict[str, Any]) -> None:
    a = r["audit"]
    assert a["batch"] == 2 and a["seq_len"] == 10 and a["valid_tokens"] == 14  # [CLS] 8 [SEP] and [CLS] 2 [SEP]
    assert a["tokens_per_s"] == pytest.approx(a["valid_tokens"] / (a["ms"] / 1000.0))
    assert "real tokens" in a["throughput"]


def _perturb_runs_the_bug(r: dict[str, Any]) -> None:
    assert r["demo_bug"]["name"] == "softmax_over_queries"
    assert r["checks"][0]["holds"] is False and r["verdict"].startswith("Leak"), r["verdict"]


def _audit_runs_the_bug(r: dict[str, Any]) -> None:
    p = r["audit"]["perturbation"]
    assert p[0]["mask"] == "causal" and p[0]["holds"] is False and p[0]["verdict"].startswith("Leak"), p


def _batch_audit_per_text(r: dict[str, Any]) -> None:
    a = r["audit"]
    assert a["masks"]["padding"] == [[True] * 10, [True] * 4 + [False] * 6]  # [CLS] 8 [SEP] and [CLS] 2 [SEP]
    assert [(p["item"], p["mask"], p["holds"]) for p in a["perturbation"]] == [(1, "padding", True)], a["perturbation"]


def _shift_is_inconclusive_on_pre_ln(r: dict[str, Any]) -> None:
    assert r["reach"] < r["reach_threshold"], r
    assert r["checks"][0]["holds"] is None and r["verdict"].startswith("Inconclusive"), r["verdict"]
    assert "holds" not in r["verdict"].split(":")[0]


# (endpoint, body, check): each a 200 whose answer is true about what it did
ANSWERS: list[tuple[str, str, dict[str, Any], Callable[[dict[str, Any]], None]]] = [
    ("one token: no next-token pair", "/api/intervene", {"model": "induction", "text": "red"}, _one_token_loss),
    (
        "audit with no eligible cell",
        "/api/attention",
        {"model": "random", "text": "a b", "masks": {"blocked": [[0, 0], [0, 1], [1, 0], [1, 1]]}},
        _audit_of_nothing,
    ),
    ("top heads of a masked pair", "/api/heads/top", {**IND, "query": 0, "key": 2}, _masked_pair),
    (
        "blocked verdict says layer 0",
        "/api/perturb",
        {"model": "minilm", "text": "the cat sat", "masks": {"blocked": [[3, 1]]}, "position": 1},
        _blocked_sentence,
    ),
    (
        "audit throughput of a padded batch",
        "/api/attention",
        {"model": "minilm", "texts": ["a b c d e f g h", "x y"], "include": ["audit"]},
        _real_tokens_per_s,
    ),
    (
        "perturb runs demo_bug",
        "/api/perturb",
        {**IND, "position": 4, "demo_bug": "softmax_over_queries"},
        _perturb_runs_the_bug,
    ),
    ("audit runs demo_bug", "/api/attention", {**IND, "demo_bug": "softmax_over_queries"}, _audit_runs_the_bug),
    (
        "a uniform shift under a pre-LN model",
        "/api/perturb",
        {**IND, "position": 3, "change": {"kind": "shift", "amount": 1.0}},
        _shift_is_inconclusive_on_pre_ln,
    ),
    (
        "audit of a padded batch: each text's padding and verdicts",
        "/api/attention",
        {"model": "minilm", "texts": ["a b c d e f g h", "x y"]},
        _batch_audit_per_text,
    ),
]


@pytest.mark.parametrize(("endpoint", "body", "check"), [a[1:] for a in ANSWERS], ids=[a[0] for a in ANSWERS])
def test_hostile_input_answers_truly(
    trained: TestClient, endpoint: str, body: dict[str, Any], check: Callable[[dict[str, Any]], None]
) -> None:
    if endpoint == "/api/attention":
        body = {**body, "all_masked": "zero", "include": ["audit"]}
    resp = trained.post(endpoint, json=body)
    assert resp.status_code == 200, resp.text[:500]
    check(resp.json())


# ---- the default change reaches the model, and the claim can fail ------------------------------------------------


@pytest.mark.parametrize("base", [IND, MINI], ids=["induction", "minilm"])
def test_default_change_reaches_the_model_and_causal_masking_holds(trained: TestClient, base: dict[str, Any]) -> None:
    r = trained.post("/api/perturb", json={**base, "position": 3}).json()
    assert r["change"]["kind"] == "direction"
    assert r["reach"] >= r["reach_threshold"], r
    causal = next(c for c in r["checks"] if c["name"] == "causal")
    assert causal["holds"] is True and r["verdict"].startswith("Causal masking holds"), r["verdict"]


@pytest.mark.parametrize("bug", ["softmax_over_queries", "flipped_mask", "norm_over_sequence"])
@pytest.mark.parametrize("base", [IND, MINI], ids=["induction", "minilm"])
def test_default_change_catches_a_leaking_bug(trained: TestClient, base: dict[str, Any], bug: str) -> None:
    """The negative control: a bug that lets a later token reach an earlier row must fail the causal check."""
    # a flipped causal mask leaves the last query no key: zero weights there, as the view does when asked
    r = trained.post("/api/perturb", json={**base, "position": 3, "demo_bug": bug, "all_masked": "zero"}).json()
    causal = next(c for c in r["checks"] if c["name"] == "causal")
    assert causal["holds"] is False and causal["max_delta"] > 0, r
    assert r["verdict"].startswith("Leak: causal"), r["verdict"]


@pytest.mark.parametrize("bug", [None, "softmax_over_queries", "flipped_mask", "norm_over_sequence"])
@pytest.mark.parametrize("base", [IND, MINI], ids=["induction", "minilm"])
def test_audit_verdict_agrees_with_the_perturb_view(trained: TestClient, base: dict[str, Any], bug: str | None) -> None:
    """The audit beside a view runs the view's code: its causal verdict is the one /api/perturb gives."""
    extra = {"demo_bug": bug, "all_masked": "zero"} if bug else {}
    a = trained.post("/api/attention", json={**base, **extra, "include": ["audit"]}).json()["audit"]
    (p,) = a["perturbation"]
    r = trained.post("/api/perturb", json={**base, **extra, "position": p["position"]}).json()
    assert p["holds"] is r["checks"][0]["holds"] is (bug is None), (p, r["verdict"])
    assert p["verdict"] == r["verdict"]


@pytest.mark.parametrize("base", [IND, MINI], ids=["induction", "minilm"])
def test_norm_over_sequence_leaks_behind_a_perfectly_triangular_map(trained: TestClient, base: dict[str, Any]) -> None:
    """The chapter's misconception "a triangular heatmap proves causal implementation", shown live: under the
    bug every layer's every head puts exactly 0 above the diagonal, yet the perturbation at the last position moves
    every position before it in layer 0 already, and a change at position 3 moves positions 0-2."""
    bugged = {**base, "demo_bug": "norm_over_sequence"}
    view = trained.post("/api/attention", json={**bugged, "include": ["weights"]}).json()
    assert view["demo_bug"]["name"] == "norm_over_sequence" and "triangular" in view["demo_bug"]["note"]
    clean = trained.post("/api/attention", json={**base, "include": ["weights"]}).json()
    differs = 0.0
    for layer, plain in zip(view["layers"], clean["layers"], strict=True):
        for head, ok in zip(layer["heads"], plain["heads"], strict=True):
            w = np.asarray(head["weights"])
            assert np.triu(w, 1).max() == 0.0
            assert np.abs(w.sum(-1) - 1).max() < 1e-5
            differs = max(differs, float(np.abs(w - np.asarray(ok["weights"])).max()))
    assert differs > 1e-3  # the bug is computed: the maps are not the correct ones
    last = len(view["tokens"]) - 1
    r = trained.post("/api/perturb", json={**bugged, "position": last}).json()
    causal = next(c for c in r["checks"] if c["name"] == "causal")
    assert causal["holds"] is False
    first = r["layers"][0]["delta"]
    assert min(first[:last]) > 0.0, first  # every earlier position moved, in the first layer
    fixed = trained.post("/api/perturb", json={**base, "position": last}).json()
    assert max(fixed["layers"][0]["delta"][:last]) == 0.0


# ---- intervene and compare run the code the view shows, demo_bug included ----------------------------------------


def _flat(m: list[list[float]]) -> list[float]:
    return [v for row in m for v in row]


def test_intervene_runs_the_views_bug(trained: TestClient) -> None:
    body = {**IND, "demo_bug": "softmax_over_queries", "include": ["weights"], "layer": 0}
    view = trained.post("/api/attention", json=body).json()["layers"][0]["heads"]
    r = trained.post("/api/intervene", json={**body, "ablate": [{"layer": 1, "head": 0, "mode": "zero"}]})
    assert r.status_code == 200, r.text[:300]
    out = r.json()
    assert out["before"]["demo_bug"]["name"] == out["after"]["demo_bug"]["name"] == "softmax_over_queries"
    for h, head in enumerate(out["before"]["layers"][0]["heads"]):
        # before is the view's run, the bug's column sums of 1 and all; layer 0 is upstream of the ablation
        assert _flat(head["weights"]) == pytest.approx(_flat(view[h]["weights"]), abs=1e-6)
        assert _flat(head["weights"]) == pytest.approx(
            _flat(out["after"]["layers"][0]["heads"][h]["weights"]), abs=1e-6
        )
        columns = [sum(row[k] for row in head["weights"]) for k in range(len(head["weights"]))]
        assert columns == pytest.approx([1.0] * len(columns), abs=1e-5)


def test_compare_runs_each_sides_bug(trained: TestClient) -> None:
    right = {**IND, "include": ["weights"], "layer": 0}
    wrong = {**right, "demo_bug": "softmax_over_queries"}
    r = trained.post("/api/compare", json={"a": right, "b": wrong})
    assert r.status_code == 200, r.text[:300]
    out = r.json()
    assert out["a"]["demo_bug"] is None and out["b"]["demo_bug"]["name"] == "softmax_over_queries"
    bug = trained.post("/api/attention", json=wrong).json()["layers"][0]["heads"]
    assert _flat(out["b"]["layers"][0]["heads"][0]["weights"]) == pytest.approx(_flat(bug[0]["weights"]), abs=1e-6)
    assert out["max_abs"] > 0.05  # the bug moves weight onto other cells: the comparison shows where


@pytest.mark.parametrize("base", [IND, MINI], ids=["induction", "minilm"])
def test_a_value_change_moves_only_the_queries_that_read_that_key(trained: TestClient, base: dict[str, Any]) -> None:
    """change kind value: the position's value vector moves in every layer, its input does not. Causal masking holds
    (no earlier position reads it), the position itself moves through its own key; with every query able to read
    every key (minilm without causal) the earlier positions move in layer 0 already."""
    body = {**base, "position": 3, "change": {"kind": "value", "norm": 2.0, "seed": 1}}
    r = trained.post("/api/perturb", json=body).json()
    causal = next(c for c in r["checks"] if c["name"] == "causal")
    assert causal["holds"] is True, r["verdict"]
    first = r["layers"][0]["delta"]
    assert max(first[:3]) == 0.0 and first[3] > 0.0
    assert r["reach"] >= r["reach_threshold"]
    leaky = trained.post("/api/perturb", json={**body, "demo_bug": "softmax_over_queries", "all_masked": "zero"}).json()
    assert next(c for c in leaky["checks"] if c["name"] == "causal")["holds"] is False
    if base is MINI:
        open_ = trained.post("/api/perturb", json={**body, "masks": {}}).json()
        assert min(open_["layers"][0]["delta"][:3]) > 0.0
