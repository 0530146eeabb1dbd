"""Positions counted as the chapter counts (issue 25, item 4): Display · "Count positions from 1" shifts every
position the page prints, and reads every position a person types, in the count shown; the API stays 0-based."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle

pytestmark = pytest.mark.browser

Open = Callable[..., Page]
TOKENS = ["x1", "x2", "x3", "x4", "x5"]  # the textbook's worked example: causal, x5 (position 4) padding


def count_from(page: Page, first: int) -> None:
    box = page.get_by_test_id("count-from1")
    if first == 1:
        box.check()
        expect(page).to_have_url(re.compile(r"from1=1"))
    expect(box).to_be_checked(checked=first == 1)


def focus_ticks(page: Page, axis: str) -> list[str]:
    return page.locator(f"#focus-plot .{axis}tick text").all_text_contents()


@pytest.mark.parametrize("first", [0, 1])
def test_every_printed_position_counts_from_the_setting(open_page: Open, first: int) -> None:
    page = open_page("")
    count_from(page, first)
    want = [f"{t} {i + first}" for i, t in enumerate(TOKENS)]
    # the large head's axes
    expect(page.locator("#focus-plot .ytick text")).to_have_count(5)
    assert sorted(focus_ticks(page, "y")) == sorted(want)
    assert sorted(focus_ticks(page, "x")) == sorted(want)
    # the token chips: the padded one is x5, shown as position 4 + first
    chip = page.get_by_test_id("token").nth(4)
    expect(chip.locator(".idx")).to_have_text(str(4 + first))
    expect(chip).to_have_attribute("title", re.compile(rf"Position {4 + first} is padding"))
    # the retrieval diagram, the menus that take a position (their values stay the API's)
    expect(page.locator('#retrieval [data-query="4"]')).to_contain_text(f"{4 + first}  x5")
    expect(page.locator("#retrieval-title")).to_contain_text(f"query {3 + first} “x4”")  # the last real token
    open_workspace(page, "test")  # the claim's menu of positions
    option = page.locator("#perturb-position option[value='4']")
    expect(option).to_have_text(f"{4 + first} x5")
    open_workspace(page, "explore")
    expect(page.locator("#edit-query option[value='0']")).to_have_text(f"{first} x1")
    # the eligibility grid's row heading
    expect(page.locator("#eligibility th").filter(has_text="x5").first).to_have_text(f"{4 + first} x5")
    # hovering the large head's last row says its query in the count shown
    page.locator("#focus-plot").scroll_into_view_if_needed()
    box = page.locator("#focus-plot .nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] * 0.1, box["y"] + box["height"] * 0.9)
    hover = page.locator("#focus-plot .hoverlayer .hovertext")
    expect(hover).to_contain_text(f"Query {4 + first} “x5” → key {first} “x1”")
    # and a head card's tooltip
    fig = page.locator("[data-testid=head-heatmap]").nth(0)
    fig.scroll_into_view_if_needed()
    g = json.loads(fig.get_attribute("data-layout") or "{}")
    card = fig.locator("canvas").bounding_box()
    assert card is not None
    page.mouse.move(card["x"] + g["left"] + g["cell"] * 0.5, card["y"] + g["top"] + g["cell"] * 4.5)
    expect(page.locator("#tooltip")).to_contain_text(f"query {4 + first} “x5” → key {first} “x1”")


@pytest.mark.parametrize("first", [0, 1])
def test_a_typed_position_reaches_the_api_zero_based(open_page: Open, page_log: PageLog, first: int) -> None:
    page = open_page("")
    count_from(page, first)
    page.get_by_test_id("sinks-select").select_option("positions")
    box = page.get_by_test_id("sinks-positions")
    box.fill(str(2 + first))  # the third position, x3, in the count shown
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        box.press("Enter")
    assert resp.value.request.post_data_json["sinks"]["hide"] == [2]
    wait_idle(page)
    expect(page.get_by_test_id("sinks-shown")).to_contain_text(f"Hiding key {2 + first} “x3”")
    assert "sinks=2" in page.url  # the link keeps the API's count
    expect(box).to_have_value(str(2 + first))
    asked = len(page_log.api_bodies)
    if first == 1:
        # 0 is no position when counting from 1: said at the box, nothing sent
        box.fill("0")
        box.press("Enter")
        expect(page.locator("#sinks-error")).to_contain_text("from 1")
        assert len(page_log.api_bodies) == asked


def test_the_count_round_trips_through_the_link(open_page: Open) -> None:
    # the link's from1 read and written: tests/js/views.test.mjs
    page = open_page("?m=textbook&causal=1&pad=4&from1=1")
    expect(page.get_by_test_id("count-from1")).to_be_checked()
    expect(page.get_by_test_id("token").nth(0).locator(".idx")).to_have_text("1")
    page.get_by_test_id("count-from1").uncheck()
    expect(page.get_by_test_id("token").nth(0).locator(".idx")).to_have_text("0")
    expect(page).not_to_have_url(re.compile(r"from1="))
