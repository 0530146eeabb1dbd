"""Lessons (/?lesson=ID): each sets up its view, asks, checks the learner's answer against the live answer and says
"correct" or what to look at; the list links every lesson. Real page, real `attnlab serve`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle

pytestmark = pytest.mark.browser

LESSONS_JS = """async () => (await import('/static/js/lessons.js')).LESSONS.map((l) =>
  ({id: l.id, prompt: l.prompt, ask: l.ask, setup: typeof l.setup === 'string' ? l.setup : null,
    hides: l.hides || [], reads: l.reads || null}))"""
HIDES_JS = "async () => (await import('/static/js/giveaway.js')).GIVEAWAYS"
# The Train workspace shown, a training lesson's experiment outlined (its id without "train-") and nothing else.
TRAIN_LESSON_JS = """(id) => !document.querySelector('[data-workspace=train]').hidden
    && new URLSearchParams(location.search).get('lesson') === id
    && [...document.querySelectorAll('[data-experiment][data-asked]')].map((b) => b.dataset.experiment).join()
       === id.slice('train-'.length)"""
# For each element of `sel`: the names the view root around it marks kept hidden (data-giveaway), "" when none does.
GIVEAWAY_ROOTS_JS = """(sel) => [...document.querySelectorAll(sel)].map((el) => {
    const root = el.closest('[data-giveaway]');
    return root && (root.dataset.view || root.dataset.panel) ? root.dataset.giveaway : '';
})"""


def feedback(page: Page) -> str:
    return page.get_by_test_id("lesson-feedback").inner_text()


def check(page: Page) -> str:
    """Press Check: the panel redraws its feedback in the click's own handler."""
    page.get_by_test_id("lesson-check").click()
    return feedback(page)


