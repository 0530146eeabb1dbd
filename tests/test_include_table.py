"""One table of what each `include` item adds to an answer (server/serialize.py INCLUDE): the size estimate that
refuses an answer before the run and the serializer that writes it read the same rows, so every item the schema
allows has a row, and the estimate for an item alone bounds the bytes that item really adds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, get_args

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from server.analyses.attention import attention_body
from server.budgets import answer_shape
from server.plan import make_plan
from server.schemas import AttentionRequest
from server.schemas.attention import Include
from server.serialize import INCLUDE, JSON_NUMBER_BYTES, answer_count
from tests.checkpoints import make_checkpoint
from tests.fixtures import FAST_MODELS, make_app_client

CASES = {
    "one text": {"model": "random", "text": "the cat sat on the warm mat"},
    "a batch": {"model": "random", "texts": ["the cat sat", "on the warm mat today"]},
    "textbook": {"model": "textbook"},
    "experts": {"model": "moe", "texts": ["the cat sat", "on the warm mat today"]},
}
# every item on the built-in models; `experts` on a mixture-of-experts checkpoint (the others refuse it)
PAIRS = [(item, case) for item in sorted(INCLUDE) for case in CASES if (item == "experts") == (case == "experts")]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    moe = make_checkpoint("qwen3_moe", tmp_path_factory.mktemp("moe"))
    with make_app_client(models=f"{FAST_MODELS},moe={moe}", reference=False) as c:
        yield c


def test_every_include_item_the_schema_allows_has_a_row() -> None:
    assert set(INCLUDE) == set(get_args(Include))


def actual_bytes(value: Any) -> int:
    """What `value` weighs in the arrays form: an array its own bytes, every other number a JSON number."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(actual_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(actual_bytes(v) for v in value)
    if isinstance(value, str):
        return 0  # names and notes: not counted as values
    return JSON_NUMBER_BYTES  # a number, a boolean or null


def item_bytes(answer: dict[str, Any], fields: tuple[str, ...]) -> int:
    """The bytes of `fields` wherever they stand: in each head, each layer or the answer itself."""
    total = sum(actual_bytes(answer.get(f)) for f in fields if answer.get(f) is not None)
    for layer in answer["layers"]:
        total += sum(actual_bytes(layer[f]) for f in fields if layer.get(f) is not None)  # a global layer: null
        for head in layer["heads"]:
            total += sum(actual_bytes(head[f]) for f in fields if f in head)
    return total


@pytest.mark.parametrize(("item", "case"), PAIRS)
def test_the_estimate_bounds_what_each_item_alone_adds(client: TestClient, item: str, case: str) -> None:
    app: Any = client.app
    settings, models, runtime = app.state.settings, app.state.models, app.state.runtime
    req = AttentionRequest(**CASES[case], include=[item])
    plan = make_plan(req, settings, models, runtime, accept="application/vnd.attnlab.arrays")
    shape = answer_shape(req, plan.shape, plan.encoded, 1)
    every, _ = answer_count(plan.include, shape)
    estimate = every.bytes("arrays", "float32", "float32")
    answer = attention_body(req, settings, models, runtime)
    fields = INCLUDE[item].fields
    grids = ("eligible", "reasons") if INCLUDE[item].grid and item != "eligibility" else ()
    got = item_bytes(answer, fields + grids)
    assert got > 0 or item == "audit", (item, "the item sent nothing: its fields are misnamed")
    assert got <= estimate, (item, case, got, estimate)


def test_each_row_names_the_function_that_makes_its_part() -> None:
    """One row per item holds both its cost and its maker: a head's matrices are picked from the layer's tensors;
    every other item (but `eligibility`, whose grids every grid item brings) is made by its row's one function."""
    for name, item in INCLUDE.items():
        makers = [m for m in (item.layer, item.stack, item.answer) if m is not None]
        want = 0 if item.place == "head" or name == "eligibility" else 1
        assert len(makers) == want, name


def test_the_answer_holds_what_the_rows_makers_make(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The serializer makes each item's part through its row, in each place: a row's maker replaced is what the
    answer holds (the answer's own field, a layer's field, a view of the stack, the tail's audit)."""
    app: Any = client.app
    settings, models, runtime = app.state.settings, app.state.models, app.state.runtime
    monkeypatch.setitem(INCLUDE, "final", replace(INCLUDE["final"], answer=lambda run, r: "final made"))
    monkeypatch.setitem(INCLUDE, "audit", replace(INCLUDE["audit"], answer=lambda run, r: "audit made"))
    monkeypatch.setitem(INCLUDE, "output", replace(INCLUDE["output"], layer=lambda run, r, i: {"output": i}))
    views = lambda run, r, layers: {i: torch.full((1, 1), float(i)) for i in layers}  # noqa: E731
    monkeypatch.setitem(INCLUDE, "rollout", replace(INCLUDE["rollout"], stack=views))
    req = AttentionRequest(model="random", text="the cat sat", include=["final", "audit", "output", "rollout"])
    answer = attention_body(req, settings, models, runtime)
    assert answer["final"] == "final made" and answer["audit"] == "audit made"
    assert [layer["output"] for layer in answer["layers"]] == list(range(len(answer["layers"])))
    assert [layer["rollout"].tolist() for layer in answer["layers"]] == [[i] for i in range(len(answer["layers"]))]
