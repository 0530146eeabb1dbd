"""Every lesson (static/js/lessons.js, exercises.js) checked against the live API in node, without a page: the body
the page would send for its setup goes to a real app, and the lesson's own checking code reads that answer. A right
answer passes, a wrong one says what to look at, a toggle lesson fails as set up and passes once the learner's change
is made, and where the chapter prints an output attnlab's own line beside it carries the chapter's numbers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures import make_app_client
from tests.pagejs import copy_page_modules, run_page_js

# The body each lesson sends, from its setup, as the page builds it (effects.js: the masks clamped to the length,
# buildRequest; the claims panel's perturb body from the run's). Also the ids, asks and what each lesson hides.
BODIES_JS = """
const L = await mod('lessons.js');
const LE = await mod('lesson.js');
const R = await mod('requests.js');
const M = await mod('masks.js');
const SB = await mod('sourcebatch.js');
const models = data;
// the training lessons read the Train workspace's runs, not a body's answer: tests/js/trainlessons.test.mjs
return L.LESSONS.filter((lesson) => lesson.reads !== 'train').map((lesson) => {
  const ui = LE.lessonUi(models, lesson);
  const info = models.find((m) => m.name === ui.model);
  const texts = SB.batchTexts(ui.batch);
  const S = ui.typed ? ui.typed.m.length : ui.matrices ? ui.matrices.x.length
    : texts.length ? Math.max(...texts.map((t) => M.splitTokens(t).length)) : M.splitTokens(ui.text).length;
  const body = R.buildRequest({...ui, masks: M.clampMasks(ui.masks, S)}, info, S);
  const pos = ui.perturb.position ?? S - 1;
  const perturb = ui.perturbOn ? R.perturbRequest(body, pos, ui.perturb) : null;
  return {id: lesson.id, ask: lesson.ask, reads: lesson.reads ?? null, hides: lesson.hides ?? [],
          chapter: lesson.chapter ?? null, from1: ui.from1, body, perturb, ui};
});
"""

# The lesson's checks on a state holding the live answers (one batch item, as the page shows it).
CHECK_JS = """
const L = await mod('lessons.js');
const B = await mod('batch.js');
const lesson = L.lessonOf(data.id);
const s = {models: data.models, ui: data.ui,
           run: {result: B.itemResult(data.result, 0), status: 'ready', answered: 1, want: 1},
           panels: {perturb: {result: data.perturbed, status: data.perturbed ? 'ready' : 'idle', message: ''}}};
const live = L.liveAnswer(lesson, s);
if (lesson.ask === 'toggle') {
  return {asSetUp: L.checkAnswer(lesson, null, s), value: L.attnlabValue(lesson, s)};
}
const answers = L.sampleAnswers(lesson, live);
return {right: L.checkAnswer(lesson, answers.right, s), wrong: L.checkAnswer(lesson, answers.wrong, s),
        empty: L.checkAnswer(lesson, lesson.ask === 'cell' || lesson.ask === 'head' ? null : '', s),
        value: L.attnlabValue(lesson, s), answers};
