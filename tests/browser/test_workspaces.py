"""The page as workspaces: every action of the page leaves the element it changed in the viewport, at 1440x900 and
on a 390x844 touch phone, and each workspace has a link of its own that Back returns from.

One page walks the actions per size (plus one for /?long=1 and one for a lesson), as a person would in turn.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import open_workspace, wait_idle
from tests.browser.inview import in_view, press, set_causal, shown, touch

pytestmark = pytest.mark.browser

WORKSPACES = ["explore", "test", "inside", "mechanics", "lessons", "long", "train", "vision"]

# The workspace the page's address opens on.
OPENS_ON_JS = "async () => (await import('/static/js/workspaces.js')).workspaceOf(location.search)"


def test_every_action_leaves_what_it_changed_in_view(sized: Callable[[str, str], Page], live_server: str) -> None:
    page = sized(live_server, "")
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


def test_a_link_and_a_lesson_open_where_they_are_answered(sized: Callable[[str, str], Page], live_server: str) -> None:
    page = sized(live_server, "?long=1")
    assert shown(page) == ["long"]
    in_view(page, "[data-testid=deepzoom]", "opening /?long=1")

    page = sized(live_server, "?lesson=lab-1")
    assert shown(page) == ["explore"]
    in_view(page, "[data-testid=lesson-task]", "opening /?lesson=lab-1")
    # the card sits in the workspace of the view it sets up, right above it
    assert page.evaluate("() => !!document.querySelector('[data-workspace=explore] [data-testid=lesson-task]')")
    page.get_by_test_id("lesson-answer").fill("0.5")
    press(page, "[data-testid=lesson-check]")
    page.wait_for_function("() => document.querySelector('[data-testid=lesson-feedback]').textContent.trim() !== ''")
    in_view(page, "[data-testid=lesson-feedback]", "a lesson's answer checked")
    # a link to a panel of another workspace opens there, its views drawn from that link alone
    page = sized(live_server, "?m=textbook&pert=q,direction,1")
    assert shown(page) == ["test"]
    in_view(page, "#claims-panel", "opening a claim's link")
    assert page.errors == []  # type: ignore[attr-defined]
