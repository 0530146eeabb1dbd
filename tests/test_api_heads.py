"""Head-type scores and top heads over the API, on the trained models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from server.analyses.heads import default_lengths
from tests.checkpoints import make_shortcut_checkpoint
from tests.fixtures import make_app_client
from tests.helpers import assert_error

SENTENCE = "The animal didn't cross the street because it was too tired"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # shortcut: a one-layer GPT-2 whose head 0 attends exactly 23 positions back (tests/checkpoints.py)
    shortcut = make_shortcut_checkpoint(tmp_path_factory.mktemp("shortcut"), offset=23)
    models = f"textbook,random,induction,minilm,shortcut={shortcut}"
    with make_app_client(models=models) as client:
        yield client


def test_induction_model_shows_its_previous_token_and_induction_heads(trained: TestClient) -> None:
    body = trained.post("/api/heads", json={"model": "induction", "seed": 3}).json()
    assert body["scored_on"] == "probe" and len(body["probe_tokens"]) == 2 * body["segment_len"]
    rows = body["heads"]
    assert len(rows) == body["n_layers"] * body["n_heads"]
    best_induction = max(rows, key=lambda r: r["induction"])
    best_previous = max(rows, key=lambda r: r["previous_token"])
    assert best_induction["layer"] == 1 and best_induction["induction"] > 0.5
    assert best_previous["layer"] == 0 and best_previous["previous_token"] > 0.5
    # the probe really repeats: its second half is its first half
    half = body["segment_len"]
    assert body["probe_tokens"][:half] == body["probe_tokens"][half:]


def test_textbook_has_no_induction_score(trained: TestClient) -> None:
    body = trained.post("/api/heads", json={"model": "textbook"}).json()
    assert body["scored_on"] == "input" and body["probe_tokens"] is None
    assert body["heads"][0]["induction"] is None and body["heads"][0]["previous_token"] is not None


def test_scores_on_the_callers_text_use_its_tokens(trained: TestClient) -> None:
    body = trained.post("/api/heads", json={"model": "random", "text": "a b a b a b"}).json()
    assert body["scored_on"] == "input" and body["n_heads"] == 4
    assert all(r["duplicate_token"] is not None and 0 <= r["duplicate_token"] <= 1 for r in body["heads"])


def test_top_heads_for_it_and_animal_match_the_attention_weights(trained: TestClient) -> None:
    tokens = trained.post("/api/attention", json={"model": "minilm", "text": SENTENCE, "include": []}).json()["tokens"]
    it, animal = tokens.index("it"), tokens.index("animal")
    top = trained.post(
        "/api/heads/top", json={"model": "minilm", "text": SENTENCE, "query": it, "key": animal, "k": 5}
    ).json()
    assert top["tokens"] == tokens and len(top["heads"]) == 5
    weights = [h["weight"] for h in top["heads"]]
    assert weights == sorted(weights, reverse=True)
    full = trained.post("/api/attention", json={"model": "minilm", "text": SENTENCE, "include": ["weights"]}).json()
    every = sorted((h["weights"][it][animal] for layer in full["layers"] for h in layer["heads"]), reverse=True)
    assert weights == pytest.approx(every[:5], abs=1e-6)
    for h in top["heads"]:
        assert full["layers"][h["layer"]]["heads"][h["head"]]["weights"][it][animal] == pytest.approx(h["weight"])


@pytest.mark.parametrize(
    ("path", "body", "field", "words"),
    [
        ("/api/heads", {"model": "nope"}, "model", "unknown model"),
        ("/api/heads", {"model": "minilm", "segment_len": 500}, "segment_len", "limit of 512"),
        ("/api/heads", {"model": "minilm", "segment_len": 256}, "segment_len", "= 514 positions"),
        ("/api/heads", {"model": "random", "segment_len": 257}, "segment_len", "at most 256"),
        ("/api/heads", {"model": "induction", "segment_len": 33}, "segment_len", "at most 32"),
        ("/api/heads", {"model": "random", "segment_len": 10**9}, "segment_len", "limit of 512"),
        ("/api/heads", {"model": "minilm", "segment_len": 1}, "segment_len", "greater than or equal to 2"),
        ("/api/heads", {"model": "random", "text": "a " * 600}, "text", "limit 512"),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": [17, 33]}},
            "probe.segment_lengths[1]",
            "64 positions induction takes",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": [17, 17]}},
            "probe.segment_lengths",
            "17 twice",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": []}},
            "probe.segment_lengths",
            "at least 1 item",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": list(range(2, 11))}},
            "probe.segment_lengths",
            "at most 8 items",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": [1]}},
            "probe.segment_lengths[0]",
            "greater than or equal to 2",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": ["17"]}},
            "probe.segment_lengths[0]",
            "valid integer",
        ),
        (
            "/api/heads",
            {"model": "induction", "probe": {"segment_lengths": [17.0]}},
            "probe.segment_lengths[0]",
            "valid integer",
        ),
        ("/api/heads", {"model": "induction", "probe": {"repeats": 1}}, "probe.repeats", "greater than or equal to 2"),
        ("/api/heads", {"model": "induction", "probe": {"repeats": True}}, "probe.repeats", "valid integer"),
        ("/api/heads", {"model": "induction", "probe": {"seed": -1}}, "probe.seed", "greater than or equal to 0"),
        ("/api/heads", {"model": "induction", "probe": {"lengths": [17]}}, "probe.lengths", "Extra inputs"),
        ("/api/heads", {"model": "induction", "probe": {}, "segment_len": 17}, "segment_len", "not both"),
        ("/api/heads/top", {"model": "random", "text": "a b", "query": 2, "key": 0}, "query", "0..1"),
        ("/api/heads/top", {"model": "random", "text": "a b", "query": 0, "key": 0, "k": 0}, "k", "greater than"),
    ],
)
def test_head_endpoints_name_the_bad_field(
    trained: TestClient, path: str, body: dict[str, object], field: str, words: str
) -> None:
    assert_error(trained.post(path, json=body), 422, field, words)


def test_a_probe_as_long_as_the_token_limit_is_scored(trained: TestClient) -> None:
    # random adds no special tokens: 2 x 128 words are 256 positions
    body = trained.post("/api/heads", json={"model": "random", "segment_len": 128}).json()
    assert len(body["probe_tokens"]) == 256 and body["heads"][0]["induction"] is not None
    # minilm adds [CLS] and [SEP]: 2 x 255 + 2 = 512, exactly ATTNLAB_MAX_TOKENS and minilm's positions
    body = trained.post("/api/heads", json={"model": "minilm", "segment_len": 255}).json()
    assert len(body["probe_tokens"]) == 512 and body["heads"][0]["induction"] is not None
    # textbook has no probe: segment_len does not apply to it
    body = trained.post("/api/heads", json={"model": "textbook", "segment_len": 200}).json()
    assert body["scored_on"] == "input" and body["probe_tokens"] is None


def test_head_types_score_the_heads_the_options_describe(trained: TestClient) -> None:
    body = trained.post(
        "/api/heads", json={"model": "random", "options": {"d_model": 32, "heads": 8, "seed": 5}}
    ).json()
    assert body["n_heads"] == 8 and len(body["heads"]) == 8
    default = trained.post("/api/heads", json={"model": "random"}).json()
    assert default["n_heads"] == 4
    # the caller's masks reach the probe when no text is given: causal leaves no weight on later keys, so
    # mean distances shrink for every head against the unmasked probe
    causal = trained.post("/api/heads", json={"model": "random", "masks": {"causal": True}}).json()
    for free, masked in zip(default["heads"], causal["heads"], strict=True):
        assert masked["mean_distance"] < free["mean_distance"]


def test_head_types_of_edited_textbook_numbers(trained: TestClient) -> None:
    identity = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    x = [[10.0, 0.0, 0.0, 0.0], [0.0, 10.0, 0.0, 0.0], [10.0, 0.0, 0.0, 0.0]]
    weights = {"w_q": identity, "w_k": identity, "w_v": [[1.0, 0.0, 0.0]] * 4}
    req = {"model": "textbook", "tokens": ["a", "b", "a"], "x": x, "weights": weights, "masks": {}}
    body = trained.post("/api/heads", json=req).json()
    # q = k = x[:, :2] with large entries: each query attends only to keys equal to itself, so query 2 ("a")
    # splits its weight between key 0 (the earlier "a") and itself, and no query looks at the key before it
    row = body["heads"][0]
    assert body["scored_on"] == "input"
    assert row["previous_token"] < 0.01  # the chapter's own numbers score 0.34 here
    assert row["duplicate_token"] == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("path", ["/api/heads", "/api/heads/top"])
@pytest.mark.parametrize(("extra", "field"), [({"layer": 0}, "layer"), ({"include": ["weights"]}, "include")])
def test_head_endpoints_refuse_fields_they_cannot_honour(
    trained: TestClient, path: str, extra: dict[str, Any], field: str
) -> None:
    body = {"model": "random", "text": "a b c", "query": 1, "key": 0} if path.endswith("top") else {"model": "random"}
    if path == "/api/heads" and field == "include":  # its include takes ablation_effect only: a schema 422
        r = trained.post(path, json={**body, **extra})
        assert r.status_code == 422 and r.json()["error"]["field"] == "include[0]", r.text
        assert "ablation_effect" in r.json()["error"]["message"]
        return
    assert_error(trained.post(path, json={**body, **extra}), 422, field, f"leave {field} out")


def test_heads_say_the_probe_they_used_and_score_induction_by_its_lowest_length(trained: TestClient) -> None:
    body = trained.post("/api/heads", json={"model": "induction"}).json()
    assert body["probe"] == {"segment_lengths": [17, 24, 31], "repeats": 2, "seed": 0}
    assert body["segment_len"] == 17 and len(body["probe_tokens"]) == 34  # the first length's probe
    for row in body["heads"]:
        for score, by in (("induction", "induction_by_length"), ("duplicate_token", "duplicate_by_length")):
            assert list(row[by]) == ["17", "24", "31"]
            assert row[score] == min(row[by].values())
    # the lengths, copies and seed asked for are the ones used: three copies of 10 words, seed 5
    asked = {"segment_lengths": [10, 20], "repeats": 3, "seed": 5}
    body = trained.post("/api/heads", json={"model": "induction", "probe": asked}).json()
    assert body["probe"] == asked and body["probe_tokens"][:10] * 3 == body["probe_tokens"]
    row = body["heads"][0]
    assert list(row["induction_by_length"]) == ["10", "20"]
    one = trained.post("/api/heads", json={"model": "induction", "probe": {**asked, "segment_lengths": [20]}}).json()
    assert one["heads"][0]["induction"] == row["induction_by_length"]["20"]
    # on your text, duplicate-token is measured on it: no per-length scores; induction still on the probes
    text = "red ball king river frog red ball king river frog"
    body = trained.post("/api/heads", json={"model": "induction", "text": text}).json()
    assert body["scored_on"] == "input" and body["probe"]["segment_lengths"] == [17, 24, 31]
    assert all(r["duplicate_by_length"] is None and len(r["induction_by_length"]) == 3 for r in body["heads"])
    # a model without a probe has none to report
    body = trained.post("/api/heads", json={"model": "textbook"}).json()
    assert body["probe"] is None and body["heads"][0]["induction_by_length"] is None


def test_a_head_that_attends_a_fixed_offset_back_is_no_induction_head(trained: TestClient) -> None:
    """The shortcut model's head 0 attends 23 positions back: on 24 words twice that is the token after the earlier
    occurrence for every query of the second copy, so one probe of length 24 scores it as a perfect induction head;
    the default probe's other lengths do not, and its lowest is what the head scores."""
    body = trained.post("/api/heads", json={"model": "shortcut"}).json()
    row = body["heads"][0]
    assert row["induction"] < 0.3, row
    assert row["induction_by_length"]["24"] > 0.9
    assert max(r["induction"] for r in body["heads"]) < 0.3  # no head of the model is an induction head
    one = trained.post("/api/heads", json={"model": "shortcut", "probe": {"segment_lengths": [24]}}).json()
    assert one["heads"][0]["induction"] > 0.9  # the single probe it fools
    # the model's real induction heads still score as such under the default probe: L1 H3 the best, 0.92
    body = trained.post("/api/heads", json={"model": "induction"}).json()
    best = max(body["heads"], key=lambda r: r["induction"])
    assert (best["layer"], best["head"]) == (1, 3) and best["induction"] > 0.9
    assert min(best["induction_by_length"].values()) == best["induction"]


def test_the_shortcut_model_copies_the_token_its_offset_back(tmp_path: Path) -> None:
    """What makes it a shortcut: it predicts the token 23 places back on any sequence, repeated or not."""
    import transformers

    model = transformers.GPT2LMHeadModel.from_pretrained(make_shortcut_checkpoint(tmp_path, offset=23)).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        predicted = model(ids).logits[0].argmax(dim=-1)
    assert torch.equal(predicted[23:], ids[0, :41])


@pytest.mark.parametrize(
    ("longest", "lengths"), [(255, (17, 24, 31)), (31, (17, 24, 31)), (19, (10, 14, 19)), (3, (2, 3))]
)
def test_the_default_probe_fits_a_model_with_fewer_positions(longest: int, lengths: tuple[int, ...]) -> None:
    assert default_lengths(longest) == lengths
