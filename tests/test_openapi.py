"""The OpenAPI document describes what the server really answers.

Each answer validates against the response class its OpenAPI 200 names (strictly, with no field the class lacks),
for every documented example and for the answers' other shapes. And schemathesis reads /openapi.json from a real
app and, for every operation, sends the documented examples, the schema's boundary values and a bounded number of
generated bodies (valid and invalid), and checks each answer: its status is documented, its JSON validates against
the documented schema for that status, and it is never a 500. Derandomized and bounded, so it sends the same
requests on every run; small limits keep each computation cheap.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from pydantic import BaseModel
from schemathesis.checks import load_all_checks, not_a_server_error
from schemathesis.core.result import Err, Ok
from schemathesis.pytest.lazy import get_all_tests
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from server.analyses import declared
from server.app import create_app
from server.config import Settings
from server.routes.runs import RowAnswer, TileAnswer
from tests.fixtures import make_app_client

# Small limits, so that a generated body that passes validation still computes in milliseconds, yet wide enough for
# every operation's documented examples (minilm's 13 tokens, the random model's 32 x 8 heads)
SETTINGS: dict[str, Any] = {
    "device": "cpu",
    "models": "all",
    "allowed_hosts": "testserver",
    "max_tokens": 16,
    "max_batch": 2,
    "max_width": 32,
    "max_heads": 8,
    "max_text_chars": 200,
    "max_body_bytes": 16_384,
    "max_result_values": 200_000,
    # the figure's example (2,000 samples x 16 keys x widths 1 to 256: 10.9 million products) passes; the default
    # widths (1 to 512, 32.7 million), which most generated bodies leave in place, are refused before any work
    "max_sweep_values": 11_000_000,
    # an ask for an unknown run's progress waits at most this long before its 404
    "max_progress_wait_ms": 20,
    # a generated training run that passes its checks trains a few steps of a tiny model
    "train_max_steps": 3,
    "train_max_parameters": 20_000,
    "train_max_tokens_per_step": 64,
}
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
EXAMPLES_PER_OPERATION = 25

# Every operation of the OpenAPI document, one test each. Named here so that collecting the suite builds no document
# (generating it takes seconds of every collection); test_every_operation_is_tested holds the list to the document.
OPERATIONS = [
    "GET /api/analyses",
    "GET /api/health",
    "GET /api/models",
    "GET /api/progress/{run}",
    "GET /api/runs/{run}/rows/{layer}/{head}/{query}",
    "GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}",
    "GET /api/samples/{name}",
    "POST /api/attention",
    "POST /api/compare",
    "POST /api/cost",
    "POST /api/decode",
    "POST /api/export",
    "POST /api/heads",
    "POST /api/heads/top",
    "POST /api/intervene",
    "POST /api/patch",
    "POST /api/patch/run",
    "POST /api/perturb",
    "POST /api/qk-attribution",
    "POST /api/runs",
    "POST /api/scale-sweep",
    "GET /api/train",
    "POST /api/train",
    "GET /api/train/{run_id}",
    "PATCH /api/train/{run_id}",
    "DELETE /api/train/{run_id}",
    "GET /api/train/{run_id}/events",
    "POST /api/train/{run_id}/cancel",
    "GET /api/train/{run_id}/export",
    "GET /api/train/experiments",
    "GET /api/train/experiments/{experiment_id}/check",
    "GET /api/train/{run_id}/model",
]


@functools.cache
def api_schema() -> BaseSchema:
    """The document schemathesis reads from a real app, built on first use (its models load in its lifespan, which
    schemathesis starts on the first request and this module stops). Its fixture-backed loader
    (schemathesis.pytest.from_fixture) would build it late too, but fails under pytest 9.2: it sets
    request.node._nodeid, which pytest's nodes no longer have."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(Settings(**SETTINGS)))
    schema.config.generation.update(max_examples=EXAMPLES_PER_OPERATION, deterministic=True)
    return schema


def check_answers(case: schemathesis.Case) -> None:
    case.call_and_validate(checks=CHECKS)


