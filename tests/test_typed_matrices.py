"""Matrices typed in (model `given`): a score matrix used as given with the masks applied and the engine's softmax,
a weight matrix used exactly, values for the contexts, and every refusal a 422 naming its field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.models import RunInput, build
from tests.fixtures import make_app_client
from tests.helpers import assert_error

# a supplied 4 x 4 score tensor, as the chapter's exercise gives one (not symmetric, negative and large entries)
SCORES = [[2.0, -1.0, 0.5, 3.0], [0.0, 1.5, -2.0, 4.0], [1.0, 1.0, 1.0, -30.0], [-0.5, 2.5, 0.25, 0.75]]
VALUES = [[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [3.0, 1.0, 0.0], [0.5, -2.0, 1.0]]
# two heads' weights as a figure prints them: A looks at the previous position, B spreads over what it may see
HEAD_A = [[1.0, 0.0, 0.0, 0.0], [0.9, 0.1, 0.0, 0.0], [0.05, 0.9, 0.05, 0.0], [0.0, 0.05, 0.9, 0.05]]
HEAD_B = [[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.333, 0.333, 0.334, 0.0], [0.25, 0.25, 0.25, 0.25]]


def reference_softmax(scores: list[list[float]], eligible: np.ndarray) -> np.ndarray:
    """float64 softmax over each row's eligible keys, 0 elsewhere, a row with none all 0."""
    s = np.asarray(scores, dtype=np.float64)
    out = np.zeros_like(s)
    for i in range(len(s)):
        keys = eligible[i]
        if keys.any():
            e = np.exp(s[i, keys] - s[i, keys].max())
            out[i, keys] = e / e.sum()
    return out


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app for the module: each test checks only the answers to its own bodies, which read no state of the app
    (no metric, cache or slot count), so a fresh app for each test would check nothing more."""
    with make_app_client(models="textbook,given", max_tokens=6) as c:
        yield c


def head(body: dict[str, Any]) -> dict[str, Any]:
    (layer,) = body["layers"]
    (only,) = layer["heads"]
    return only


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    resp = client.post("/api/attention", json=body)
    assert resp.status_code == 200, resp.text[:500]
    return resp.json()


@pytest.mark.parametrize(
    ("masks", "eligible"),
    [
        (None, np.ones((4, 4), dtype=bool)),
        ({"causal": True}, np.tril(np.ones((4, 4), dtype=bool))),
        ({"window": 2}, np.abs(np.subtract.outer(range(4), range(4))) < 2),
        ({"padding": [True, False, True, True]}, np.array([[True, False, True, True]] * 4)),
        ({"blocked": [[3, 1], [0, 3]]}, np.ones((4, 4), dtype=bool) & ~np.isin(np.arange(16).reshape(4, 4), [13, 3])),
    ],
)
def test_scores_are_used_as_given_with_the_masks_and_numpy_softmax(
    client: TestClient, masks: dict[str, Any] | None, eligible: np.ndarray
) -> None:
    body = post(client, scores=SCORES, masks=masks, include=["scores", "weights", "stats"], dtype="float64")
    h = head(body)
    assert body["model"] == "given" and body["tokens"] == ["x1", "x2", "x3", "x4"]
    np.testing.assert_array_equal(np.asarray(h["scores"]), np.asarray(SCORES))  # used as given
    np.testing.assert_array_equal(np.asarray(body["eligible"]), eligible)
    w = np.asarray(h["weights"])
    np.testing.assert_allclose(w, reference_softmax(SCORES, eligible), atol=1e-12)
    assert (w[~eligible] == 0).all()  # exactly 0, not small
    assert body["config"]["scale_factor"] == 1.0 and "scale` does not apply" in body["config"]["architecture"]
    assert h["stats"]["max_masked_weight"] == 0.0


def test_scale_does_not_apply_to_given_scores(client: TestClient) -> None:
    on = head(post(client, scores=SCORES, scale=True))["weights"]
    off = head(post(client, scores=SCORES, scale=False))["weights"]
    assert on == off
    # a negative control: dividing by sqrt(4) would have changed them
    halved = reference_softmax([[v / 2 for v in row] for row in SCORES], np.ones((4, 4), dtype=bool))
    assert not np.allclose(np.asarray(on), halved, atol=1e-3)


def test_the_chapter_case_a_supplied_score_tensor_under_the_causal_mask(client: TestClient) -> None:
    scores = [[(i * 7 + j * 3) % 5 - 2.0 for j in range(6)] for i in range(6)]
    body = post(client, scores=scores, masks={"causal": True}, tokens=list("abcdef"))
    w = np.asarray(head(body)["weights"])
    assert body["tokens"] == list("abcdef")
    assert (w[np.triu_indices(6, 1)] == 0).all()
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=1e-6)
    assert body["reasons"]["causal"][0][1] is True and body["reasons"]["causal"][1][0] is False
    np.testing.assert_allclose(w, reference_softmax(scores, np.tril(np.ones((6, 6), dtype=bool))), atol=1e-6)


@pytest.mark.parametrize("pattern", [HEAD_A, HEAD_B])
def test_a_pattern_is_used_exactly_and_values_give_the_contexts(client: TestClient, pattern: list[list[float]]) -> None:
    body = post(
        client,
        pattern=pattern,
        values=VALUES,
        masks={"causal": True},
        include=["weights", "contexts", "output", "stats"],
        dtype="float64",
    )
    h = head(body)
    assert h["weights"] == pattern  # every number as typed
    np.testing.assert_allclose(np.asarray(h["contexts"]), np.asarray(pattern) @ np.asarray(VALUES), atol=1e-12)
    np.testing.assert_allclose(np.asarray(body["layers"][0]["output"]), np.asarray(h["contexts"]), atol=1e-12)
    assert "used as given" in body["config"]["architecture"]


def test_values_give_contexts_for_scores_too(client: TestClient) -> None:
    h = head(post(client, scores=SCORES, values=VALUES, include=["weights", "contexts"], dtype="float64"))
    w = reference_softmax(SCORES, np.ones((4, 4), dtype=bool))
    np.testing.assert_allclose(np.asarray(h["contexts"]), w @ np.asarray(VALUES), atol=1e-12)


def test_the_two_heads_differ_as_typed(client: TestClient) -> None:
    a = head(post(client, pattern=HEAD_A))["weights"]
    b = head(post(client, pattern=HEAD_B))["weights"]
    assert a != b and a[3][2] == 0.9 and b[3][2] == 0.25


def test_a_row_with_no_key_is_refused_or_zeroed_as_asked(client: TestClient) -> None:
    blocked = {"blocked": [[0, k] for k in range(4)]}
    assert_error(client.post("/api/attention", json={"scores": SCORES, "masks": blocked}), 422, "masks", "rows 0")
    w = head(post(client, scores=SCORES, masks=blocked, all_masked="zero"))["weights"]
    assert w[0] == [0.0, 0.0, 0.0, 0.0] and abs(sum(w[1]) - 1) < 1e-6
    zero_row = [[0.0] * 4, *HEAD_B[1:]]
    assert head(post(client, pattern=zero_row, masks=blocked, all_masked="zero"))["weights"] == zero_row


def test_with_nothing_typed_in_it_runs_its_example_scores(client: TestClient) -> None:
    (entry,) = [m for m in client.get("/api/models").json()["models"] if m["name"] == "given"]
    body = post(client, model="given")
    assert head(body)["scores"] == entry["defaults"]["scores"] and body["tokens"] == entry["default_text"].split()
    assert post(client, model="given", scores=entry["defaults"]["scores"])["layers"] == body["layers"]


def test_a_one_by_one_matrix_is_one_weight_of_1(client: TestClient) -> None:
    assert head(post(client, scores=[[-5.0]]))["weights"] == [[1.0]]
    assert head(post(client, pattern=[[1.0]]))["weights"] == [[1.0]]


def test_given_answers_without_a_model_name_and_lists_itself(client: TestClient) -> None:
    named = post(client, model="given", scores=SCORES)
    assert named == {**post(client, scores=SCORES), "timings_ms": named["timings_ms"]}
    (entry,) = [m for m in client.get("/api/models").json()["models"] if m["name"] == "given"]
    assert entry["reads"] == ["text", "tokens", "scores", "pattern", "values"]
    assert entry["capabilities"]["batches"] is False


BAD: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = [
    ("empty", {"scores": []}, "scores", ("at least one row",)),
    ("no columns", {"scores": [[]]}, "scores", ("at least one column",)),
    ("ragged", {"scores": [[1.0, 2.0], [3.0]]}, "scores", ("every row needs the same length",)),
    ("non-square", {"scores": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]}, "scores", ("2 x 3", "S x S")),
    ("non-square pattern", {"pattern": [[1.0], [1.0]]}, "pattern", ("2 x 1",)),
    ("both", {"scores": SCORES, "pattern": HEAD_B}, "pattern", ("not both",)),
    ("values rows", {"scores": SCORES, "values": VALUES[:3]}, "values", ("3 rows for 4 positions",)),
    ("ragged values", {"scores": SCORES, "values": [[1.0], [1.0, 2.0]]}, "values", ("same length",)),
    ("negative", {"pattern": [[1.5, -0.5], [0.5, 0.5]]}, "pattern[0][1]", ("-0.5", "at least 0")),
    ("row sum", {"pattern": [[0.5, 0.4], [0.5, 0.5]]}, "pattern[0]", ("sums to 0.9", "within 0.001")),
    ("zero row unmasked", {"pattern": [[0.0, 0.0], [0.5, 0.5]]}, "pattern[0]", ("sums to 0",)),
    (
        "weight on a masked cell",
        {"pattern": [*HEAD_B[:1], [0.2, 0.3, 0.5, 0.0], *HEAD_B[2:]], "masks": {"causal": True}},
        "pattern[1][2]",
        ("causal mask excludes query 1 -> key 2", "set it to 0"),
    ),
    (
        "weight on a blocked cell",
        {"pattern": HEAD_B, "masks": {"blocked": [[3, 0]]}},
        "pattern[3][0]",
        ("blocked mask",),
    ),
    ("nan", {"scores": [[float("nan")]]}, "scores[0][0]", ("finite",)),
    ("huge", {"scores": [[1e300]]}, "scores[0][0]", ("overflows float32",)),
    ("huge values", {"scores": [[1.0]], "values": [[-1e39]]}, "values[0][0]", ("overflows",)),
    ("too long", {"scores": [[0.0] * 7] * 7}, "scores", ("7 tokens, limit 6", "ATTNLAB_MAX_TOKENS")),
    ("too wide", {"scores": [[0.0] * 7] * 2}, "scores", ("7 tokens",)),
    ("labels", {"scores": SCORES, "tokens": ["a", "b"]}, "tokens", ("2 token labels for 4 rows",)),
    ("text labels", {"scores": SCORES, "text": "a b c"}, "text", ("3 token labels",)),
    ("x", {"scores": SCORES, "x": [[1.0]]}, "x", ("given does not read x",)),
    ("weights", {"scores": SCORES, "weights": {"w_q": [[1.0]], "w_k": [[1.0]], "w_v": [[1.0]]}}, "weights", ()),
    ("heads", {"scores": SCORES, "heads": 2}, "heads", ("leave heads out",)),
    ("options", {"scores": SCORES, "options": {"seed": 1}}, "options.seed", ("takes no options",)),
    ("texts", {"scores": SCORES, "texts": ["a b c d"]}, "texts", ("takes no batch",)),
    ("source", {"scores": SCORES, "source": {"text": "a b"}}, "source", ("no cross-attention",)),
    ("demo bug", {"scores": SCORES, "demo_bug": "flipped_mask"}, "demo_bug", ("leave demo_bug out",)),
    ("qkv", {"scores": SCORES, "include": ["qkv"]}, "include", ("qkv needs a model's projections",)),
    ("audit", {"pattern": HEAD_B, "include": ["audit"]}, "include", ("audit needs",)),
    ("contexts without values", {"scores": SCORES, "include": ["contexts"]}, "include", ("needs values",)),
    ("final without values", {"pattern": HEAD_B, "include": ["final"]}, "include", ("final needs values",)),
    ("value norms", {"scores": SCORES, "include": ["value_norms"]}, "include", ("value_norms needs values",)),
    ("scores for another model", {"model": "textbook", "scores": SCORES}, "scores", ("models that read scores",)),
    ("pattern for another model", {"model": "textbook", "pattern": HEAD_B}, "pattern", ("given",)),
    ("labels for the example", {"model": "given", "text": "a b c"}, "text", ("3 token labels for 4 rows",)),
    ("a string", {"scores": [["1"]]}, "scores[0][0]", ()),
]


@pytest.mark.parametrize(("case", "body", "field", "words"), BAD, ids=[b[0] for b in BAD])
def test_each_refusal_is_a_422_naming_its_field(
    client: TestClient, case: str, body: dict[str, Any], field: str, words: tuple[str, ...]
) -> None:
    sent = json.dumps(body)  # NaN spelled as JavaScript writes it, which a JSON parser may accept
    resp = client.post("/api/attention", content=sent, headers={"content-type": "application/json"})
    assert_error(resp, 422, field, *words)


def test_hostile_scores_give_finite_weights(client: TestClient) -> None:
    body = post(client, scores=[[3e38, -3e38], [-3e38, 3e38]], masks={"causal": True})
    assert head(body)["weights"] == [[1.0, 0.0], [0.0, 1.0]]


def test_other_analyses_run_on_typed_matrices_or_say_why_not(client: TestClient) -> None:
    causal = {"causal": True}
    moved = client.post(
        "/api/perturb",
        json={"scores": SCORES, "values": VALUES, "masks": causal, "position": 2, "change": {"kind": "value"}},
    )
    assert moved.status_code == 200, moved.text
    delta = moved.json()["final_delta"]
    assert delta[:2] == [0.0, 0.0] and delta[2] > 0  # a later value moves no earlier query
    for change in ({"kind": "shift"}, {"kind": "token", "token": "a"}):
        resp = client.post("/api/perturb", json={"scores": SCORES, "position": 0, "change": change})
        assert_error(resp, 422, "change.kind", "move a value")
    edit = {"layer": 0, "head": 0, "query": 3, "key": 0, "weight": 0.5}
    resp = client.post("/api/intervene", json={"pattern": HEAD_B, "values": VALUES, "edit": [edit]})
    assert resp.status_code == 200, resp.text
    after = resp.json()["after"]["layers"][0]["heads"][0]["weights"]
    assert after[3] == pytest.approx([0.5, 1 / 6, 1 / 6, 1 / 6]) and after[:3] == HEAD_B[:3]


def test_a_layer_with_a_given_pattern_uses_it_in_the_one_forward() -> None:
    """Engine level: the typed pattern is what hook_pattern holds and what the contexts mix with."""
    model = build("given")
    pattern, values = torch.tensor(HEAD_A, dtype=torch.float64), torch.tensor(VALUES, dtype=torch.float64)
    run = model.run(RunInput(pattern=pattern, values=values), torch.device("cpu"), torch.float64)
    cache = run.cache()
    assert torch.equal(cache["blocks.0.attn.hook_pattern"][0, 0], pattern)
    assert torch.allclose(cache["blocks.0.attn.hook_z"][0, :, 0], pattern @ values)
    scored = model.run(RunInput(scores=pattern, values=values), torch.device("cpu"), torch.float64)
    assert not torch.equal(scored.cache()["blocks.0.attn.hook_pattern"][0, 0], pattern)  # scores get a softmax


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_typed_matrices_run_in_each_dtype(client: TestClient, dtype: str) -> None:
    body = post(client, pattern=HEAD_B, values=VALUES, dtype=dtype, include=["weights", "contexts"])
    np.testing.assert_allclose(np.asarray(head(body)["weights"]), np.asarray(HEAD_B), atol=1e-2)
    assert body["config"]["dtype"] == dtype
