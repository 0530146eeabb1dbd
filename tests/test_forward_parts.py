"""A forward in two parts (the first layers, then the rest, `AttentionModel.run(after=...)`) is the forward in one:
every tensor of every layer bit for bit, the logits and the run's config. The streamed answer sends the layer shown
as soon as its part is computed and goes on from there; this is what makes that one forward, not two."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.forward import ForwardResult
from engine.hooks import stored
from engine.masks import MaskSpec
from engine.models import AttentionModel, ModelRun, RunInput, load_models
from engine.models.checkpoint import load_checkpoint
from tests.checkpoints import make_checkpoint

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AttentionModel]:
    found = load_models(["minilm", "induction", "pycode"])
    found["llama"] = load_checkpoint(
        "llama", make_checkpoint("llama", tmp_path_factory.mktemp("llama")), reference=False
    )
    return found


INPUTS = {
    "minilm": RunInput(text="the animal did not cross the street because it was tired", masks=MaskSpec(window=3)),
    "induction": RunInput(text="red ball king river frog red ball king"),
    "pycode": RunInput(text="def f(a, b):\n    return [a, b]\n"),
    "llama": RunInput(text="def add(a, b): return a + b"),
}


def same(a: ModelRun, b: ModelRun) -> list[str]:
    """What differs between two runs: the names of the tensors (and fields) that are not equal bit for bit."""
    ta, tb = stored(a.result), stored(b.result)
    if len(ta) != len(tb):
        return [f"{len(ta)} tensors against {len(tb)}"]
    wrong = [f"tensor {i}" for i, (x, y) in enumerate(zip(ta, tb, strict=True)) if not torch.equal(x, y)]
    if a.config != b.config:
        wrong.append("config")
    if a.tokens != b.tokens or not torch.equal(a.eligible, b.eligible):
        wrong.append("input")
    return wrong


@pytest.mark.parametrize("name", sorted(INPUTS))
@pytest.mark.parametrize("split", [0, 1])
def test_a_forward_continued_after_its_first_layers_is_the_whole_forward(
    models: dict[str, AttentionModel], name: str, split: int
) -> None:
    model, inp = models[name], INPUTS[name]
    whole = model.run(inp, CPU, torch.float32)
    first = model.run(replace(inp, last_layer=split), CPU, torch.float32)
    assert len(first.layers) == split + 1 and first.config.layers_computed == split + 1
    rest = model.run(inp, CPU, torch.float32, after=first)
    assert len(rest.layers) == model.info.n_layers
    assert rest.layers[: split + 1] == first.layers  # the first part's layers, kept as they were
    assert same(rest, whole) == []
    assert (rest.logits is None) == (whole.logits is None)


def test_a_continuation_from_the_wrong_place_is_caught_by_the_same_check(models: dict[str, AttentionModel]) -> None:
    """Negative control: going on from layer 0's input instead of its output (the first layer run twice over) must
    fail the check above."""
    model, inp = models["induction"], INPUTS["induction"]
    whole = model.run(inp, CPU, torch.float32)
    first = model.run(replace(inp, last_layer=0), CPU, torch.float32)
    wrong_trace = replace(first.layers[0], resid_out=first.layers[0].resid_in)
    wrong = replace(first, result=ForwardResult(first.result.embed, [wrong_trace]))
    rest = model.run(inp, CPU, torch.float32, after=wrong)
    assert same(rest, whole) != []