@pytest.fixture(scope="module", autouse=True)
def app_lifespan() -> Iterator[None]:
    yield
    shutdown_lifespans()


@pytest.mark.slow
def test_every_operation_is_tested() -> None:
    operations = list(api_schema().get_all_operations())
    assert all(isinstance(r, Ok) for r in operations), [r.err() for r in operations if isinstance(r, Err)]
    assert sorted(r.ok().label for r in operations if isinstance(r, Ok)) == sorted(OPERATIONS)


@pytest.mark.slow
@pytest.mark.parametrize("label", OPERATIONS)
def test_openapi_describes_every_answer(label: str) -> None:
    """The test schemathesis' pytest plugin builds for one operation (its examples, boundary values and generated
    bodies, seeded by the operation's label), built when it runs."""
    load_all_checks()
    method, path = label.split(" ", 1)
    schema = api_schema().include(method=method, path=path)
    built = list(get_all_tests(schema=schema, test_func=check_answers, settings=None, given_kwargs={}))
    assert len(built) == 1, built
    result = built[0]
    if isinstance(result, Err):  # a definition schemathesis cannot read fails here, as its plugin's test would
        result.err().as_failing_test_function()()
        return
    operation, run = result.ok()
    assert operation.label == label
    run()


# ---- the answers against their classes ------------------------------------------------------------------------------

EVERY = ["scores", "weights", "contexts", "output", "stats", "qkv"]
TEXT = "red ball king red ball king"
# Shapes of the answers the documented examples do not show (/api/attention documents two)
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/attention", {"model": "textbook"}),
    ("/api/attention", {"model": "minilm", "text": "the cat sat", "layer": 0, "include": [*EVERY, "audit"]}),
    ("/api/attention", {"model": "random", "texts": ["a b c", "d"], "masks": {"causal": True}, "include": EVERY}),
    ("/api/attention", {"model": "random", "text": "a b c", "source": {"text": "x y"}, "include": EVERY}),
    ("/api/attention", {"model": "textbook", "precision": "float16", "demo_bug": "softmax_over_queries"}),
    ("/api/attention", {"model": "textbook", "masks": {"blocked": [[0, k] for k in range(5)]}, "all_masked": "zero"}),
    ("/api/attention", {"model": "induction", "text": TEXT, "masks": {"window": 2}, "include": [*EVERY, "audit"]}),
    ("/api/attention", {"model": "random", "texts": ["a b a", "d"], "masks": {"causal": True}, "include": ["audit"]}),
    ("/api/attention", {"model": "digits", "sample": "digit-12", "include": EVERY}),
    # a batch audit past ATTNLAB_MAX_AUDIT_RUNS (16 passes: texts 0-3 of 9), with its unchecked texts and note
    (
        "/api/attention",
        {
            "model": "random",
            "texts": ["a b c d e f g h i j"] + ["w " * n + "z" for n in range(1, 9)],
            "masks": {"causal": True},
            "include": ["audit"],
        },
    ),
    ("/api/intervene", {"model": "induction", "text": TEXT, "ablate": [{"layer": 0, "head": 1, "mode": "mean"}]}),
    ("/api/perturb", {"model": "random", "text": "a b c d", "position": 1, "masks": {"padding": [True] * 3 + [False]}}),
    ("/api/cost", {"seq_len": 16, "measure": True}),
    ("/api/cost", {"seq_len": 10_000_000, "heads": 1_000_000, "batch": 1_000_000, "d_model": 1_000_000}),  # > 2^64
    ("/api/heads", {"model": "induction"}),
    ("/api/heads/top", {"model": "induction", "text": TEXT, "query": 3, "key": 1}),
]


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    """A real app with every model and the default limits, under which every documented example computes."""
    with make_app_client(models="all") as client:
        yield client


@pytest.fixture(scope="module")
def doc(api: TestClient) -> dict[str, Any]:
    """The app's OpenAPI document, fetched once for the module (the app builds it once; each answer's check reads
    it); a test that changes it changes a copy."""
    got = api.get("/openapi.json")
    assert got.status_code == 200, got.text[:300]
    return got.json()


