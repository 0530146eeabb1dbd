"""The analysis declarations (server/declare.py, server/analyses/): GET /api/analyses lists them, the routes honour
app.dependency_overrides, and every JSON answer is checked against its declared answer type."""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

import attnlab
import server.analyses
import server.analyses.attention as attention_analysis
import server.analyses.cost as cost_analysis
from engine.analysis.cost import Cost
from engine.stats import HeadStats
from server.analyses import declared
from server.app import create_app
from server.config import Settings
from server.declare import Analysis, Context, Limit, answer_of
from server.deps import get_settings
from server.errors import ApiError
from server.schemas import HeadStatsOut, Strict
from tests.fixtures import Through
from tests.helpers import assert_error
from wire.arrays import STREAM_MEDIA_TYPE, StreamError, assemble, read_frames

MakeClient = Callable[..., AbstractContextManager[TestClient]]
COMPUTING = {
    "attention", "export", "heads", "heads/top", "perturb", "intervene", "compare", "decode", "cost", "scale-sweep",
    "patch", "patch/run", "qk-attribution", "runs",
}  # fmt: skip


def test_analyses_lists_every_declaration(client: TestClient) -> None:
    body = client.get("/api/analyses").json()
    entries = body["analyses"]
    assert [e["name"] for e in entries] == [a.name for a in declared()]
    assert {e["name"] for e in entries} == COMPUTING
    for e in entries:
        assert e["path"] == "/api/" + e["name"]
        assert set(e) == {"name", "path", "client", "panel", "summary", "forms"}
        assert e["forms"] == ["html"] or set(e["forms"]) <= {"json", "arrays", "npz", "stream"}
    by_name = {e["name"]: e for e in entries}
    assert by_name["scale-sweep"]["client"] == "scale_sweep" and by_name["scale-sweep"]["panel"] == "sweep"
    assert by_name["heads/top"]["client"] == "top_heads"
    assert (
        by_name["attention"]["forms"] == ["json", "arrays", "npz", "stream"] and by_name["attention"]["panel"] is None
    )
    assert [n for n, e in by_name.items() if "stream" in e["forms"]] == ["attention"]


