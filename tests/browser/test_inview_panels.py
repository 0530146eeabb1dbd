"""The in-view walk of the Test, Inside the model and Mechanics workspaces and of the controls' display and bug
settings: every intervention, claim, analysis panel and decoding step a person performs, at 1440x900 and on a
390x844 touch phone, leaves the element it changed in the viewport (tests/browser/inview.py `walk`).

One page a size, on the default `random` model, walks the table in turn.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import wait_idle
from tests.browser.inview import Step, press, touch, walk

pytestmark = pytest.mark.browser

PRESSED_ABLATE = "[data-testid=head-ablate][aria-pressed=true]"


def in_drawer(page: Page, act: Callable[[], None]) -> None:
    """`act` on the controls, the drawer opened first where they sit in one (a phone), and closed after."""
    drawer = page.locator("#controls-toggle")
    if drawer.is_visible():
        drawer.click()
    act()
    if drawer.is_visible():
        page.locator("#controls-close").click()


def choose(selector: str, value: str) -> Callable[[Page], None]:
    """A menu of the controls set to `value`, scrolled to first as a person does."""
    return lambda page: in_drawer(page, lambda: pick(selector, value)(page))


def tick(selector: str) -> Callable[[Page], None]:
    """A box of the controls pressed, scrolled to first."""
    return lambda page: in_drawer(page, lambda: press(page, selector))


def pick(selector: str, value: str) -> Callable[[Page], None]:
    """A menu of a workspace set to `value`."""

    def act(page: Page) -> None:
        page.locator(selector).scroll_into_view_if_needed()
        page.locator(selector).select_option(value)

    return act


def pressing(selector: str) -> Callable[[Page], None]:
    """A press on `selector` once the page is idle (the answers to the step before drawn, its controls among them)."""

    def act(page: Page) -> None:
        settle(page)
        press_drawn(page, selector)

    return act


def press_drawn(page: Page, selector: str) -> None:
    """A tap on a touch screen, a click elsewhere, through Playwright's own scrolling, which finds the element again
    when a view draws it anew meanwhile (the head cards are built once more after a run in another precision is
    reported drawn: inview.press's scroll, which does not, would fail on the card it held)."""
    loc = page.locator(selector).first
    if touch(page):
        loc.tap()
    else:
        loc.click()


def settle(page: Page) -> None:
    """Wait until the page is idle: the run drawn and no analysis on its way (the busy indicator says none), so that
    the controls about to be pressed are the ones the answers drew."""
    wait_idle(page)
    page.wait_for_function("() => document.getElementById('busy').dataset.busy === ''")


def add_edit(page: Page) -> None:
    settle(page)
    press_drawn(page, "[data-testid=head-heatmap]")
    page.locator("#edit-weight").fill("0.9")
    press(page, "#edit-add")


def patch_run(page: Page) -> None:
    """The second position corrupted into another token, the attention outputs patched, as one form."""
    page.locator("#patch-position").scroll_into_view_if_needed()
    page.locator("#patch-position").select_option(index=1)
    page.locator("#patch-token").fill("zebra")
    page.locator("#patch-hook").select_option("attn_out")
    press(page, "#patch-run")


def patch_cell(page: Page) -> None:
    grid = "[data-testid=patch-grid][data-drawn='1']"
    page.wait_for_selector(grid)
    page.locator(grid).focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("Enter")


def contrast_run(page: Page) -> None:
    page.locator("#contrast-text").scroll_into_view_if_needed()
    page.locator("#contrast-text").fill("x1 x2 x3 x5 x4")  # the same five positions, two swapped
    press(page, "#contrast-run")


STEPS: list[Step] = [
    # the controls' bug and display settings, from the Explore workspace: the heads they redraw
    Step(
        "a classic bug shown",
        "explore",
        choose("#bug-select", "flipped_mask"),
        "[data-testid=head-heatmap]",
        ("bugSet",),
        ("bug-select",),
    ),
    Step("the bug taken off", "explore", choose("#bug-select", ""), "[data-testid=head-heatmap]", ("bugSet",)),
    Step(
        "the first token's sink hidden",
        "explore",
        choose("#sinks-select", "first"),
        "[data-testid=head-heatmap]",
        ("sinksSet",),
        ("sinks-select",),
    ),
    Step(
        "positions counted from 1",
        "explore",
        tick("#count-from1"),
        "[data-testid=head-heatmap]",
        ("countSet",),
        ("count-from1",),
    ),
    Step(
        "computed in float64",
        "explore",
        choose("#dtype-select", "float64"),
        "[data-testid=head-heatmap]",
        ("dtypeSet",),
        ("dtype-select",),
    ),
    # interventions: a head ablated and a weight set where the heads are, then the list of them in Test
    Step(
        "a head ablated on its card",
        "explore",
        pressing("[data-testid=head-ablate]"),
        PRESSED_ABLATE,
        ("ablationToggled",),
    ),
    Step(
        "a weight of the large head set", "explore", add_edit, "[data-testid=edit-shown]", ("editAdded",), ("edit-add",)
    ),
    # the pair a contrast and an explained score ask about, pressed in the retrieval diagram of the head opened
    Step(
        "a key pressed in the retrieval diagram",
        "explore",
        pressing("#retrieval g.rd-key[data-key='1']"),
        "#tophead-panel",
        ("pairSet",),
    ),
    Step("ablation by the mean", "test", pick("#abl-mode", "mean"), "#intervene-body", ("ablModeSet",), ("abl-mode",)),
    Step("the ablation removed", "test", pressing("#iv-list [data-item^=a]"), "#iv-list", ("ablationDropped",)),
    Step("the edit removed", "test", pressing("#iv-list [data-item^=e]"), "#iv-list", ("editDropped",)),
    Step(
        "a head ablated again", "explore", pressing("[data-testid=head-ablate]"), PRESSED_ABLATE, ("ablationToggled",)
    ),
    Step(
        "the interventions cleared",
        "test",
        pressing("#iv-clear"),
        "#intervene-panel",
        ("interventionsCleared",),
        ("iv-clear",),
    ),
    # a claim tested, a token patched, a contrast run
    Step("a claim tested", "test", pressing("#perturb-run"), "#perturb-verdict", ("perturbSet",), ("perturb-run",)),
    Step(
        "a token patched",
        "test",
        patch_run,
        "[data-testid=patch-grid]",
        ("panelSet",),
        ("patch-position", "patch-token", "patch-hook", "patch-run"),
    ),
    Step("a patching cell opened", "test", patch_cell, "[data-testid=patch-cell]", ("panelSet",), ("patch-grid",)),
    Step(
        "a contrast run",
        "test",
        contrast_run,
        "[data-testid=contrast-result]",
        ("panelSet",),
        ("contrast-text", "contrast-run"),
    ),
    # inside the model: the rollout shown, a score explained
    Step(
        "the rollout shown",
        "inside",
        pressing("#rollout-on"),
        "[data-testid=rollout-grid]",
        ("panelSet",),
        ("rollout-on",),
    ),
    Step(
        "rollout fused by max",
        "inside",
        pick("#rollout-fuse", "max"),
        "[data-testid=rollout-grid]",
        ("panelSet",),
        ("rollout-fuse",),
    ),
    Step(
        "rollout without the residual",
        "inside",
        pressing("#rollout-resid"),
        "[data-testid=rollout-grid]",
        ("panelSet",),
        ("rollout-resid",),
    ),
    Step(
        "rollout as flow",
        "inside",
        pick("#rollout-method", "flow"),
        "[data-testid=rollout-grid]",
        ("panelSet",),
        ("rollout-method",),
    ),
    Step(
        "a score explained",
        "inside",
        pressing("#qk-explain"),
        "[data-testid=qk-body]",
        ("panelAsked",),
        ("qk-explain",),
    ),
]


def test_every_panel_action_leaves_what_it_changed_in_view(sized: Callable[[str, str], Page], live_server: str) -> None:
    page = sized(live_server, "")
    walk(page, STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
