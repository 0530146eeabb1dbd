"""One request, one plan: server/plan.py reads a request's fields in one order (model -> input -> encoding -> layers
-> include -> precision/dtype -> budgets) and refuses the first that cannot be honoured (the checks are
server/refusals.py), so a body with two mistakes is refused for the one read first, whichever endpoint it is sent
to. The plan it makes is frozen: the run and the answer read it, never the request's fields again."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import server.refusals
from server.plan import Plan, make_plan
from server.schemas import AttentionRequest
from tests.fixtures import make_app_client
from tests.helpers import assert_error

LIMITS: dict[str, Any] = {"max_tokens": 8, "max_result_values": 200}
TEXT = "the cat sat on it"  # 5 words: the textbook example's 5 positions
LONGER = "the cat sat on the warm mat"  # 4 random heads x 7 x 7 x 2 matrices: past 200 values
SCORES_9 = [[0.0] * 9 for _ in range(9)]  # one row past max_tokens


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_app_client(models="textbook,random,custom,given", **LIMITS) as c:
        yield c


# (why, endpoint, body, the field refused: the earlier of the two mistakes in the reading order)
TWO_MISTAKES = [
    (
        "the model before the precision",
        "/api/attention",
        {"model": "no-such-model", "text": TEXT, "dtype": "float16"},
        "model",
    ),
    (
        "the input before include",
        "/api/attention",
        {"scores": SCORES_9, "include": ["qkv"]},
        "scores",
    ),
    (
        "the layers before the dtype",
        "/api/intervene",
        {"model": "textbook", "text": TEXT, "layer": 7, "dtype": "float64"},
        "layer",
    ),
    (
        "include's sinks before the budget",
        "/api/attention",
        {"model": "random", "text": LONGER, "sinks": {"hide": [40]}, "include": ["scores", "weights"]},
        "sinks.hide[0]",
    ),
]


@pytest.mark.parametrize(("why", "path", "body", "field"), TWO_MISTAKES, ids=[row[0] for row in TWO_MISTAKES])
def test_a_body_with_two_mistakes_is_refused_for_the_one_read_first(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, why: str, path: str, body: dict[str, Any], field: str
) -> None:
    monkeypatch.setattr(server.refusals, "_cannot_run", lambda device, dtype: "no half-precision kernels")
    assert_error(client.post(path, json=body), 422, field)


@pytest.mark.parametrize(("why", "path", "body", "field"), TWO_MISTAKES, ids=[row[0] for row in TWO_MISTAKES])
def test_each_mistake_alone_is_refused_by_its_own_name(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, why: str, path: str, body: dict[str, Any], field: str
) -> None:
    """The negative control of the test above: the later mistake is refused too once the first is mended, so each
    row holds two real mistakes."""
    monkeypatch.setattr(server.refusals, "_cannot_run", lambda device, dtype: "no half-precision kernels")
    mended = {
        "model": {**body, "model": "textbook"},
        "scores": {**body, "scores": [row[:3] for row in SCORES_9[:3]]},
        "layer": {**body, "layer": 0},
        "sinks.hide[0]": {**body, "sinks": {"hide": [0]}},
    }[field]
    got = client.post(path, json=mended)
    assert got.status_code == 422, got.text
    assert got.json()["error"]["field"] != field


def test_the_plan_is_made_once_and_frozen(client: TestClient) -> None:
    """make_plan computes the tokens and the layers once; a run and its answer read them from the frozen plan."""
    app: Any = client.app
    req = AttentionRequest(model="textbook", text=TEXT, layer=0)
    plan = make_plan(req, app.state.settings, app.state.models, app.state.runtime)
    assert isinstance(plan, Plan)
    assert plan.encoded.tokens == TEXT.split()
    assert (plan.layers, plan.last, plan.include) == ((0,), 0, ("scores", "weights", "stats"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.layers = (1,)  # type: ignore[misc]
    body = plan.body(plan.run())
    assert [layer["index"] for layer in body["layers"]] == [0]


# the models' declared sizes, a model's options, custom weights and typed-in matrices: whose widths the run sets
SHAPED = [
    {"model": "textbook", "text": TEXT},
    {"model": "random", "text": TEXT},
    {"model": "random", "text": TEXT, "options": {"heads": 2, "d_model": 8}},
    {"x": [[1.0, 0.0], [0.0, 1.0]], "weights": {m: [[1.0, 0.0], [0.0, 1.0]] for m in ("w_q", "w_k", "w_v")}},
    {"scores": [[1.0, 0.0], [0.0, 1.0]]},
]


@pytest.mark.parametrize("body", SHAPED, ids=["textbook", "random", "random-options", "custom", "given"])
def test_the_plans_input_shape_is_its_runs(client: TestClient, body: dict[str, Any]) -> None:
    """The shape the encoding brings (what the checks and budgets read instead of asking the model) is what the run
    computes: its layers and heads, and every width it gives (None where options or weights set it at the run)."""
    app: Any = client.app
    plan = make_plan(AttentionRequest(**body), app.state.settings, app.state.models, app.state.runtime)
    config = plan.run().config
    shape = plan.shape
    assert (shape.n_layers, shape.n_heads) == (config.n_layers, config.n_heads)
    for width in ("d_model", "d_head", "d_v"):
        given = getattr(shape, width)
        assert given is None or given == getattr(config, width), (width, given, config)
    assert plan.last == config.layers_computed - 1
