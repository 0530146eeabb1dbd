"""A model family declares once what it reads and can do (engine/models/declare.py): /api/models serves it, one
check in AttentionModel.encode refuses what it does not read, and messages pointing to other models are built from
the declarations."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

import engine.models
from engine.errors import InputError
from engine.forward import Network
from engine.models import FAMILIES, AttentionModel, Capabilities, ModelSource, RunInput, build, load_models, model_for
from engine.models.base import Encoded, ModelInfo, one_layer, whitespace_tokens
from engine.models.declare import INPUT_FIELDS
from engine.models.induction import CHECKPOINT
from engine.models.random_layer import layer_weights, parse_config
from engine.models.run import SourceInput
from tests.helpers import assert_error

CPU = torch.device("cpu")

# what each built-in family declares, written out here so a change to a declaration is a change to this table
DECLARED = {
    "textbook": (["text", "tokens", "x", "weights"], {"decode": True, "batches": False, "cross_attention": True}),
    "random": (["text", "tokens", "x", "options"], {"decode": True, "batches": True, "cross_attention": True}),
    "custom": (["text", "tokens", "x", "weights"], {"decode": True, "batches": False, "cross_attention": True}),
    "minilm": (["text", "tokens"], {"decode": False, "batches": True, "cross_attention": False}),
    "induction": (["text", "tokens"], {"decode": True, "batches": True, "cross_attention": False}),
    "given": (
        ["text", "tokens", "scores", "pattern", "values"],
        {"decode": False, "batches": False, "cross_attention": False},
    ),
}
PREDICTS = {"induction"}

# one value of each input field, given alongside a text (or x, for the models that read x)
FIELD_VALUES: dict[str, Any] = {
    "tokens": ["a", "b"],
    "x": [[1.0, 0.0], [0.0, 1.0]],
    "weights": {"w_q": [[1.0], [0.0]], "w_k": [[1.0], [0.0]], "w_v": [[1.0], [0.0]]},
    "options": {"seed": 1},
}


def test_models_serves_each_models_capabilities_and_reads(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    with make_client(models="textbook,random,custom,minilm,induction,given") as client:
        entries = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert set(entries) == set(DECLARED)
    for name, (reads, caps) in DECLARED.items():
        entry = entries[name]
        assert entry["reads"] == reads, name
        assert entry["capabilities"] == {**caps, "predicts_tokens": name in PREDICTS}, name
        assert entry["reads"] == [f for f in INPUT_FIELDS if f in FAMILIES[name].reads]  # served as declared
    assert entries["random"]["options"] == {"d_model": 64, "heads": 4, "kv_heads": None, "seed": 0, "positions": False}
    for name in ("textbook", "custom", "minilm", "induction"):
        assert entries[name]["options"] == {}, name  # they take no options
    assert set(entries["textbook"]["defaults"]) == {"x", "w_q", "w_k", "w_v"}


@pytest.mark.parametrize(
    ("name", "field"),
    [(name, field) for name, (reads, _) in DECLARED.items() for field in FIELD_VALUES if field not in reads],
)
def test_a_field_the_model_does_not_read_is_a_422_naming_it(
    shared_client: Callable[..., TestClient], name: str, field: str
) -> None:
    resp = shared_client(models=name).post(
        "/api/attention", json={"model": name, "text": "a b", field: FIELD_VALUES[field]}
    )
    named = "options.seed" if field == "options" else field
    words = ["takes no options"] if field == "options" else [f"{name} does not read {field}"]
    assert_error(resp, 422, named, *words)


@pytest.mark.parametrize("name", ["minilm", "induction", "random"])
@pytest.mark.parametrize("field", ["heads", "kv_heads"])
def test_head_counts_go_with_weights_only(name: str, field: str) -> None:
    model = load_models([name])[name]
    with pytest.raises(InputError) as err:
        model.encode(RunInput(text="red ball", **{field: 2}))
    assert err.value.field == field and "has its own heads" in err.value.message


class Letters(AttentionModel):
    """A toy family declared in a test: it reads text only, takes no batch and has no cross-attention."""

    name = "letters"
    reads = frozenset({"text"})
    capabilities = Capabilities(batches=False, cross_attention=False)
    info = ModelInfo(name=name, description="one letter a position", n_layers=1, n_heads=1, n_kv_heads=1, d_model=4,
                     d_head=4, d_v=4, default_text="a b")  # fmt: skip

    def encode_sequence(self, inp: RunInput) -> Encoded:
        tokens = whitespace_tokens(inp)
        cfg = parse_config({"d_model": 4, "heads": 1})
        return Encoded(tokens, torch.randn(len(tokens), cfg.d_model, dtype=torch.float64), from_tokens=True)

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        return one_layer(layer_weights(parse_config({"d_model": 4, "heads": 1})).to(device, dtype))


def test_a_new_family_gets_the_check_and_the_messages_from_its_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Letters()
    assert model.run(RunInput(text="a b c"), CPU, torch.float64).tokens == ["a", "b", "c"]
    with pytest.raises(InputError) as err:
        model.encode(RunInput(tokens=["a"]))
    assert err.value.field == "tokens" and "letters does not read tokens (it reads text)" in err.value.message
    assert "models that read tokens: custom, given, induction, minilm, pycode, random or textbook" in err.value.message
    # a family added to the registry appears in every message that lists models with a capability
    monkeypatch.setitem(engine.models.FAMILIES, "letters", Letters)
    monkeypatch.setattr(Letters, "capabilities", Capabilities())
    models = load_models(["textbook", "minilm"])
    with pytest.raises(InputError) as err:
        models["textbook"].encode(RunInput(texts=["a"]))
    assert err.value.field == "texts"
    assert "models that take one: induction, letters, minilm, pycode or random" in str(err.value)
    with pytest.raises(InputError) as err:
        models["minilm"].encode(RunInput(text="a", source=SourceInput(text="b c")))
    assert err.value.field == "source" and "custom, letters, random or textbook" in err.value.message


def test_builders_take_a_source() -> None:
    with pytest.raises(ValueError, match="random makes its own weights"):
        build("random", ModelSource(Path("/nowhere")))
    default = build("induction")
    moved = build("induction", ModelSource(CHECKPOINT.parent))
    a, b = default.network(RunInput(), CPU, torch.float64), moved.network(RunInput(), CPU, torch.float64)
    assert torch.equal(a.blocks[1].attn.W_Q, b.blocks[1].attn.W_Q)
    with pytest.raises(FileNotFoundError):
        build("induction", ModelSource(Path("/nowhere")))
    with pytest.raises(ValueError, match="unknown models"):
        build("nope")


def test_which_model_a_bare_x_runs_on_and_which_runs_alone_are_declared(
    make_client: Callable[..., AbstractContextManager[TestClient]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (
        model_for(None, True) == "custom" and model_for("random", True) == "random" and model_for(None, False) is None
    )
    bare = {"x": [[1.0, 0.0], [0.0, 1.0]], "weights": FIELD_VALUES["weights"]}
    with make_client() as client:
        assert client.post("/api/attention", json=bare).json()["model"] == "custom"
        assert client.post("/api/attention", json={"model": "textbook"}).status_code == 200  # its own numbers
        assert_error(client.post("/api/attention", json={"model": "random"}), 422, "text")
    monkeypatch.setattr(FAMILIES["custom"], "serves_bare_x", False)
    monkeypatch.setattr(FAMILIES["textbook"], "serves_bare_x", True)
    monkeypatch.setattr(FAMILIES["textbook"], "needs_input", True)
    assert model_for(None, True) == "textbook"
    with make_client() as client:
        assert client.post("/api/attention", json=bare).json()["model"] == "textbook"
        assert_error(client.post("/api/attention", json={"model": "textbook"}), 422, "text")
