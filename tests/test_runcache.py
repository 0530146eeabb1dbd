"""One action, one forward: the run cache serves repeated passes within its bytes and answers identically."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.analysis.heads import DEFAULT_SEGMENT_LENGTHS

MakeClient = Callable[..., AbstractContextManager[TestClient]]


def counting(c: TestClient, model: str) -> list[int]:
    """Count the model's forward passes from now on."""
    runs = [0]
    m = c.app.state.models[model]  # type: ignore[attr-defined]
    original = m.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs[0] += 1
        return original(*args, **kwargs)

    m.run = counted
    return runs


def metric(c: TestClient, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$" if labels else rf"^{re.escape(name)} (\S+)$"
    found = re.search(pattern, c.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def trained(make_client: MakeClient) -> Iterator[TestClient]:
    with make_client(models="textbook,random,custom,induction") as c:
        yield c


BODY = {"model": "induction", "text": "red ball king river frog clock red ball king river frog clock"}


def test_a_repeated_request_is_one_forward_and_the_same_answer(trained: TestClient) -> None:
    runs = counting(trained, "induction")
    first = trained.post("/api/attention", json=BODY)
    again = trained.post("/api/attention", json=BODY)
    assert first.status_code == 200 and again.content == first.content
    assert runs[0] == 1
    one_layer = trained.post("/api/attention", json={**BODY, "layer": 1}).json()  # served by the pass through all
    assert runs[0] == 1
    assert one_layer["layers"][0]["heads"][2]["weights"] == first.json()["layers"][1]["heads"][2]["weights"]
    other = trained.post("/api/attention", json={**BODY, "masks": {"causal": True, "padded": [5]}})
    assert other.status_code == 200 and other.content != first.content
    assert runs[0] == 2  # other masks: another pass
    assert metric(trained, "attnlab_run_cache_total", result="hit") >= 2


def test_one_page_action_runs_the_model_on_its_input_once(trained: TestClient) -> None:
    """What the page sends after one change: the views, the head types and the top heads for a pair."""
    runs = counting(trained, "induction")

    def action(text: str) -> None:
        body = {**BODY, "text": text}
        assert trained.post("/api/attention", json=body).status_code == 200
        assert trained.post("/api/heads/top", json={**body, "query": 8, "key": 2}).status_code == 200
        assert trained.post("/api/heads", json=body).status_code == 200

    probes = len(DEFAULT_SEGMENT_LENGTHS)
    action(BODY["text"])
    assert runs[0] == 1 + probes  # the input once, and each induction probe once (the same for every input)
    action("moon star tree moon star tree moon star tree")
    assert runs[0] == 2 + probes  # the new input once; the probes are kept
    action(BODY["text"])
    assert runs[0] == 2 + probes  # back to the first input: nothing to run


def test_interventions_are_not_kept(trained: TestClient) -> None:
    runs = counting(trained, "induction")
    ablate = {**BODY, "ablate": [{"layer": 1, "head": 3, "mode": "zero"}]}
    for _ in range(2):
        assert trained.post("/api/intervene", json=ablate).status_code == 200
    ablated_runs = runs[0]
    assert ablated_runs >= 2  # each intervention runs its ablated pass again
    bug = {**BODY, "demo_bug": "flipped_mask", "all_masked": "zero"}
    trained.post("/api/attention", json=bug)
    wrong = trained.post("/api/attention", json=bug).json()
    right = trained.post("/api/attention", json={**BODY, "all_masked": "zero"}).json()
    assert wrong["demo_bug"] is not None and right["demo_bug"] is None  # a classic bug is its own key
    assert wrong["layers"][0]["heads"][0]["weights"] != right["layers"][0]["heads"][0]["weights"]


def test_the_cache_stays_within_its_bytes(make_client: MakeClient) -> None:
    bound = 600_000
    with make_client(cache_bytes=bound) as c:
        cache = c.app.state.runtime.runs  # type: ignore[attr-defined]
        runs = counting(c, "random")
        for n in range(24):  # each run holds about 200-300 kB
            body = {"model": "random", "text": " ".join(f"w{i}" for i in range(40 + n)), "options": {"heads": 4}}
            assert c.post("/api/attention", json=body).status_code == 200
            assert 0 < cache.nbytes <= bound
            assert metric(c, "attnlab_run_cache_bytes") == cache.nbytes
        assert 1 <= len(cache) < 24 and runs[0] == 24
        last = {"model": "random", "text": " ".join(f"w{i}" for i in range(40 + 23)), "options": {"heads": 4}}
        c.post("/api/attention", json=last)
        assert runs[0] == 24  # the most recent is still kept
        first = {"model": "random", "text": " ".join(f"w{i}" for i in range(40)), "options": {"heads": 4}}
        c.post("/api/attention", json=first)
        assert runs[0] == 25  # the oldest went first
        huge = {"model": "random", "text": " ".join(["w"] * 200), "options": {"heads": 16}}
        c.post("/api/attention", json=huge)
        assert cache.nbytes <= bound  # larger than the whole cache: not kept


def test_a_zero_byte_cache_keeps_nothing(make_client: MakeClient) -> None:
    with make_client(cache_bytes=0) as c:
        runs = counting(c, "random")
        for _ in range(2):
            assert c.post("/api/attention", json={"model": "random", "text": "a b c"}).status_code == 200
        assert runs[0] == 2 and len(c.app.state.runtime.runs) == 0  # type: ignore[attr-defined]
