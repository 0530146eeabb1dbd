"""A user's model in a notebook's process: attnlab.load(DIR), and attnlab.run / attnlab.show given a checkpoint
directory (str or Path), the model load returned, or a transformers model object with its tokenizer."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import attnlab
from attnlab import ApiError
from tests.checkpoints import make_checkpoint

TEXT = "the key opens the door to the garden"


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("notebook") / "tiny-llama")


@pytest.fixture(scope="module")
def transformers_pair(directory: Path) -> tuple[Any, Any]:
    """The same checkpoint as a transformers model object and its tokenizer, as a notebook holds them."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager").eval()
    return model, PreTrainedTokenizerFast(tokenizer_file=str(directory / "tokenizer.json"))


def final(result: dict[str, Any]) -> np.ndarray:
    return np.asarray(result["final"])


def test_load_registers_the_checkpoint_under_its_directory_name(directory: Path) -> None:
    model = attnlab.load(directory)
    assert model.name == "tiny-llama" and model.family == "llama"
    said = repr(model)
    assert "tiny-llama" in said and "llama" in said and f"{model.info.n_layers} layers" in said
    assert "matches transformers" in said and model.reference["max_abs_diff"]["output"] <= 1e-5
    by_name = attnlab.run("tiny-llama", TEXT, include=["weights", "final"])
    assert by_name["model"] == "tiny-llama" and by_name["tokens"][0] == "<s>"
    weights = np.asarray(by_name["layers"][1]["heads"][0]["weights"])
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.triu(weights, 1).max() == 0.0  # a decoder: causal in every layer, by its own default masks
    # the directory itself, as str or Path, and the model object: the same model, loaded once
    for given in (str(directory), directory, model):
        again = attnlab.run(given, TEXT, include=["weights", "final"])
        assert again["model"] == "tiny-llama"
        np.testing.assert_array_equal(final(again), final(by_name))
    renamed = attnlab.load(directory, name="mine2")
    assert renamed.name == "mine2" and attnlab.run("mine2", TEXT)["model"] == "mine2"


def test_a_transformers_model_object_runs_with_its_tokenizer(
    directory: Path, transformers_pair: tuple[Any, Any]
) -> None:
    hf, tokenizer = transformers_pair
    out = attnlab.run(hf, TEXT, tokenizer=tokenizer, include=["weights", "final"])
    ids = tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        theirs = hf(**ids, output_attentions=True)
    np.testing.assert_allclose(final(out), theirs.logits[0].numpy(), atol=1e-5)
    for layer, attn in zip(out["layers"], theirs.attentions, strict=True):
        ours = np.stack([np.asarray(h["weights"]) for h in layer["heads"]])
        np.testing.assert_allclose(ours, attn[0].numpy(), atol=1e-5)
    assert out["tokens"] == attnlab.run(directory, TEXT)["tokens"]
    with pytest.raises(ApiError) as err:
        attnlab.run(hf, TEXT)
    assert err.value.status == 422 and err.value.field == "tokenizer"


def test_show_takes_a_directory_and_a_model_object(directory: Path, transformers_pair: tuple[Any, Any]) -> None:
    view = attnlab.show(directory, TEXT, layer=0)
    served = attnlab.run(directory, TEXT)["model"]  # the name the directory was last loaded as
    assert view.summary == f"{served}, layer view, layer 0" and "<iframe srcdoc=" in view._repr_html_()
    hf, tokenizer = transformers_pair
    other = attnlab.show(hf, TEXT, layer=0, tokenizer=tokenizer)
    assert other.html.count("<script") == view.html.count("<script") and len(other.html) > 10_000
    # the model object's live widget: a mask changed in it runs the model object again
    before = other.result["layers"][0]["heads"][0]["weights"].copy()
    other.blocked = [[1, 0]]
    assert other.error == "" and other.result["masks"]["blocked"] == [[1, 0]]
    assert other.result["layers"][0]["heads"][0]["weights"][1, 0] == 0 != before[1, 0]


def test_load_refuses_a_pickle_without_opening_it(tmp_path: Path) -> None:
    bad = make_checkpoint("gpt2", tmp_path / "old")
    (bad / "model.safetensors").unlink()
    opened = tmp_path / "unpickled"

    class Trap:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (opened,))

    (bad / "pytorch_model.bin").write_bytes(pickle.dumps(Trap()))
    for attempt in (lambda: attnlab.load(bad), lambda: attnlab.run(bad, TEXT)):
        with pytest.raises(ApiError) as err:
            attempt()
        assert err.value.status == 422 and err.value.field == "model"
        assert "pytorch_model.bin" in err.value.message and "safetensors" in err.value.message
    assert not opened.exists()
    with pytest.raises(ApiError) as err:
        attnlab.run(str(tmp_path / "nowhere"), TEXT)
    assert err.value.field == "model" and "give a checkpoint directory" in err.value.message


def test_a_model_prints_its_match_or_why_not() -> None:
    from engine.models import build

    model = build("textbook")
    assert repr(model) == "<attnlab model textbook: textbook, 1 layer x 1 head, width 4>"
    model.reference = {"library": "transformers 5.24.0", "max_abs_diff": {"weights": 3.1e-7, "output": 0.2}}  # type: ignore[attr-defined]
    assert repr(model).endswith("; differs from transformers 5.24.0 by up to 2e-1>")  # the worse one, no "matches"
    model.reference = {"library": None, "reason": "transformers is not importable"}  # type: ignore[attr-defined]
    assert repr(model).endswith("; not compared with transformers: transformers is not importable>")
