"""The Train workspace's server side (server/routes/train_experiments.py): the ready-made experiments as JSON, a
claim checked over kept runs, and a snapshot described as a model for the page's other workspaces. One in-process
app; the runs are tiny and followed by their own events to the end (no waiting a fixed time)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.trainlab.experiments import EXPERIMENTS
from server.app import create_app
from server.config import Settings
from tests.helpers import assert_error
from tests.pagejs import copy_page_modules, run_page_js

# The page's no-causal lesson (static/js/trainlessons.js) on runs as the Train workspace holds them (trainmeasures.js).
LESSON_JS = """
const L = await mod('lessons.js');
const lesson = L.lessonOf('train-no-causal');
const s = {trained: {experiment: 'no-causal', runs: data}};
const live = L.liveAnswer(lesson, s);
const {right, wrong} = L.sampleAnswers(lesson, live);
return {want: lesson.expected(live), right: L.checkAnswer(lesson, right, s), wrong: L.checkAnswer(lesson, wrong, s)};
"""

TINY = {"task": "copy", "layers": 1, "heads": 2, "width": 16, "positions": 8, "batch": 4, "warmup": 0, "steps": 4}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir: Path = tmp_path_factory.mktemp("train-experiments")
    settings = Settings(device="cpu", models="textbook", allowed_hosts="*", data_dir=data_dir)
    with TestClient(create_app(settings)) as c:
        yield c


def finished_run(client: TestClient, **spec: Any) -> str:
    resp = client.post("/api/train", json={**TINY, **spec})
    assert resp.status_code == 202, resp.text
    run_id = str(resp.json()["id"])
    with client.stream("GET", f"/api/train/{run_id}/events") as events:
        for line in events.iter_lines():
            if line.startswith("event: end"):
                break
    return run_id


@pytest.fixture(scope="module")
def runs(client: TestClient) -> tuple[str, str]:
    """Two finished runs: masked and unmasked, as the no-causal experiment compares."""
    return finished_run(client), finished_run(client, causal=False)


def test_experiments_are_listed_with_their_specs_and_what_to_look_at(client: TestClient) -> None:
    resp = client.get("/api/train/experiments")
    assert resp.status_code == 200
    listed = resp.json()["experiments"]
    assert [e["id"] for e in listed] == [e.id for e in EXPERIMENTS]
    for out, e in zip(listed, EXPERIMENTS, strict=True):
        assert out["title"] == e.title and out["look_at"] == e.look_at and out["measure"] == e.measure
        assert len(out["specs"]) == len(out["labels"]) == len(e.specs)
        # each spec is a TrainSpec's every field: a body POST /api/train takes as it is
        assert out["specs"] == [dataclasses.asdict(s) for s in e.specs]


def test_a_claim_is_checked_over_kept_runs(client: TestClient, runs: tuple[str, str]) -> None:
    masked, unmasked = runs
    resp = client.get("/api/train/experiments/no-causal/check", params={"runs": f"{masked},{unmasked}"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["id"] == "no-causal" and body["measure"] == "held_out_loss"
    assert isinstance(body["held"], bool) and body["steps"] == [4, 4]
    m = [client.get(f"/api/train/{r}").json()["snapshots"][-1]["measures"] for r in runs]
    assert body["figure"] == pytest.approx(m[1]["held_out_loss"] / m[0]["held_out_loss"])


@pytest.mark.parametrize(
    ("path", "params", "status", "field"),
    [
        ("/api/train/experiments/nope/check", {"runs": "0"}, 404, "id"),
        ("/api/train/experiments/no-causal/check", {"runs": "0"}, 422, "runs"),
        ("/api/train/experiments/no-causal/check", {"runs": "x,y"}, 422, "runs"),
        ("/api/train/experiments/no-causal/check", {"runs": "ffff,fffe"}, 404, "run_id"),
        ("/api/train/ffff/model", {"step": "0"}, 404, "run_id"),
        ("/api/train/ffff/model", {"step": "-1"}, 422, "step"),
    ],
)
def test_bad_checks_and_models_are_refused(
    client: TestClient, path: str, params: dict[str, str], status: int, field: str
) -> None:
    assert_error(client.get(path, params=params), status, field=field)


def test_a_snapshot_is_described_as_a_model(client: TestClient, runs: tuple[str, str]) -> None:
    run_id = runs[0]
    resp = client.get(f"/api/train/{run_id}/model", params={"step": 4})
    assert resp.status_code == 200, resp.text
    model = resp.json()
    assert model["name"] == f"train:{run_id}@4" and model["layers"] == 1 and model["heads"] == 2
    assert_error(client.get(f"/api/train/{run_id}/model", params={"step": 3}), 422, field="model")


def test_the_no_causal_lesson_reads_the_figure_its_claim_reads(
    client: TestClient, runs: tuple[str, str], tmp_path: Path
) -> None:
    """The lesson's answer from the runs' measures as the server sends them is the claim check's figure's."""
    kept = [client.get(f"/api/train/{r}").json() for r in runs]
    held = [
        {
            "status": k["status"],
            "steps": [s["step"] for s in k["snapshots"]],
            "measures": [s["measures"] for s in k["snapshots"]],
        }
        for k in kept
    ]
    out = run_page_js(copy_page_modules(tmp_path / "js"), LESSON_JS, held)
    figure = client.get("/api/train/experiments/no-causal/check", params={"runs": ",".join(runs)}).json()["figure"]
    assert out["want"] == ("under-half" if figure < 0.5 else "lower" if figure < 1 else "not-lower")
    assert out["right"] == {"ok": True, "text": "Correct."}
    assert not out["wrong"]["ok"] and "held-out line of the Loss curve" in out["wrong"]["text"]
