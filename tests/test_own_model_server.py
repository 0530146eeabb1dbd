"""A user's checkpoint served by a real `attnlab serve` (ATTNLAB_MODELS="textbook,mine=DIR,oss=DIR"): listed by GET
/api/models with its family, sizes and its match to transformers, and answered on every route; a directory that
cannot load (a pickle, an unknown family, no directory at all) is listed under unavailable with why, never opened,
and the server starts anyway."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from tokenizers import Regex, Tokenizer, normalizers

from engine.models.textbook import TextbookModel
from tests.fixtures import Unloadable
from tests.helpers import assert_error

TEXT = "the door opens on the garden and the key opens the door"


@pytest.fixture(scope="module")
def mine(llama_checkpoint: Path) -> Path:
    """The checkpoint the shared checkpoint_server serves as `mine` (tests/fixtures.py)."""
    return llama_checkpoint


@pytest.fixture(scope="module")
def server(checkpoint_server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=checkpoint_server, timeout=60) as client:
        yield client


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_models_lists_the_checkpoint_with_its_family_and_reference(server: httpx.Client, mine: Path) -> None:
    listed = ok(server.get("/api/models"))
    assert [m["name"] for m in listed["models"]] == ["textbook", "mine", "oss"] and listed["unavailable"] == []
    entry = listed["models"][1]
    config = json.loads((mine / "config.json").read_text())
    assert entry["family"] == "llama" == config["model_type"]
    assert (entry["n_layers"], entry["n_heads"], entry["n_kv_heads"], entry["d_model"]) == (
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["hidden_size"],
    )
    assert (entry["layers"], entry["heads"], entry["kv_heads"]) == (entry["n_layers"], entry["n_heads"], 2)
    assert entry["vocab_size"] == config["vocab_size"] and entry["max_positions"] == config["max_position_embeddings"]
    assert entry["capabilities"]["decode"] and entry["capabilities"]["predicts_tokens"]
    reference = entry["reference"]
    assert reference["library"].startswith("transformers ")
    assert 0 <= reference["max_abs_diff"]["weights"] <= 1e-5 and 0 <= reference["max_abs_diff"]["output"] <= 1e-5
    textbook = listed["models"][0]
    assert textbook["family"] == "textbook" and textbook["reference"] is None and textbook["card"] == {}
    assert textbook["vocab_size"] is None and textbook["n_layers"] == textbook["layers"] == 1


def causal_rows(weights: np.ndarray) -> None:
    """Each row a distribution over the keys at or before its query, exact zeros after it."""
    s = weights.shape[-1]
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert (weights[..., np.triu_indices(s, 1)[0], np.triu_indices(s, 1)[1]] == 0.0).all()
    assert (weights >= 0).all()


def test_every_route_answers_on_the_checkpoint(server: httpx.Client) -> None:
    body = {"model": "mine", "text": TEXT}
    run = ok(server.post("/api/attention", json={**body, "include": ["weights", "final"]}))
    entry = next(m for m in ok(server.get("/api/models"))["models"] if m["name"] == "mine")
    s = len(run["tokens"])
    assert len(run["layers"]) == entry["n_layers"] and len(run["layers"][0]["heads"]) == entry["n_heads"]
    for layer in run["layers"]:
        causal_rows(np.array([h["weights"] for h in layer["heads"]]))
    assert np.array(run["final"]).shape == (s, entry["vocab_size"])

    heads = ok(server.post("/api/heads", json=body))
    assert len(heads["heads"]) == entry["n_layers"] * entry["n_heads"]
    top = ok(server.post("/api/heads/top", json={**body, "query": s - 1, "key": 0, "k": 3}))
    assert len(top["heads"]) == 3

    perturbed = ok(server.post("/api/perturb", json={**body, "masks": {"causal": True}, "position": s - 2}))
    assert perturbed["checks"][0]["holds"] is True  # a causal decoder: a change never moves an earlier position
    assert all(layer["delta"][: s - 2] == [0.0] * (s - 2) for layer in perturbed["layers"])

    ablated = ok(server.post("/api/intervene", json={**body, "ablate": [{"layer": 0, "head": 1}]}))
    assert max(ablated["final_delta"]) > 0 and ablated["predictions"] is not None

    windowed = {**body, "masks": {"causal": True, "window": 2}}
    compared = ok(server.post("/api/compare", json={"a": body, "b": windowed}))
    assert compared["max_abs"] > 0 and len(compared["layers"]) == entry["n_layers"]
    for layer in compared["layers"]:
        for head in layer["heads"]:
            assert np.triu(np.array(head["diff"]), 1).max() == 0.0  # both causal: nothing above the diagonal moves

    decoded = ok(server.post("/api/decode", json={**body, "generate": {"tokens": 3}}))
    assert decoded["max_diff_vs_full"] <= 1e-5 and len(decoded["generated"]) == 3
    for step in decoded["steps"]:
        for layer in step["weights"]:
            np.testing.assert_allclose(np.array(layer).sum(-1), 1.0, atol=1e-5)

    page = server.post("/api/export", json={**body, "view": "layer", "layer": 0})
    assert page.status_code == 200 and page.text.startswith("<!doctype html>") and "mine" in page.text


def test_a_pickle_is_never_opened_and_the_server_starts(unloadable_server: Unloadable) -> None:
    base, made = unloadable_server.base, unloadable_server.bad.parent  # made: where the three checkpoints are
    listed = httpx.get(f"{base}/api/models").json()
    assert [m["name"] for m in listed["models"]] == ["textbook"]
    reasons = {u["name"]: u["reason"] for u in listed["unavailable"]}
    assert set(reasons) == {"bad", "gone", "t5"}
    assert "pytorch_model.bin" in reasons["bad"] and "safetensors" in reasons["bad"]
    assert "convert" in reasons["bad"].lower()
    assert "not a directory" in reasons["gone"] and str(made) not in reasons["gone"]  # no server path
    assert "t5" in reasons["t5"] and "llama" in reasons["t5"]  # says which families it reads
    assert "encoder-decoder" in reasons["t5"]  # and why T5 is not one of them
    refused = httpx.post(f"{base}/api/attention", json={"model": "bad", "text": "a"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "model"
    assert "pytorch_model.bin" in refused.json()["error"]["message"]
    assert not unloadable_server.opened.exists()


def test_built_in_models_say_what_they_are(make_client: Callable[..., AbstractContextManager[TestClient]]) -> None:
    with make_client(models="textbook,random,custom,minilm,induction") as client:
        entries = {m["name"]: m for m in ok(client.get("/api/models"))["models"]}
    assert {n: m["family"] for n, m in entries.items()} == {
        "textbook": "textbook",
        "random": "random",
        "custom": "custom",
        "minilm": "bert",
        "induction": "induction",
    }
    minilm = entries["minilm"]
    assert (minilm["n_layers"], minilm["n_heads"], minilm["d_model"], minilm["vocab_size"]) == (6, 12, 384, 30522)
    assert minilm["max_positions"] == 512 and minilm["reference"] is None
    assert entries["induction"]["vocab_size"] == len(entries["induction"]["vocab"])
    assert all(m["card"] == {} for m in entries.values())


def test_checkpoint_loading_follows_the_settings(
    mine: Path, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    with make_client(models=f"textbook,mine={mine}", reference=False) as client:
        (entry,) = [m for m in ok(client.get("/api/models"))["models"] if m["name"] == "mine"]
    assert entry["reference"] is None  # not compared: transformers was never loaded
    with make_client(models=f"mine={mine}", checkpoint_parameters=1000) as client:
        listed = ok(client.get("/api/models"))
    assert listed["models"] == [] and listed["unavailable"][0]["name"] == "mine"
    assert "parameters" in listed["unavailable"][0]["reason"] and "1,000" in listed["unavailable"][0]["reason"]


def panicking(directory: Path, start: str) -> Path:
    """The checkpoint in `directory` with a normaliser that panics on any text starting with `start`: a Replace
    at the text's start before a BertNormalizer panics inside the tokenizers library (huggingface/tokenizers#736),
    which raises PanicException, a BaseException that `except Exception` lets by."""
    path = directory / "tokenizer.json"
    tok = Tokenizer.from_file(str(path))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(Regex(f"^(?={start})"), " "), normalizers.BertNormalizer()]
    )
    tok.save(str(path))
    return directory


def test_a_tokenizer_that_panics_on_a_text_is_a_422_naming_text(
    mine: Path, tmp_path: Path, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    # two characters: the load's probe normalises single characters, and would refuse a panic on "z" at load
    shaky = panicking(Path(shutil.copytree(mine, tmp_path / "shaky")), "ze")
    with make_client(models=f"textbook,shaky={shaky}", reference=False) as client:
        for path in ["/api/attention", "/api/heads"]:
            resp = client.post(path, json={"model": "shaky", "text": "zebras open the door"})
            assert_error(resp, 422, "text", "tokenizer failed")
            assert resp.headers["x-content-type-options"] == "nosniff", dict(resp.headers)
        assert ok(client.post("/api/attention", json={"model": "shaky", "text": "the door"}))["tokens"]


def test_a_tokenizer_that_panics_at_load_is_refused_and_the_server_starts(
    mine: Path, tmp_path: Path, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    broken = panicking(Path(shutil.copytree(mine, tmp_path / "broken")), "a")  # loading encodes "a"
    with make_client(models=f"textbook,broken={broken}", reference=False) as client:
        listed = ok(client.get("/api/models"))
        assert [m["name"] for m in listed["models"]] == ["textbook"]
        (refused,) = listed["unavailable"]
        assert refused["name"] == "broken" and "tokenizer.json" in refused["reason"], refused
        assert ok(client.post("/api/attention", json={"model": "textbook"}))["tokens"]


def test_a_panic_anywhere_is_the_one_error_shape_with_security_headers(
    monkeypatch: pytest.MonkeyPatch, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    tok = Tokenizer.from_str(
        json.dumps({"version": "1.0", "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}})
    )
    tok.normalizer = normalizers.Sequence([normalizers.Replace(Regex("^"), " "), normalizers.BertNormalizer()])
    with pytest.raises(BaseException) as caught:
        tok.encode("a")
    panic = caught.value
    assert not isinstance(panic, Exception)  # what made it a 500 in text/plain from uvicorn

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise panic

    monkeypatch.setattr(TextbookModel, "encode_sequence", explode)
    with make_client() as client:
        resp = client.post("/api/attention", json={"model": "textbook"})
    assert_error(resp, 500, None, "unexpected error")
    assert resp.headers["x-content-type-options"] == "nosniff", dict(resp.headers)