"""

# The learner's change each toggle lesson asks for, made on the body (Masks · causal, padding x5, blocking x3 -> x1).
TOGGLES: dict[str, Any] = {
    "lab-3": lambda m: {**m, "causal": True},
    "ex-4": lambda m: {**m, "padded": [4]},
    "block-cell": lambda m: {**m, "blocked": [[2, 0]]},
}

# Where the chapter prints an output, what attnlab's own line beside it must carry, from the live answer.
CHAPTER_NUMBERS = {
    "lab-1": ["q: (1, 5, 2)", "weights: (1, 5, 5)", "contexts: (1, 5, 3)", "row sums: [1. 1. 1. 1. 1.]"],
    "lab-2": ["row sums: [1. 1. 1. 1. 1.]"],
    "lab-3": ["masked weight at query 4: [0.23 0.241 0.265 0.264 0.]", "future mass at query 2: 0"],
    "ex-3": ["row sums: [1. 1. 1. 1.]"],
    "ex-4": ["masked weight at query 4: [0.23 0.241 0.265 0.264 0.]", "future mass at query 2: 0"],
    "ex-8": ["scores: (2, 2, 5, 5) attention: (2, 2, 5, 5)", "merged output: (2, 5, 8)", "masked mass: 0"],
    "ex-10": ["earlier outputs unchanged: True"],
}

IDS = [f"ex-{i}" for i in range(1, 17)] + ["lab-1", "lab-2", "lab-3", "fig-21-4"]
TOPICS = ["padding", "most-weight", "flipped-mask", "softmax-axis", "scaling", "kv-cache", "two-heads"]
TOPICS += ["previous-token", "induction-head", "uniform", "window", "block-cell", "no-positions", "scale-factor"]
TOPICS += ["context", "empty-row"]


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_page_modules(tmp_path_factory.mktemp("page") / "js")


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    with make_app_client(models="textbook,random,given,induction", max_tokens=256) as client:
        yield client


@pytest.fixture(scope="module")
def lessons(api: TestClient, modules: Path) -> dict[str, dict[str, Any]]:
    models = api.get("/api/models").json()["models"]
    out = {x["id"]: x for x in run_page_js(modules, BODIES_JS, models)}
    for x in out.values():
        x["models"] = models
    return out


def post(api: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = api.post(path, json=body)
    assert resp.status_code == 200, (path, body, resp.text[:600])
    return resp.json()


def checked(api: TestClient, modules: Path, lesson: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    result = post(api, "/api/attention", body)
    perturbed = post(api, "/api/perturb", lesson["perturb"]) if lesson["perturb"] else None
    data = {**lesson, "result": result, "perturbed": perturbed}
    return run_page_js(modules, CHECK_JS, data)


def test_every_exercise_and_lab_step_is_a_lesson(lessons: dict[str, dict[str, Any]]) -> None:
    assert sorted(lessons) == sorted(IDS + TOPICS)
    assert all(x["from1"] for x in lessons.values())  # every lesson counts positions from 1, as the chapter


@pytest.mark.parametrize("lesson_id", IDS + TOPICS)
def test_a_lesson_checks_right_and_wrong_answers_against_the_live_answer(
    api: TestClient, modules: Path, lessons: dict[str, dict[str, Any]], lesson_id: str
) -> None:
    lesson = lessons[lesson_id]
    out = checked(api, modules, lesson, lesson["body"])
    if lesson["ask"] == "toggle":
        # as set up the page does not yet do what is asked: the check says what to look at
        assert not out["asSetUp"]["ok"] and out["asSetUp"]["text"].startswith("Not yet: "), out
        body = {**lesson["body"], "masks": TOGGLES[lesson_id](lesson["body"]["masks"])}
        out = checked(api, modules, lesson, body)
        assert out["asSetUp"] == {"ok": True, "text": "Correct."}, out
    else:
        assert out["right"] == {"ok": True, "text": "Correct."}, out
        wrong = out["wrong"]["text"]
        assert not out["wrong"]["ok"] and wrong.startswith("Not yet: ") and len(wrong) > 20, out
        assert "NaN" not in wrong and "undefined" not in wrong, out
        assert not out["empty"]["ok"], out
    value = out["value"]
    assert value and "NaN" not in value and "undefined" not in value, out
    for line in CHAPTER_NUMBERS.get(lesson_id, []):
        assert line in value, (line, value)
    if lesson_id in CHAPTER_NUMBERS:
        assert lesson["chapter"], lesson_id  # the chapter's printed output is shown beside attnlab's


def test_a_wrong_answer_fails_whatever_the_live_answer_says(
    api: TestClient, modules: Path, lessons: dict[str, dict[str, Any]]
) -> None:
    """The negative control: the answers come from the live answer, so a changed answer changes what counts. ex-2's
    count under a window of 2 is another number, and the count the unwindowed run gives no longer passes."""
    lesson = lessons["ex-2"]
    windowed_body = {**lesson["body"], "masks": {**lesson["body"]["masks"], "window": 2}}
    plain = checked(api, modules, lesson, lesson["body"])
    windowed = checked(api, modules, lesson, windowed_body)
    assert plain["answers"]["right"] != windowed["answers"]["right"]
    out = run_page_js(
        modules,
        """const L = await mod('lessons.js');
        const s = {models: data.models, ui: data.ui, run: {result: data.result, status: 'ready', answered: 1, want: 1}};
        return L.checkAnswer(L.lessonOf('ex-2'), data.answer, s);""",
        {**lesson, "result": post(api, "/api/attention", windowed_body), "answer": plain["answers"]["right"]},
    )
    assert not out["ok"] and out["text"].startswith("Not yet: "), out