def test_every_computing_route_is_declared(client: TestClient) -> None:
    """The OpenAPI document's POST routes are the declared ones, each with its JSON 200 (export: HTML), but for the
    training lab's runs: a resource (server/routes/train.py) whose POSTs start and cancel a run, computing nothing
    in the request itself."""
    doc = client.get("/openapi.json").json()
    training = {"/api/train", "/api/train/{run_id}/cancel"}
    assert training <= set(doc["paths"])
    posts = {path for path, op in doc["paths"].items() if "post" in op} - training
    assert posts == {"/api/" + n for n in COMPUTING}
    for path in posts - {"/api/export"}:
        schema = doc["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert "$ref" in schema, (path, schema)


def test_route_uses_an_overridden_dependency(make_client: MakeClient, make_settings: Callable[..., Settings]) -> None:
    """app.dependency_overrides reaches the value a declared route runs with: here a lower sweep limit."""
    small = make_settings(max_sweep_values=100)
    body = {"widths": [4], "samples": 10, "keys": 4}  # 160 q.k products
    with make_client() as client:
        assert client.post("/api/scale-sweep", json=body).status_code == 200
        client.app.dependency_overrides[get_settings] = lambda: small  # type: ignore[attr-defined]
        resp = client.post("/api/scale-sweep", json=body)
    assert_error(resp, 422, "widths", "limit 100")


def bad_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's cost answering d_head as a string: the answer no longer fits CostResult."""
    real = cost_analysis.cost
    monkeypatch.setattr(cost_analysis, "cost", lambda q: dataclasses.replace(real(q), d_head="sixty-four"))


def test_an_answer_that_misfits_its_type_is_a_500_naming_the_field(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_cost(monkeypatch)
    with make_client(check_answers=True) as client:
        resp = client.post("/api/cost", json={"seq_len": 16})
    error = assert_error(resp, 500, "d_head", "CostResult")
    assert error["code"] == "answer_mismatch"


def test_answers_go_unchecked_with_the_setting_off(make_client: MakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: the same misfit answer goes out as it is when ATTNLAB_CHECK_ANSWERS is off."""
    bad_cost(monkeypatch)
    with make_client(check_answers=False) as client:
        resp = client.post("/api/cost", json={"seq_len": 16})
    assert resp.status_code == 200 and resp.json()["d_head"] == "sixty-four"


@pytest.mark.parametrize("accept", ["application/json", "application/vnd.attnlab.arrays", "application/x-npz"])
def test_every_form_of_an_answer_is_checked(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, accept: str
) -> None:
    """An /api/attention answer with a field AttentionResult lacks is a 500 in JSON, the arrays form and .npz."""
    real = attention_analysis.attention_body
    monkeypatch.setattr(attention_analysis, "attention_body", lambda *a: {**real(*a), "surplus": 1})
    with make_client() as client:
        resp = client.post("/api/attention", json={"model": "textbook"}, headers={"accept": accept})
    assert_error(resp, 500, "surplus", "AttentionResult")


def test_a_streamed_answer_is_checked_too_and_ends_with_an_error_frame(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streamed form's frames are checked as one answer before its tail goes out: a layer with a field that
    LayerResult lacks ends the stream with an error frame (its 200 was sent with the first layer)."""
    real = attention_analysis.layer_bodies
    monkeypatch.setattr(attention_analysis, "layer_bodies", lambda *a: ({**b, "surplus": 1} for b in real(*a)))
    body = {"model": "induction", "text": "red ball king river frog red ball king"}
    with make_client(models="induction") as client:
        resp = client.post("/api/attention", json=body, headers={"accept": STREAM_MEDIA_TYPE})
        assert resp.status_code == 200
        frames = list(read_frames([resp.content]))
        assert [k for k, _ in frames] == ["head", "layer", "error"]
        error = frames[-1][1]
        assert error["status"] == 500 and error["code"] == "answer_mismatch" and "surplus" in error["message"]
        with pytest.raises(StreamError, match="surplus"):
            assemble(frames)
        # without the surplus field the same stream checks clean and ends with its tail
        monkeypatch.setattr(attention_analysis, "layer_bodies", real)
        frames = list(
            read_frames([client.post("/api/attention", json=body, headers={"accept": STREAM_MEDIA_TYPE}).content])
        )
        assert [k for k, _ in frames] == ["head", "layer", "tail"]


def test_answer_of_derives_the_engine_fields() -> None:
    derived = answer_of(Cost, "Derived", note=(str, ...), d_head=Field(description="width of one head"))
    assert list(derived.model_fields)[: len(dataclasses.fields(Cost))] == [f.name for f in dataclasses.fields(Cost)]
    assert derived.model_fields["d_head"].description == "width of one head"
    with pytest.raises(TypeError, match="no fields"):
        answer_of(Cost, "Wrong", not_a_field=Field(description="x"))


def test_head_stats_answer_matches_the_engine() -> None:
    """HeadStatsOut (its descriptions are the API's) holds the engine's HeadStats field for field, type for type."""
    engine = typing.get_type_hints(HeadStats)
    answer: dict[str, Any] = {name: f.annotation for name, f in HeadStatsOut.model_fields.items()}
    assert answer == engine


class WordsRequest(Strict):
    words: list[str] = Field(max_length=100)


class WordsResult(BaseModel):
    count: int
    longest: str | None


def word_count(req: WordsRequest, ctx: Context) -> dict[str, Any]:
    """How many words, and the longest."""
    limit = ctx.settings.limit("max_words")
    if len(req.words) > limit:
        raise ApiError(422, "too_large", f"{len(req.words)} words, limit {limit} (ATTNLAB_MAX_WORDS)", "words")
    return {"count": len(req.words), "longest": max(req.words, key=len) if req.words else None}


WORD_COUNT = Analysis(
    name="word-count",
    request=WordsRequest,
    answer=WordsResult,
    run=word_count,
    summary="Count the words",
    limits=(Limit("max_words", 3, "words in one /api/word-count"),),
)


def test_one_declaration_is_a_route_a_listing_an_openapi_answer_and_a_client_method(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An analysis added as one declaration (and nothing else) is served, documented, listed and callable."""
    real = declared()
    monkeypatch.setattr(server.analyses, "declared", lambda: (*real, WORD_COUNT))
    with make_client() as client:
        assert client.post("/api/word-count", json={"words": ["a", "bcd"]}).json() == {"count": 2, "longest": "bcd"}
        assert_error(client.post("/api/word-count", json={"words": "a"}), 422, "words")
        doc = client.get("/openapi.json").json()
        answer = doc["paths"]["/api/word-count"]["post"]["responses"]["200"]["content"]["application/json"]
        assert answer["schema"] == {"$ref": "#/components/schemas/WordsResult"}
        assert doc["paths"]["/api/word-count"]["post"]["description"] == "How many words, and the longest."
        listed = client.get("/api/analyses").json()["analyses"]
        assert listed[-1] == {
            "name": "word-count", "path": "/api/word-count", "client": "word_count", "panel": None,
            "summary": "Count the words", "forms": ["json"],
        }  # fmt: skip
        with attnlab.Client("http://testserver", transport=Through(client)) as api:
            assert api.word_count(words=["x", "yy", "z"]) == {"count": 3, "longest": "yy"}
            assert "word_count" in dir(api)


def test_a_declared_limit_is_a_setting_reported_and_enforced(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit in an analysis's declaration is read from its ATTNLAB_ variable (else its default), listed by
    GET /api/health and enforced, with no line of server/config.py or the health route written for it."""
    real = declared()
    monkeypatch.setattr(server.analyses, "declared", lambda: (*real, WORD_COUNT))
    four = {"words": ["a", "b", "c", "d"]}
    with make_client() as client:
        assert client.get("/api/health").json()["limits"]["max_words"] == 3
        assert_error(client.post("/api/word-count", json=four), 422, "words", "limit 3")
    monkeypatch.setenv("ATTNLAB_MAX_WORDS", "5")
    with make_client() as client:
        assert client.get("/api/health").json()["limits"]["max_words"] == 5
        assert client.post("/api/word-count", json=four).json()["count"] == 4
    assert Settings(**{"max_words": 2}).limit("max_words") == 2  # given by name, as for every other setting
    monkeypatch.setenv("ATTNLAB_MAX_WORDS", "2")
    assert create_app(Settings(**{"max_words": 4})).state.settings.limit("max_words") == 4  # the name over the variable
    for bad, said in (
        ("many", "ATTNLAB_MAX_WORDS is 'many': give a whole number"),
        ("0", "ATTNLAB_MAX_WORDS is 0: at least 1"),
    ):
        monkeypatch.setenv("ATTNLAB_MAX_WORDS", bad)
        settings = Settings()  # read without any analysis: the declarations are checked when an app is made
        with pytest.raises(ValueError, match=re.escape(said)):
            create_app(settings)
