"""Every declared analysis answers the same in this process as over HTTP.

One row per declaration of server/analyses: its body is the declaration's first OpenAPI example, posted by
attnlab.Client to a real app and given by name to attnlab's in-process function of the same client name, and the
two answers are compared value for value (arrays exactly, with their dtypes and shapes). A declaration with no
example, or with no in-process function, fails its row, so an analysis declared later is covered with no new test.
A refused body answers the same attnlab.ApiError both ways; a long run's tiles and rows read the same; a model given
as itself runs as its name does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import attnlab
from attnlab import analyses
from attnlab.arrays import read_arrays
from server.analyses import declared
from server.declare import Analysis
from tests.fixtures import Through
from wire.standalone import read_embedded

MODELS = "textbook,random,custom,minilm,induction"
# Left out of the comparison, by name: each run measures its own wall-clock time, and a long run posted without a
# name gets one chosen afresh (a uuid) by each side
UNEQUAL = {"timings_ms", "run"}


@pytest.fixture(scope="module")
def api(shared_client: Callable[..., TestClient]) -> Iterator[attnlab.Client]:
    with attnlab.Client("http://testserver", transport=Through(shared_client(models=MODELS))) as client:
        yield client


def body_of(analysis: Analysis) -> dict[str, Any]:
    assert analysis.examples, f"{analysis.name} declares no OpenAPI example to compare its answers on"
    return dict(next(iter(analysis.examples.values()))["value"])


def same(here: Any, there: Any, where: str = "") -> None:
    """Equal value for value: the same keys (less UNEQUAL's), list lengths and plain values, and arrays of the same
    dtype and shape, equal exactly."""
    if isinstance(there, np.ndarray):
        assert isinstance(here, np.ndarray), f"{where}: {type(here).__name__} where the client has an array"
        assert (here.dtype, here.shape) == (there.dtype, there.shape), (where, here.dtype, there.dtype)
        assert np.array_equal(here, there), f"{where}: the arrays differ"
    elif isinstance(there, dict):
        assert isinstance(here, dict), f"{where}: {type(here).__name__} where the client has a dict"
        assert set(here) - UNEQUAL == set(there) - UNEQUAL, (where, sorted(set(here) ^ set(there)))
        for key in set(there) - UNEQUAL:
            same(here[key], there[key], f"{where}.{key}")
    elif isinstance(there, list):
        assert isinstance(here, list) and len(here) == len(there), (where, type(here).__name__)
        for i, (a, b) in enumerate(zip(here, there, strict=True)):
            same(a, b, f"{where}.{i}")
    else:
        assert type(here) is type(there) and here == there, (where, here, there)


@pytest.mark.parametrize("analysis", declared(), ids=lambda a: a.name)
def test_in_process_answers_as_the_api(analysis: Analysis, api: attnlab.Client) -> None:
    body = body_of(analysis)
    function = analyses.functions().get(analysis.client)
    assert function is not None, f"attnlab has no in-process {analysis.client}"
    assert getattr(attnlab, analysis.client) is function and analysis.client in dir(attnlab)
    assert f"attnlab.{analysis.client}`" in (attnlab.__doc__ or ""), "the module's docstring names it"
    same(comparable(function(**body)), comparable(api.call(analysis.name, **body)), analysis.name)


def comparable(answer: Any) -> Any:
    """An HTML answer (export's page) as its text less the embedded run and that run read back (it holds the run's
    timings, so its deflated bytes differ); any other answer as it is."""
    if not isinstance(answer, str):
        return answer
    embedded = read_arrays(bytearray(read_embedded(answer)))
    return {"page": re.sub(r'(id="attnlab-data"[^>]*>)[^<]*<', r"\1<", answer), "embedded": embedded}


def test_same_tells_one_value_changed(api: attnlab.Client) -> None:
    """The negative control: an answer with one weight changed, or a key more, does not compare equal."""
    body = body_of(analyses_by_name()["intervene"])
    here, there = attnlab.intervene(**body), api.intervene(**body)
    here["after"]["layers"][0]["heads"][0]["weights"][1, 0] += 1e-7
    with pytest.raises(AssertionError, match="arrays differ"):
        same(here, there)
    with pytest.raises(AssertionError):
        same({**there, "extra": 1}, there)


def analyses_by_name() -> dict[str, Analysis]:
    return {a.name: a for a in declared()}


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
    body = body_of(analyses_by_name()["runs"])
    here, there = attnlab.runs(**body, run="tiles-here"), api.runs(**body, run="tiles-there")
    assert (here["run"], there["run"]) == ("tiles-here", "tiles-there")
    same(attnlab.tile(here, 0, 2, 0, 0, 0, agg="mean"), api.tile("tiles-there", 0, 2, 0, 0, 0, agg="mean"))
    same(attnlab.row("tiles-here", 0, 3, 5), api.row("tiles-there", 0, 3, 5))
    for call in (lambda: attnlab.tile("tiles-here", 0, 99, 0, 0, 0), lambda: attnlab.row("no-such-run", 0, 0, 0)):
        with pytest.raises(attnlab.ApiError) as err:
            call()
        assert (err.value.status, err.value.field) in ((422, "head"), (404, "run"))


def test_a_model_given_as_itself_runs_as_its_name_and_fills_each_body() -> None:
    example = body_of(analyses_by_name()["patch"])
    by_name = attnlab.patch(**example)
    induction = attnlab.load.__globals__["loaded_models"]("induction")["induction"]  # the object the name runs
    clean, corrupted = ({k: v for k, v in example[side].items() if k != "model"} for side in ("clean", "corrupted"))
    given = {**example, "clean": clean, "corrupted": corrupted}
    same(attnlab.patch(induction, **given), by_name)
    with pytest.raises(attnlab.ApiError) as err:
        attnlab.patch("train:ab12@3", **given)
    assert (err.value.status, err.value.code, err.value.field) == (422, "unknown_model", "clean.model")
    assert "training run's snapshot" in err.value.message
