"""Two answers of the API compared value for value: what attnlab returns in this process against what attnlab.Client
returns for the same body (tests/test_inprocess_analyses.py), or what a notebook's kernel returned
(tests/test_notebook.py)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np

import attnlab
from attnlab.arrays import read_arrays
from server.analyses import by_name
from wire.standalone import read_embedded

# Left out of the comparison, by name: each run measures its own wall-clock time, and a long run posted without a
# name gets one chosen afresh (a uuid) by each side
UNEQUAL = {"timings_ms", "run"}


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


def comparable(answer: Any) -> Any:
    """An HTML answer (export's page) as its text less the embedded run and that run read back (it holds the run's
    timings, so its deflated bytes differ); any other answer as it is."""
    if not isinstance(answer, str):
        return answer
    embedded = read_arrays(bytearray(read_embedded(answer)))
    return {"page": re.sub(r'(id="attnlab-data"[^>]*>)[^<]*<', r"\1<", answer), "embedded": embedded}


def example_body(name: str) -> dict[str, Any]:
    """The declaration's first OpenAPI example (the body its in-process answer is compared on)."""
    analysis = by_name(name)
    assert analysis.examples, f"{name} declares no OpenAPI example to compare its answers on"
    return dict(next(iter(analysis.examples.values()))["value"])


@cache
def example_answer(name: str) -> Any:
    """attnlab's in-process answer to the declaration's first example, made once per session (the modules that
    compare it to another answer only read it)."""
    return getattr(attnlab, by_name(name).client)(**example_body(name))