def attention(base: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{base}/api/attention", json={"include": ["weights"], **body}, timeout=30)
    r.raise_for_status()
    return r.json()  # type: ignore[no-any-return]


def test_exercise_2_wrong_then_right(open_page: Callable[..., Page], page_log: PageLog, live_server: str) -> None:
    page = open_page("?lesson=ex-2")
    expect(page.get_by_test_id("lesson-prompt")).to_contain_text("Six positions")
    body = page_log.attention_requests()[-1]
    assert body["text"] == "a b c d e f" and body["masks"]["causal"] is True
    assert attention(live_server, body)["pairs"]["eligible"] == 21  # the server's own count, not the page's
    assert "lesson=ex-2" in page.url
    # the mask summary would print the count: hidden until the answer is checked; the grids count from 1
    expect(page.get_by_test_id("pair-counts")).to_be_hidden()
    expect(page.locator("#eligibility thead th").last).to_have_text("6")
    page.get_by_test_id("lesson-answer").fill("20")
    wrong = check(page)
    assert "correct" not in wrong.lower() and "eligibility grid" in wrong
    expect(page.get_by_test_id("lesson-compare")).to_be_hidden()
    page.get_by_test_id("lesson-answer").fill("36")
    assert "every pair" in check(page)
    page.get_by_test_id("lesson-answer").fill("21")
    assert check(page).lower().startswith("correct")
    expect(page.get_by_test_id("lesson-chapter")).to_have_text("no printed output for this task")
    expect(page.get_by_test_id("lesson-attnlab")).to_contain_text("21 eligible pairs of 36")
    expect(page.get_by_test_id("pair-counts")).to_contain_text("21 of 36")
    assert not page_log.console_errors and not page_log.page_errors


def test_a_cell_lesson_is_answered_by_clicking_cells_without_blocking_them(
    open_page: Callable[..., Page], page_log: PageLog, live_server: str
) -> None:
    page = open_page("?lesson=most-weight")
    body = page_log.attention_requests()[-1]
    row = attention(live_server, body)["layers"][0]["heads"][0]["weights"][3]
    best = max(range(4), key=lambda k: row[k])
    other = next(k for k in range(4) if k != best)
    sent = len(page_log.attention_requests())
    grid = page.locator("#eligibility")
    grid.locator('button[data-q="2"][data-k="0"]').click()
    expect(page.get_by_test_id("lesson-feedback")).to_contain_text("the question is about row x4")
    grid.locator(f'button[data-q="3"][data-k="{other}"]').click()
    expect(page.get_by_test_id("lesson-feedback")).to_contain_text("another key of row x4 gets more")
    expect(page.get_by_test_id("lesson-answer")).to_contain_text(f"key “x{other + 1}”")
    grid.locator(f'button[data-q="3"][data-k="{best}"]').click()
    expect(page.get_by_test_id("lesson-feedback")).to_have_text("Correct.")
    expect(page.get_by_test_id("lesson-attnlab")).to_contain_text(f"key “x{best + 1}”: {round(row[best], 4)}")
    # the clicks answered the lesson: no cell was blocked, no run asked
    assert len(page_log.attention_requests()) == sent
    assert grid.locator("button.masked").count() == 11  # causal 10 + padding x5's diagonal cell, as before
    assert not page_log.console_errors and not page_log.page_errors


def test_a_head_lesson_is_answered_by_clicking_a_head_card(
    open_page: Callable[..., Page], page_log: PageLog, live_server: str
) -> None:
    page = open_page("?lesson=two-heads")
    heads = attention(live_server, page_log.attention_requests()[-1])["layers"][0]["heads"]
    first = [h["weights"][5][0] for h in heads]
    best = first.index(max(first))
    cards = page.get_by_test_id("head-heatmap")
    cards.nth(1 - best).click()
    expect(page.get_by_test_id("lesson-feedback")).to_contain_text("hover row “f”, column “a”")
    cards.nth(best).click()
    expect(page.get_by_test_id("lesson-feedback")).to_have_text("Correct.")
    assert f"focus=0.{best}" in page.url  # the head opens as before: the link names it


def test_a_toggle_lesson_checks_the_page_as_the_learner_set_it(
    open_page: Callable[..., Page], run_and_wait: Callable[..., dict[str, Any]]
) -> None:
    page = open_page("?lesson=lab-3")
    assert check(page).startswith("Not yet:") and "Masks · causal" in feedback(page)
    body = run_and_wait(lambda: page.get_by_test_id("mask-causal").check())
    assert body["masks"]["causal"] is True
    assert check(page) == "Correct."
    expect(page.get_by_test_id("lesson-attnlab")).to_contain_text("largest weight on a later key: 0")
    # a toggle lesson leaves the clicks to the page: a cell clicked in the eligibility grid is blocked as usual
    page = open_page("?lesson=block-cell")
    assert "x3 → x1 is still eligible" in check(page)
    # the lesson counts from 1, as its words do: the grid's columns are headed 1-5 and the cell reads query 3 -> key 1
    heads = page.locator("#eligibility thead th")
    assert [heads.nth(i).inner_text() for i in range(1, heads.count())] == ["1", "2", "3", "4", "5"]
    body = run_and_wait(lambda: page.locator('#eligibility button[data-q="2"][data-k="0"]').click())
    assert body["masks"]["blocked"] == [[2, 0]]
    expect(page.get_by_text("cell query 3 → key 1 blocked").first).to_be_attached()
    assert check(page) == "Correct."


def test_the_list_links_every_lesson_and_each_opens_its_own(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page("")
    lessons = page.evaluate(LESSONS_JS)
    assert len(lessons) >= 16 and {"lab-1", "lab-2", "lab-3", "ex-2", "ex-3"} <= {x["id"] for x in lessons}
    links = page.locator("[data-testid=lesson-list] [data-lesson]")
    assert [links.nth(i).get_attribute("data-lesson") for i in range(links.count())] == [x["id"] for x in lessons]
    # the training lessons come last, under a heading of their own
    training = [x["id"] for x in lessons if x["reads"] == "train"]
    assert len(training) == 6 and [x["id"] for x in lessons[-6:]] == training
    group = page.locator("[data-testid=lesson-list] .lesson-group")
    assert group.all_inner_texts() == ["Training"]
    assert group.evaluate("(li) => li.nextElementSibling.querySelector('[data-lesson]').dataset.lesson") == training[0]
    expect(page.get_by_test_id("lesson-task")).to_be_hidden()
    open_workspace(page, "lessons")  # the index of lessons; each opens on the workspace of the view it sets up
    page.locator("#lesson-index summary").click()
    hides = page.evaluate(HIDES_JS)
    served = {m["name"] for m in httpx.get(page.url.split("?")[0] + "api/models").json()["models"]}
    for lesson in lessons:
        link = page.locator(f'[data-lesson="{lesson["id"]}"]')
        assert link.get_attribute("href") == f"?lesson={lesson['id']}"
        model = (lesson["setup"] or "m=textbook").split("&")[0][2:]
        if lesson["reads"] == "train":
            # it opens the Train workspace with its experiment's button outlined, and trains nothing until clicked
            link.click()
            page.wait_for_function(TRAIN_LESSON_JS, arg=lesson["id"])
        elif model in served:
            with page.expect_response(lambda r: r.url.endswith("/api/attention")):
                link.click()
            wait_idle(page)
            page.wait_for_function(f"() => new URLSearchParams(location.search).get('lesson') === '{lesson['id']}'")
        else:
            link.click()
            expect(page.get_by_test_id("lesson-served")).to_contain_text(f"the {model} model")
        expect(page.get_by_test_id("lesson-prompt")).to_have_text(lesson["prompt"])
        expect(page.get_by_test_id("lesson-answer")).to_be_attached()
        # unanswered, it hides what would give its answer away, and only that: each view that shows one hides it in
        # its own root, and nothing is written on the document's root
        hidden = page.locator("#lesson-panel").get_attribute("data-hides") or ""
        assert hidden.split() == lesson["hides"], (lesson["id"], hidden)
        assert page.evaluate("() => document.documentElement.getAttribute('data-lesson-hides')") is None
        for name in lesson["hides"]:
            for el in page.locator(hides[name]).all():
                expect(el).to_be_hidden()
            marks = page.evaluate(GIVEAWAY_ROOTS_JS, hides[name])
            assert all(name in m.split() for m in marks), (lesson["id"], name, marks)
        if lesson["reads"] == "train":
            out = page.evaluate("() => document.getElementById('lesson-panel').lessonCheck('lower')")
            assert not out["ok"] and "click the outlined experiment" in out["text"], (lesson["id"], out)
            expect(page.locator("[data-testid=train-col-a] [data-role=title]")).to_have_text("A: no run yet")
            continue
        if model not in served:
            continue
        assert "from1=1" in page.url, (lesson["id"], page.url)  # the chapter's count while the lesson is open
        if lesson["reads"]:
            page.wait_for_function("() => document.getElementById('lesson-panel').lessonAnswers() !== null")
        # every lesson's check against the live answer: the right answer passes, a wrong one says what to look at
        answers = page.evaluate("() => document.getElementById('lesson-panel').lessonAnswers()")
        if lesson["ask"] == "toggle":
            out = page.evaluate("() => document.getElementById('lesson-panel').lessonCheck(null)")
            assert not out["ok"] and out["text"].startswith("Not yet:"), (lesson["id"], out)
            continue
        right = page.evaluate("(a) => document.getElementById('lesson-panel').lessonCheck(a)", answers["right"])
        wrong = page.evaluate("(a) => document.getElementById('lesson-panel').lessonCheck(a)", answers["wrong"])
        assert right == {"ok": True, "text": "Correct."}, (lesson["id"], right)
        assert not wrong["ok"] and len(wrong["text"]) > len("Not yet: "), (lesson["id"], wrong)
        assert "NaN" not in wrong["text"] and "undefined" not in wrong["text"], (lesson["id"], wrong)
    assert not page_log.console_errors and not page_log.page_errors


def test_a_lesson_link_sets_up_from_the_servers_numbers(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page("?lesson=lab-2")
    body = page_log.attention_requests()[-1]
    assert body["weights"]["w_k"] == body["weights"]["w_q"] and body["masks"]["causal"] is False
    # the card's badge would say the scores are symmetric: hidden until the answer is right
    card = page.get_by_test_id("head-heatmap").first
    assert card.get_attribute("data-flags") is not None and "symmetric" in (card.get_attribute("data-flags") or "")
    expect(page.locator(".flag-symmetric")).to_be_hidden()
    page.get_by_test_id("lesson-answer").select_option("rows")
    assert "q_i·q_j" in check(page)
    expect(page.locator(".flag-symmetric")).to_be_hidden()
    page.get_by_test_id("lesson-answer").select_option("both")
    assert check(page) == "Correct."
    expect(page.locator(".flag-symmetric")).to_be_visible()
    expect(page.get_by_test_id("lesson-chapter")).to_have_text("row sums: [1. 1. 1. 1. 1.]")
    expect(page.get_by_test_id("lesson-attnlab")).to_contain_text("row sums: [1. 1. 1. 1. 1.]")


def test_figure_21_4_opens_its_two_heads_side_by_side(page: Page, page_log: PageLog, typed_pycode_server: str) -> None:
    live_server = typed_pycode_server  # it serves `given`, the model that takes the figure's weights as given
    page.goto(f"{live_server}/?lesson=fig-21-4")
    wait_idle(page)
    figure = page.get_by_test_id("lesson-figure")
    expect(figure.locator("table")).to_have_count(2)
    expect(figure.locator("caption")).to_have_text(["head A: local pattern", "head B: earlier retrieval"])
    # each head drawn from the server's answer to its matrix, rows and columns counted from 1
    got = page.evaluate(
        """async () => {
          const {FIGURE_21_4} = await import('/static/js/exercises.js');
          return Object.values(FIGURE_21_4).map((h) => h.m);
        }"""
    )
    for table, m in zip(figure.locator("table").all(), got, strict=True):
        body = {"model": "given", "pattern": m, "masks": {"causal": True}, "include": ["weights"]}
        weights = attention(live_server, body)["layers"][0]["heads"][0]["weights"]
        assert table.locator("tr").last.locator("th").inner_text() == "5"
        cells = table.locator("tr").last.locator("td")
        assert cells.all_inner_texts() == ["0" if v == 0 else f"{v:.2f}" for v in weights[4]]
    # side by side: the second head's table is to the right of the first, on one row
    a, b = (t.bounding_box() for t in figure.locator("table").all())
    assert a and b and b["x"] >= a["x"] + a["width"] and abs(b["y"] - a["y"]) < 2
    # head A is also the large head: the lesson's cell question is about it
    answers = page.evaluate("() => document.getElementById('lesson-panel').lessonAnswers()")
    assert answers["right"] == {"q": 4, "k": 4}
    assert not page_log.console_errors and not page_log.page_errors


def test_a_lesson_on_a_touch_phone_says_tap(phone_at: Callable[[str, str], Page], live_server: str) -> None:
    page = phone_at(live_server, "?lesson=two-heads")
    expect(page.get_by_test_id("lesson-prompt")).to_contain_text("Tap the head")
    expect(page.get_by_test_id("lesson-answer")).to_have_text("tap a head card")
    wrong = page.evaluate("() => document.getElementById('lesson-panel').lessonAnswers().wrong")
    page.get_by_test_id("head-heatmap").nth(wrong["head"]).tap()
    feedback_text = page.get_by_test_id("lesson-feedback").inner_text()
    assert "tap row “f”" in feedback_text and "hover" not in feedback_text.lower(), feedback_text


def test_induction_lessons_find_the_trained_heads(open_trained: Callable[..., Page]) -> None:
    """The induction model's previous-token head is L0 H1 and its induction heads are in layer 1 (docs/models.md): the
    lessons' answers, read off the live weights, say so."""
    for lesson, check_right in (
        ("previous-token", lambda r: r == {"layer": 0, "head": 1}),
        ("induction-head", lambda r: r["layer"] == 1),
    ):
        page = open_trained(f"?lesson={lesson}")
        answers = page.evaluate("() => document.getElementById('lesson-panel').lessonAnswers()")
        assert check_right(answers["right"]), (lesson, answers)
