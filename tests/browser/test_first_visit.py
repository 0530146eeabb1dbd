"""Where to start (issue 25, item 1): a first visit gets a short path of four steps, each setting up its view and
bringing the panel that answers it into sight; hidden, it stays hidden; an example opens scrolled to its answer,
and every panel is one press away in the row at the top."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle

pytestmark = pytest.mark.browser

Open = Callable[..., Page]
MINILM_EXAMPLE = "MiniLM: which heads make “it” look at “animal”?"

# The element's top is inside the viewport and its heading is on screen (a tall panel runs on below).
IN_VIEW = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const r = el.getBoundingClientRect();
  return r.height > 0 && r.top >= -1 && r.top < window.innerHeight - 40 && window.scrollY > 0;
}"""


def wait_in_view(page: Page, selector: str) -> None:
    page.wait_for_function(IN_VIEW, arg=selector, timeout=20_000)


def test_a_first_visit_shows_the_path_and_each_step_opens_its_panel(open_page: Open) -> None:
    page = open_page("")
    path = page.get_by_test_id("start-panel")
    expect(path).to_be_visible()
    expect(page.get_by_test_id("start-reopen")).to_be_hidden()
    assert page.evaluate("() => window.scrollY") == 0
    # 1. the worked example: every head's map
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("start-example").click()
    assert resp.value.request.post_data_json["model"] == "textbook"
    wait_idle(page)
    wait_in_view(page, "#heads-grid")
    # 2. a mask: causal toggled (the textbook's is on), the eligibility grid in sight
    page.evaluate("() => window.scrollTo(0, 0)")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("start-mask").click()
    assert resp.value.request.post_data_json["masks"]["causal"] is False
    wait_idle(page)
    wait_in_view(page, "#eligibility")
    # 3. a head: its retrieval
    page.evaluate("() => window.scrollTo(0, 0)")
    page.get_by_test_id("start-head").click()
    wait_in_view(page, "[data-testid=retrieval-diagram]")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "0")
    # 4. a claim: causal back on, one middle position perturbed, the verdict in sight
    page.evaluate("() => window.scrollTo(0, 0)")
    with page.expect_response(lambda r: r.url.endswith("/api/perturb")) as resp:
        page.get_by_test_id("start-claim").click()
    body = resp.value.request.post_data_json
    assert body["position"] == 2 and body["masks"]["causal"] is True, body
    expect(page.get_by_test_id("perturb-verdict")).to_be_visible()
    wait_in_view(page, "#claims-panel")


def test_hidden_it_stays_hidden_and_comes_back_from_the_row(open_page: Open, live_server: str) -> None:
    page = open_page("")
    expect(page.get_by_test_id("start-panel")).to_be_visible()
    page.goto(f"{live_server}/")  # not hidden yet: a plain visit shows it again
    wait_idle(page)
    expect(page.get_by_test_id("start-panel")).to_be_visible()
    page.get_by_test_id("start-dismiss").click()
    expect(page.get_by_test_id("start-panel")).to_be_hidden()
    expect(page.get_by_test_id("start-reopen")).to_be_focused()
    page.goto(f"{live_server}/")
    wait_idle(page)
    expect(page.get_by_test_id("start-panel")).to_be_hidden()
    page.get_by_test_id("start-reopen").click()
    expect(page.get_by_test_id("start-panel")).to_be_visible()
    expect(page.get_by_test_id("start-example")).to_be_focused()


def test_a_link_with_state_opens_without_the_path(open_page: Open) -> None:
    page = open_page("?m=random&t=the+cat+sat")
    expect(page.get_by_test_id("start-panel")).to_be_hidden()
    expect(page.get_by_test_id("start-reopen")).to_be_visible()


def test_every_panel_is_one_press_away(open_page: Open) -> None:
    page = open_page("?m=random&t=the+cat+sat")
    jumps = page.get_by_test_id("panel-nav").locator("button[data-jump]:visible")
    names = jumps.all_text_contents()
    for want in ("Tokens", "Heads", "Retrieval", "Head types", "Test a claim", "Eligibility", "Per-head stats"):
        assert want in names, names
    jump = page.get_by_test_id("panel-nav").locator("button[data-jump]", has_text="Per-head stats")
    target = jump.get_attribute("data-jump")
    assert target
    jump.click()
    wait_in_view(page, target)
    # the row is one tab stop: arrows move along it
    first = jumps.first
    first.focus()
    page.keyboard.press("ArrowRight")
    expect(jumps.nth(1)).to_be_focused()
    assert jumps.evaluate_all("els => els.filter(e => e.tabIndex === 0).length") == 1


def test_the_minilm_example_opens_scrolled_to_its_answer(open_trained: Open) -> None:
    page = open_trained("")
    value = page.locator("#example-select option", has_text=MINILM_EXAMPLE).get_attribute("value")
    assert value
    page.locator("#example-select").select_option(value)
    expect(page.get_by_test_id("top-heads").locator("button")).to_have_count(10)
    wait_idle(page)
    wait_in_view(page, "#tophead-panel")
    expect(page.get_by_test_id("top-heads")).to_be_in_viewport()
