"""Every declared analysis answers the same in this process as over HTTP.

One row per declaration of server/analyses: its body is the declaration's first OpenAPI example, posted by
attnlab.Client to a real app and given by name to attnlab's in-process function of the same client name, and the
two answers are compared value for value (arrays exactly, with their dtypes and shapes). A declaration with no
example, or with no in-process function, fails its row, so an analysis declared later is covered with no new test.
A refused body answers the same attnlab.ApiError both ways; a long run's tiles and rows read the same; a model given
as itself runs as its name does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import attnlab
from attnlab import analyses
from server.analyses import by_name, declared
from server.declare import Analysis
from tests.answers import comparable, example_answer, example_body, same
from tests.fixtures import Through

MODELS = "textbook,random,custom,minilm,induction"


@pytest.fixture(scope="module")
def api(shared_client: Callable[..., TestClient]) -> Iterator[attnlab.Client]:
    with attnlab.Client("http://testserver", transport=Through(shared_client(models=MODELS))) as client:
        yield client


@pytest.mark.parametrize("analysis", declared(), ids=lambda a: a.name)
def test_in_process_answers_as_the_api(analysis: Analysis, api: attnlab.Client) -> None:
    body = example_body(analysis.name)
    function = analyses.functions().get(analysis.client)
    assert function is not None, f"attnlab has no in-process {analysis.client}"
    assert getattr(attnlab, analysis.client) is function and analysis.client in dir(attnlab)
    assert f"attnlab.{analysis.client}`" in (attnlab.__doc__ or ""), "the module's docstring names it"
    here = example_answer(analysis.name)
    same(comparable(here), comparable(api.call(analysis.name, **body)), analysis.name)


@pytest.mark.parametrize(("name", "example"), [("decode", "generate")])
def test_other_examples_answer_as_the_api(name: str, example: str, api: attnlab.Client) -> None:
    """Examples past the first that show what the first does not: decoding with generation."""
    body = by_name(name).examples[example]["value"]
    here = getattr(attnlab, by_name(name).client)(**body)
    assert here["generated"], "the example generates tokens"
    same(here, api.call(name, **body), name)


def test_same_tells_one_value_changed(api: attnlab.Client) -> None:
    """The negative control: an answer with one weight changed, or a key more, does not compare equal."""
    body = example_body("intervene")
    here, there = attnlab.intervene(**body), api.intervene(**body)
    here["after"]["layers"][0]["heads"][0]["weights"][1, 0] += 1e-7
    with pytest.raises(AssertionError, match="arrays differ"):
        same(here, there)
    with pytest.raises(AssertionError):
        same({**there, "extra": 1}, there)


REFUSED = [
    ("perturb", {"model": "random", "text": "a b", "position": 5}),  # the engine's refusal, naming position
    ("scale_sweep", {"widths": [0]}),  # the body's validation, naming widths.0
    ("compare", {"a": {"model": "random", "text": "a b"}, "b": {"model": "random", "text": "a b", "layer": 0}}),
    ("cost", {"model": "random"}),  # a field the request does not take
]


@pytest.mark.parametrize(("name", "body"), REFUSED, ids=[r[0] for r in REFUSED])
def test_in_process_refuses_as_the_api(name: str, body: dict[str, Any], api: attnlab.Client) -> None:
    with pytest.raises(attnlab.ApiError) as over_http:
        api.call(name, **body)
    with pytest.raises(attnlab.ApiError) as here:
        getattr(attnlab, name)(**body)
    theirs, mine = over_http.value, here.value
    said = (mine.status, mine.code, mine.field, mine.message, mine.details)
    assert said == (theirs.status, theirs.code, theirs.field, theirs.message, theirs.details)


def test_a_long_runs_tiles_and_rows_read_the_same(api: attnlab.Client) -> None:
    body = example_body("runs")
    here, there = attnlab.runs(**body, run="tiles-here"), api.runs(**body, run="tiles-there")
    assert (here["run"], there["run"]) == ("tiles-here", "tiles-there")
    same(attnlab.tile(here, 0, 2, 0, 0, 0, agg="mean"), api.tile("tiles-there", 0, 2, 0, 0, 0, agg="mean"))
    same(attnlab.row("tiles-here", 0, 3, 5), api.row("tiles-there", 0, 3, 5))
    for call in (lambda: attnlab.tile("tiles-here", 0, 99, 0, 0, 0), lambda: attnlab.row("no-such-run", 0, 0, 0)):
        with pytest.raises(attnlab.ApiError) as err:
            call()
        assert (err.value.status, err.value.field) in ((422, "head"), (404, "run"))


def test_a_model_given_as_itself_runs_as_its_name_and_fills_each_body() -> None:
    example = example_body("patch")
    by_name = attnlab.patch(**example)
    induction = attnlab.load.__globals__["loaded_models"]("induction")["induction"]  # the object the name runs
    clean, corrupted = ({k: v for k, v in example[side].items() if k != "model"} for side in ("clean", "corrupted"))
    given = {**example, "clean": clean, "corrupted": corrupted}
    same(attnlab.patch(induction, **given), by_name)
    with pytest.raises(attnlab.ApiError) as err:
        attnlab.patch("train:ab12@3", **given)
    assert (err.value.status, err.value.code, err.value.field) == (422, "unknown_model", "clean.model")
    assert "training run's snapshot" in err.value.message


# What only a caller in this process can send (Python objects), and a long run's path parameters: each a 4xx naming
# the field, never an exception of another kind
HOSTILE: list[tuple[Callable[[], Any], int, str]] = [
    (lambda: attnlab.intervene(object(), text="a b"), 422, "model"),  # a model of no kind attnlab reads
    (lambda: attnlab.perturb("random", text="a b", position=object()), 422, "body"),  # not a JSON value
    (lambda: attnlab.perturb("random", text="a b", position=float("nan")), 422, "position"),
    (lambda: attnlab.heads("random", text="a b", run="../../etc"), 422, "x-attnlab-run"),
    (lambda: attnlab.tile("tiles-here", 0, 0, 0, 0, 0, agg="sum"), 422, "agg"),
    (lambda: attnlab.tile("tiles-here", True, 0, 0, 0, 0), 422, "layer"),
    (lambda: attnlab.tile("tiles-here", 0, 0, 2**70, 0, 0), 422, "z"),
    (lambda: attnlab.row("../runs", 0, 0, 0), 422, "run"),
    (lambda: attnlab.row({"run": None}, 0, 0, 0), 422, "run"),
]


@pytest.mark.parametrize(("call", "status", "field"), HOSTILE)
def test_in_process_refuses_what_no_body_could_hold(call: Callable[[], Any], status: int, field: str) -> None:
    with pytest.raises(attnlab.ApiError) as err:
        call()
    assert (err.value.status, err.value.field) == (status, field), err.value