def answer_class(doc: dict[str, Any], path: str, method: str = "post") -> type[BaseModel]:
    """The response class whose schema the operation's JSON 200 names, among the declared analyses' answers and the
    routes' own."""
    ref = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    named = {a.answer.__name__: a.answer for a in declared() if a.answer is not None}
    named |= {cls.__name__: cls for cls in (TileAnswer, RowAnswer)}
    return named[ref.rsplit("/", 1)[1]]


def undescribed_answers(doc: dict[str, Any]) -> list[str]:
    """The operations whose JSON 200 has an empty schema (`{}`: any JSON at all), which tells a client nothing."""
    found = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            content = operation["responses"].get("200", {}).get("content", {})
            if "application/json" in content and not content["application/json"].get("schema"):
                found.append(f"{method.upper()} {path}")
    return found


def test_every_json_answer_names_its_schema(doc: dict[str, Any]) -> None:
    assert undescribed_answers(doc) == []
    # the negative control: an operation answering `{}` is found
    doc = copy.deepcopy(doc)
    tile = doc["paths"]["/api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}"]["get"]
    tile["responses"]["200"]["content"]["application/json"]["schema"] = {}
    assert undescribed_answers(doc) == ["GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}"]


def test_tile_and_row_answers_validate_against_their_classes(api: TestClient, doc: dict[str, Any]) -> None:
    made = api.post("/api/runs", json={"model": "random", "text": "a b c d e f", "grid": 8})
    assert made.status_code == 200, made.text
    run = made.json()["run"]
    for path, got in (
        ("/api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}", api.get(f"/api/runs/{run}/tiles/0/0/0/0/0")),
        ("/api/runs/{run}/rows/{layer}/{head}/{query}", api.get(f"/api/runs/{run}/rows/0/0/3")),
    ):
        assert got.status_code == 200, got.text
        answer_class(doc, path, "get").model_validate_json(got.content, strict=True, extra="forbid")


def assert_answer_fits(api: TestClient, doc: dict[str, Any], path: str, body: dict[str, Any]) -> None:
    resp = api.post(path, json=body)
    assert resp.status_code == 200, (path, body, resp.text[:500])
    cls = answer_class(doc, path)
    # strict: a number where the class says string fails, and so does a field the class lacks
    cls.model_validate_json(resp.content, strict=True, extra="forbid")


@pytest.mark.slow  # every documented example computed at the default limits (the scale sweep's figure too)
def test_documented_examples_answer_in_their_schema(api: TestClient, doc: dict[str, Any]) -> None:
    tried = []
    for path, operation in doc["paths"].items():
        post = operation.get("post")
        if post is None or "application/json" not in post["responses"].get("200", {}).get("content", {}):
            continue
        for example in post["requestBody"]["content"]["application/json"].get("examples", {}).values():
            assert_answer_fits(api, doc, path, example["value"])
            tried.append(path)
    documented = {"/api/perturb", "/api/intervene", "/api/compare", "/api/decode", "/api/cost", "/api/scale-sweep"}
    documented |= {"/api/attention", "/api/heads", "/api/heads/top", "/api/runs"}
    assert set(tried) >= documented, tried


@pytest.mark.parametrize(("path", "body"), VARIANTS)
def test_answer_validates_against_its_class(
    api: TestClient, doc: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    assert_answer_fits(api, doc, path, body)


def test_answer_classes_catch_a_field_they_lack(api: TestClient, doc: dict[str, Any]) -> None:
    """The negative control: an answer with one field more than its class fails the check."""
    answer = api.post("/api/scale-sweep", json={"widths": [4], "samples": 10}).json()
    answer["widths"][0]["std_unscaled_again"] = 1.0
    with pytest.raises(ValueError, match="std_unscaled_again"):
        answer_class(doc, "/api/scale-sweep").model_validate(answer, strict=True, extra="forbid")
