"""`sinks` on an attention body: hide the keys every row parks weight on, renormalise the rest; stats' sink_mass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.fixtures import make_app_client

SENTENCE = "The animal didn't cross the street because it was too tired"
REPEAT = "red ball king river frog red ball king"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:

    with make_app_client(models="induction,minilm") as c:
        yield c


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def refused(client: TestClient, path: str = "/api/attention", **body: Any) -> dict[str, Any]:
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    return dict(r.json()["error"])


def test_hiding_minilms_special_tokens_renormalises_every_row_over_the_words(client: TestClient) -> None:
    plain = post(client, model="minilm", text=SENTENCE, layer=3)
    hidden = post(client, model="minilm", text=SENTENCE, layer=3, sinks={"hide": "special"})
    s = len(plain["tokens"])
    assert hidden["sinks"] == {"hidden": [0, s - 1], "renormalised": True}  # [CLS] and [SEP]
    for a, b in zip(plain["layers"][0]["heads"], hidden["layers"][0]["heads"], strict=True):
        w, v = np.asarray(a["weights"], dtype=np.float64), np.asarray(b["weights"], dtype=np.float64)
        assert v[:, [0, s - 1]].max() == 0.0
        rest = w.copy()
        rest[:, [0, s - 1]] = 0.0
        want = rest / rest.sum(-1, keepdims=True)
        assert np.abs(v - want).max() < 1e-5
        mass = w[:, [0, s - 1]].sum(-1).mean()
        assert b["stats"]["sink_mass"] == pytest.approx(mass, abs=1e-6)
        # the default sink is the first position alone
        assert a["stats"]["sink_mass"] == pytest.approx(w[:, 0].mean(), abs=1e-6)
        # scores and the rest of the stats are the model's own: the view changes what is drawn only
        assert a["scores"] == b["scores"] and a["stats"]["entropy"] == b["stats"]["entropy"]
    masses = [h["stats"]["sink_mass"] for h in hidden["layers"][0]["heads"]]
    assert max(masses) > 0.5  # minilm's middle layers park most of their weight on [CLS] and [SEP]


def test_without_renormalising_the_other_keys_keep_their_weights(client: TestClient) -> None:
    plain = post(client, model="minilm", text=SENTENCE, layer=1)
    bare = post(client, model="minilm", text=SENTENCE, layer=1, sinks={"hide": [3, 0, 3], "renormalise": False})
    assert bare["sinks"] == {"hidden": [0, 3], "renormalised": False}
    for a, b in zip(plain["layers"][0]["heads"], bare["layers"][0]["heads"], strict=True):
        w, v = np.asarray(a["weights"]), np.asarray(b["weights"])
        keep = [k for k in range(w.shape[1]) if k not in (0, 3)]
        assert np.array_equal(v[:, keep], w[:, keep]) and v[:, [0, 3]].max() == 0.0


def test_a_row_whose_only_key_is_hidden_reads_zero_not_nan(client: TestClient) -> None:
    """Causal induction: query 0 sees key 0 alone; hiding the first token leaves it nothing to renormalise."""
    r = post(client, model="induction", text=REPEAT, sinks={"hide": "first"})
    for layer in r["layers"]:
        for head in layer["heads"]:
            w = np.asarray(head["weights"])
            assert np.isfinite(w).all() and w[0].tolist() == [0.0] * 8
            assert np.abs(w[1:].sum(-1) - 1).max() < 1e-5


def test_sinks_that_cannot_be_honoured_are_refused_by_name(client: TestClient) -> None:
    err = refused(client, model="minilm", text=SENTENCE, sinks={"hide": [0, 99]})
    assert err["field"] == "sinks.hide[1]" and "0..14" in err["message"]
    err = refused(client, model="induction", text=REPEAT, sinks={"hide": "special"})
    assert err["field"] == "sinks.hide" and "no special tokens" in err["message"]
    err = refused(client, model="minilm", texts=["a cat", "a dog sat"], sinks={"hide": "special"})
    assert err["field"] == "sinks.hide"
    err = refused(client, model="minilm", text=SENTENCE, sinks={"hide": "last"})
    assert err["field"].startswith("sinks.hide")
    err = refused(client, "/api/perturb", model="induction", text=REPEAT, position=3, sinks={"hide": "first"})
    assert err["field"] == "sinks"
    err = refused(client, "/api/heads", model="induction", sinks={"hide": "first"})
    assert err["field"] == "sinks"


def test_compare_honours_each_sides_sinks(client: TestClient) -> None:
    body = {"model": "minilm", "text": SENTENCE, "layer": 2}
    r = client.post("/api/compare", json={"a": body, "b": {**body, "sinks": {"hide": "special"}}})
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["a"]["sinks"] is None and j["b"]["sinks"]["hidden"] == [0, len(j["b"]["tokens"]) - 1]
    assert np.asarray(j["b"]["layers"][0]["heads"][0]["weights"])[:, 0].max() == 0.0
