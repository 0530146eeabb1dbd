"""The page as workspaces: every action of the page leaves the element it changed in the viewport, at 1440x900 and
on a 390x844 touch phone, and each workspace has a link of its own that Back returns from.

One page walks the actions per size (plus one for /?long=1 and one for a lesson), as a person would in turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import Device, open_workspace, wait_idle

pytestmark = pytest.mark.browser

SIZES = {"1440x900": Device(1440, 900), "390x844-touch": Device(390, 844, touch=True)}
WORKSPACES = ["explore", "test", "inside", "mechanics", "lessons", "long", "train", "vision"]

# Whether the element `sel` names is at least partly in the viewport (and laid out).
IN_VIEW_JS = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth;
}"""

WHERE_JS = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return 'missing';
  const r = el.getBoundingClientRect();
  return `top ${Math.round(r.top)} bottom ${Math.round(r.bottom)} of a ${innerHeight} px viewport`;
}"""

# The workspace the page's address opens on.
OPENS_ON_JS = "async () => (await import('/static/js/workspaces.js')).workspaceOf(location.search)"


def in_view(page: Page, selector: str, action: str) -> None:
    """Wait until `selector` is in the viewport after `action`; say where it is when it never comes."""
    try:
        page.wait_for_function(IN_VIEW_JS, arg=selector, timeout=8_000)
    except Exception as err:  # the playwright timeout, with where the element sat
        where = page.evaluate(WHERE_JS, selector)
        raise AssertionError(f"after {action}, {selector} is not in the viewport: {where}") from err


@pytest.fixture(params=list(SIZES))
def sized(request: Any, tab_on: Callable[[Device], Page], live_server: str) -> Callable[[str], Page]:
    """Opens attnlab at `query` at one size and waits for the heads; `page.errors` holds the uncaught errors of every
    page it opened in the test."""
    errors: list[str] = []
    heard: list[Page] = []

    def open_(query: str) -> Page:
        page = tab_on(SIZES[request.param])  # the same tab each time, what the page before stored forgotten
        if page not in heard:
            page.on("pageerror", lambda e: errors.append(str(e)))
            heard.append(page)
        page.goto(f"{live_server}/{query}")
        wait_idle(page)
        page.errors = errors  # type: ignore[attr-defined]
        return page

    return open_


def touch(page: Page) -> bool:
    return page.evaluate("() => matchMedia('(pointer: coarse)').matches")  # type: ignore[no-any-return]


def press(page: Page, selector: str) -> None:
    """A tap on a touch screen, a click elsewhere."""
    loc = page.locator(selector).first
    loc.scroll_into_view_if_needed()
    if touch(page):
        loc.tap()
    else:
        loc.click()


SHOWN_JS = """() => [...document.querySelectorAll('[data-workspace]')]
  .filter((w) => !w.hidden).map((w) => w.dataset.workspace)"""


def shown(page: Page) -> list[str]:
    return page.evaluate(SHOWN_JS)


def set_causal(page: Page, on: bool) -> None:
    drawer = page.locator("#controls-toggle")
    if drawer.is_visible():
        drawer.click()
    box = page.locator("#mask-causal")
    if box.is_checked() != on:
        box.click()
    if drawer.is_visible():
        page.locator("#controls-close").click()


def test_every_action_leaves_what_it_changed_in_view(sized: Callable[[str], Page]) -> None:
    page = sized("")
    assert shown(page) == ["explore"]
    # every view sits in one workspace; only the start path and the tab bar are outside them
    outside = page.evaluate(
        "() => [...document.querySelectorAll('#views [data-view], #views [data-panel]')]"
        ".filter((e) => !e.closest('[data-workspace]')).map((e) => e.dataset.view || e.dataset.panel)"
    )
    assert outside == ["start"]

    # a head card: pressed, and Enter on it, open it large, in sight
    press(page, "[data-testid=head-heatmap]")
    in_view(page, "[data-testid=focus-heatmap]", "a head card pressed")
    # a tap leaves no tooltip behind over the cards (nor the row and column it lights, from the same hover)
    if touch(page):
        assert page.locator("#tooltip").is_hidden()
    page.evaluate("() => scrollTo(0, 0)")
    page.locator("[data-testid=head-heatmap]").first.focus()
    page.keyboard.press("Enter")
    in_view(page, "[data-testid=focus-heatmap]", "Enter on a head card")
    # a press on the large head (a click blocks that cell; a tap reads it out): the large head, which draws the
    # blocked cell itself, stays in sight rather than giving way to the eligibility grid
    press(page, "[data-testid=focus-heatmap]")
    wait_idle(page)
    in_view(page, "[data-testid=focus-heatmap]", "a press on the large head")

    # a mask toggle: the eligibility grid it changed
    page.evaluate("() => scrollTo(0, 0)")
    set_causal(page, False)
    in_view(page, "#eligibility", "the causal mask toggled")
    set_causal(page, True)
    in_view(page, "#eligibility", "the causal mask toggled back")

    # each "Start here" step brings the view that answers it into sight (the claim opens the Test workspace)
    for step, answer in [
        ("example", "[data-testid=head-heatmap]"),
        ("mask", "#eligibility"),
        ("head", "[data-testid=retrieval-diagram]"),
        ("claim", "#claims-panel"),
    ]:
        if shown(page) != ["explore"]:
            open_workspace(page, "explore")
        page.evaluate("() => scrollTo(0, 0)")
        press(page, f"[data-testid=start-{step}]")
        in_view(page, answer, f"“Start here” step {step}")
    assert shown(page) == ["test"]
    assert page.evaluate(OPENS_ON_JS) == "test"

    # each workspace link: its workspace shown at its top, its link in the address, Back returns
    for name in WORKSPACES:
        page.evaluate("() => scrollTo(0, document.body.scrollHeight)")
        press(page, f"[data-testid=ws-tab-{name}]")
        page.wait_for_function("(n) => !document.querySelector(`[data-workspace=${n}]`).hidden", arg=name)
        in_view(page, f"[data-workspace={name}]", f"the {name} tab")
        assert shown(page) == [name]
        # the address opens this workspace again
        assert page.evaluate(OPENS_ON_JS) == name
    page.go_back()  # to the workspace opened before the last
    page.wait_for_function("(n) => !document.querySelector(`[data-workspace=${n}]`).hidden", arg=WORKSPACES[-2])
    assert shown(page) == [WORKSPACES[-2]]
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_link_and_a_lesson_open_where_they_are_answered(sized: Callable[[str], Page]) -> None:
    page = sized("?long=1")
    assert shown(page) == ["long"]
    in_view(page, "[data-testid=deepzoom]", "opening /?long=1")

    page = sized("?lesson=lab-1")
    assert shown(page) == ["explore"]
    in_view(page, "[data-testid=lesson-task]", "opening /?lesson=lab-1")
    # the card sits in the workspace of the view it sets up, right above it
    assert page.evaluate("() => !!document.querySelector('[data-workspace=explore] [data-testid=lesson-task]')")
    page.get_by_test_id("lesson-answer").fill("0.5")
    press(page, "[data-testid=lesson-check]")
    page.wait_for_function("() => document.querySelector('[data-testid=lesson-feedback]').textContent.trim() !== ''")
    in_view(page, "[data-testid=lesson-feedback]", "a lesson's answer checked")
    # a link to a panel of another workspace opens there, its views drawn from that link alone
    page = sized("?m=textbook&pert=q,direction,1")
    assert shown(page) == ["test"]
    in_view(page, "#claims-panel", "opening a claim's link")
    assert page.errors == []  # type: ignore[attr-defined]
