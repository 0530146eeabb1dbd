"""Words that do not mislead (issue 25, item 5): a nearly uniform head is not called "dead", column sums of a
correct map are not printed in the bug demo's red, the retrieval diagram never opens on a padding position, and the
heads say that a map is a diagnostic, not an explanation."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace, wait_idle

pytestmark = pytest.mark.browser

Open = Callable[..., Page]
# every text and title on the page, to look for a word anywhere a student could read it
WORDS_JS = """() => [...document.querySelectorAll('body *')].flatMap((e) => [e.title || '',
  ...[...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent)]).join(' ')"""


def test_the_worked_examples_head_reads_nearly_uniform_with_its_kl_not_dead(open_page: Open, live_server: str) -> None:
    page = open_page()  # textbook: the chapter's worked example
    st = httpx.post(f"{live_server}/api/attention", json={"model": "textbook", "include": ["stats"]}, timeout=30)
    stats = st.json()["layers"][0]["heads"][0]["stats"]
    assert stats["dead"] is True and stats["kl_from_uniform"] < 0.01  # the API keeps its names
    card = page.get_by_test_id("head-heatmap").first
    assert (card.get_attribute("data-flags") or "").split(",")[0] == "uniform"
    badge = card.locator(".flag-uniform")
    expect(badge).to_have_text("nearly uniform")
    title = badge.get_attribute("title") or ""
    assert f"KL from uniform {stats['kl_from_uniform']:.4f} nats" in title
    assert "every eligible key gets almost the same weight" in title and "not broken" in title
    open_workspace(page, "inside")  # the per-head stats
    health = page.locator("#stats tbody tr").first.locator("td").last
    expect(health).to_contain_text("nearly uniform")
    assert not re.search(r"\bdead\b", page.evaluate(WORDS_JS), re.IGNORECASE)


def _colour(page: Page, selector: str) -> list[str]:
    return page.locator(selector).evaluate_all("els => els.map((e) => getComputedStyle(e).color)")


def test_correct_column_sums_are_neutral_and_only_wrong_row_sums_are_red(open_page: Open, page: Page) -> None:
    open_page()  # textbook, causal: a correct softmax, whose columns do not sum to 1
    sums = page.get_by_test_id("sums")
    rows, cols = sums.locator(".sums-line").first, sums.locator(".sums-line").last
    expect(rows).to_have_class(re.compile(r"\ball-one\b"))
    expect(cols).to_have_class(re.compile(r"\bfree\b"))
    expect(cols).to_contain_text("not meant to sum to 1")
    expect(cols.locator(".off")).to_have_count(0)
    expect(cols.locator(".free")).to_have_count(5)  # 2.279 1.301 0.888 0.532 and 0: x5, padded, is read by none
    neutral = set(_colour(page, "[data-testid=sums] .sums-line:last-child .sums-values span"))
    label = cols.locator("strong").evaluate("e => getComputedStyle(e).color")

    open_page("?m=textbook&causal=0&bug=softmax_over_queries")  # the classic bug: rows are wrong, and red
    expect(page.get_by_test_id("demo-bug")).to_be_visible()
    rows = page.get_by_test_id("sums").locator(".sums-line").first
    expect(rows).to_have_class(re.compile(r"\bnot-one\b"))
    red = set(_colour(page, "[data-testid=sums] .sums-line:first-child .off"))
    assert len(red) == 1 and not (red & neutral)
    assert rows.locator("strong").evaluate("e => getComputedStyle(e).color") != label
    expect(page.get_by_test_id("sums").locator(".sums-line").last).to_contain_text("every column sums to 1")


def test_the_retrieval_diagram_never_opens_on_a_padding_position(open_page: Open, page: Page) -> None:
    diagram = page.get_by_test_id("retrieval-diagram")
    open_page("?m=textbook")  # x5 is padding: the diagram opens on x4
    expect(diagram).to_have_attribute("data-query", "3")
    # a query past the end (a link made for a longer text) goes to the last real position, not to x5
    open_page("?m=textbook&query=9")
    expect(diagram).to_have_attribute("data-query", "3")
    # a batch: query 5 is real in item 0 ("a b c d e f") and padding in item 1 ("x y z", padded to 6)
    open_page("?m=random&batch=a+b+c+d+e+f%0Ax+y+z&causal=1&query=5")
    expect(diagram).to_have_attribute("data-query", "5")
    page.get_by_test_id("batch-item").select_option("1")
    wait_idle(page)
    expect(diagram).to_have_attribute("data-query", "2")
    expect(page.locator("#retrieval-title")).to_contain_text("query 2")


def test_the_heads_say_a_map_is_a_diagnostic_not_an_explanation(open_page: Open, page: Page) -> None:
    open_page()
    note = page.locator("[data-view=heads]").get_by_test_id("heads-diagnostic")
    expect(note).to_be_visible()
    expect(note).to_contain_text("it is a diagnostic, not an explanation of what the model computes")
    expect(note).to_contain_text("the patching and ablation panels test what matters")
    heading = page.locator("#heads-title").bounding_box()
    grid = page.locator("#heads-grid").bounding_box()
    box = note.bounding_box()
    assert heading and grid and box and heading["y"] < box["y"] < grid["y"]  # under the heading, above the maps
