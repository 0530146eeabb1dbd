"""The in-view walk of Explore and the controls: each action a person takes there (the input, the masks, the display,
the tokens, a head, a cell, a pair), and on the run it leads to (pinned to compare with, its head types found and
sorted), leaves the view it changed in the viewport, at 1440x900 and on a 390x844 touch phone, where the controls are
a drawer over the views.

One page per size walks the steps in turn, on the fast `random` and `textbook` models.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.inview import Step, press, touch, walk

pytestmark = pytest.mark.browser

HEADS = "[data-testid=head-heatmap]"
GRID = "#heads-grid"
ELIGIBILITY = "#eligibility"
# 60 words: more than the 48 tokens the list shows before "Show all"
LONG_TEXT = " ".join(["the cat sat on the mat and the dog ran to the park"] * 5)


def in_drawer(do: Callable[[Page], None], close: bool = True) -> Callable[[Page], None]:
    """`do` in the controls: on a phone the drawer is opened first (unless it is open) and closed after (unless `do`
    closed it, or `close` is False: what the step changed is in the drawer)."""

    def act(page: Page) -> None:
        narrow = page.locator("#controls-toggle").is_visible()
        if narrow and not page.evaluate("() => document.body.classList.contains('drawer-open')"):
            press(page, "#controls-toggle")
        do(page)
        if close and narrow and page.locator("#controls-close").is_visible():
            press(page, "#controls-close")

    return act


def choose(selector: str, value: str) -> Callable[[Page], None]:
    return in_drawer(lambda page: page.locator(selector).select_option(value))


def number(selector: str, value: str) -> Callable[[Page], None]:
    """A number typed into a box of the controls and the box left (its change)."""

    def do(page: Page) -> None:
        box = page.locator(selector)
        box.fill(value)
        box.press("Tab")

    return in_drawer(do)


def fewer_heads(page: Page) -> None:
    """4 heads asked from the second page of 32: the grid's one page is its first, and the link names no page."""
    number("#opt-heads", "4")(page)
    try:
        page.wait_for_function("() => !new URLSearchParams(location.search).has('page')", timeout=8_000)
    except Exception as err:  # the playwright timeout, with the link it left
        raise AssertionError(f"4 heads on one page, and the link still says {page.url}") from err


def check(selector: str, on: bool) -> Callable[[Page], None]:
    return in_drawer(lambda page: page.locator(selector).set_checked(on))


def opened(details: str, then: Callable[[Page], None]) -> Callable[[Page], None]:
    """`then` inside the controls' <details> `details`, opened first."""

    def do(page: Page) -> None:
        if not page.locator(details).evaluate("(d) => d.open"):
            page.locator(f"{details} > summary").click()
        then(page)

    return in_drawer(do)


def typed_and_run(page: Page) -> None:
    page.locator("#sequence-input").fill(LONG_TEXT)
    press(page, "#run-button")  # Run closes the drawer over the views


def matrix_entry(page: Page) -> None:
    box = page.locator("#matrix-editors input").first
    box.fill("0.5")
    box.press("Tab")


def sequence(text: str) -> Callable[[Page], None]:
    def do(page: Page) -> None:
        page.locator("#sequence-input").fill(text)
        press(page, "#run-button")

    return in_drawer(do)


def emptied(page: Page) -> None:
    """A number of X emptied while the failed run's message stands (left standing, not put away with its ✕): the
    cell's own message replaces it."""
    page.wait_for_function("() => !!document.getElementById('action-error')")
    box = page.locator("#matrix-editors input").first
    box.fill("")
    box.press("Tab")


def retyped(page: Page) -> None:
    matrix_entry(page)
    page.locator("#sequence-input").fill("x1 x2 x3 x4 x5")
    press(page, "#run-button")


def source(text: str) -> Callable[[Page], None]:
    def do(page: Page) -> None:
        box = page.locator("#source-input")
        box.fill(text)
        box.press("Tab")

    return opened("#more-inputs", do)


def batch(page: Page) -> None:
    box = page.locator("#batch-input")
    box.fill("the cat sat\nthe dog ran")
    box.press("Tab")


def keys(selector: str, key: str) -> Callable[[Page], None]:
    """`key` pressed on the element `selector` (focused as Tab would reach it: the error banner's ✕ is visually hidden
    while the message sits beside the control)."""

    def do(page: Page) -> None:
        settled(page)
        el = page.locator(selector).first
        el.focus()
        page.keyboard.press(key)

    return do


def find_heads(text: str) -> Callable[[Page], None]:
    def do(page: Page) -> None:
        settled(page)
        page.locator("#ht-find").fill(text)

    return do


def hover(selector: str) -> Callable[[Page], None]:
    def do(page: Page) -> None:
        settled(page)
        page.locator(selector).first.hover()

    return do


def settled(page: Page) -> None:
    """No run on its way and no view waiting to draw: the element a step presses is the one a person sees."""
    page.wait_for_function("() => document.getElementById('views').getAttribute('aria-busy') === 'false'")


def tap(selector: str) -> Callable[[Page], None]:
    def do(page: Page) -> None:
        settled(page)
        # the locator's own tap or click: it waits for the element again when a run's redraw replaced it
        el = page.locator(selector).first
        if touch(page):
            el.tap()
        else:
            el.click()

    return do


def toggle(selector: str) -> Callable[[Page], None]:
    return in_drawer(lambda page: page.locator(selector).click())


STEPS: list[Step] = [
    Step("a number of X changed", "explore", opened("#textbook-matrices", matrix_entry), HEADS, ("matrixEntrySet",)),
    Step(
        "the chapter's numbers restored",
        "explore",
        in_drawer(lambda p: p.locator("#matrices-reset").click()),
        HEADS,
        ("matricesReset",),
    ),
    Step(
        "more words than the textbook has positions",
        "explore",
        sequence("a b c d e f g"),
        HEADS,
        ("sequenceSubmitted",),
    ),
    Step(
        "the error replaced by a cell's own",
        "explore",
        in_drawer(emptied, close=False),
        "#matrix-error",
        ("errorDismissed",),
    ),
    Step(
        "the cell and the words mended", "explore", in_drawer(retyped), HEADS, ("matrixEntrySet", "sequenceSubmitted")
    ),
    Step(
        "an example chosen",
        "explore",
        in_drawer(lambda p: p.locator("#example-select").select_option("0")),
        HEADS,
        ("exampleChosen",),
    ),
    Step("the random layer chosen", "explore", choose("#model-select", "random"), HEADS, ("modelChosen",)),
    Step("a sequence typed and run", "explore", in_drawer(typed_and_run), HEADS, ("draftTyped", "sequenceSubmitted")),
    Step("all the tokens shown", "explore", tap("#tokens-more"), "#tokens", ("tokensOpenSet",)),
    Step("32 heads asked", "explore", number("#opt-heads", "32"), GRID, ("optionSet",)),
    Step("the next page of heads", "explore", tap("#heads-pager [data-role=next]"), GRID, ("pageSet",)),
    Step("4 heads asked", "explore", fewer_heads, HEADS, ("optionSet",)),
    Step("the scores shown", "explore", check("input[name=view][value=scores]", True), HEADS, ("viewSet",)),
    Step("one score range", "explore", choose("#score-scale", "shared"), HEADS, ("scoreScaleSet",)),
    Step("the weights shown", "explore", check("input[name=view][value=weights]", True), HEADS, ("viewSet",)),
    Step("the other palette", "explore", choose("#palette-select", "cividis"), HEADS, ("paletteSet",)),
    Step("the scores left unscaled", "explore", check("#scale", False), HEADS, ("scaleSet",)),
    Step("all-masked rows zeroed", "explore", choose("#all-masked", "zero"), HEADS, ("allMaskedSet",)),
    Step("the causal mask toggled", "explore", toggle("#mask-causal"), ELIGIBILITY, ("causalSet",)),
    Step("a sliding window on", "explore", check("#mask-window-on", True), ELIGIBILITY, ("windowSet",)),
    Step("the causal mask toggled back", "explore", toggle("#mask-causal"), ELIGIBILITY, ("causalSet",)),
    Step("a token padded", "explore", tap("#tokens [data-index='1']"), ELIGIBILITY, ("tokenPadded",)),
    Step(
        "a cell of the eligibility grid blocked",
        "explore",
        tap("#eligibility canvas"),
        ELIGIBILITY,
        ("cellToggled",),
    ),
    Step(
        "the grid's cursor moved",
        "explore",
        keys("#eligibility canvas", "ArrowRight"),
        ELIGIBILITY,
        ("cursorSet",),
    ),
    Step(
        "the blocked cells cleared",
        "explore",
        in_drawer(lambda p: p.locator("#blocked-clear").click()),
        ELIGIBILITY,
        ("blockedCleared",),
    ),
    Step("another head opened", "explore", tap(f"{HEADS} >> nth=1"), "[data-testid=focus-heatmap]", ("headOpened",)),
    Step(
        "the retrieval's query moved",
        "explore",
        keys("[data-testid=retrieval-diagram]", "ArrowDown"),
        "[data-testid=retrieval-diagram]",
        ("querySet",),
    ),
    Step(
        "a key of the retrieval pressed",
        "explore",
        tap("#retrieval g.rd-key:not(.rd-masked)"),
        "#tophead-panel",
        ("pairSet",),
    ),
    Step("a source sequence", "explore", source("a dog ran far"), HEADS, ("sourceChanged",)),
    Step("a source token padded", "explore", tap("#source-tokens [data-index='1']"), ELIGIBILITY, ("sourcePadded",)),
    Step("the source emptied", "explore", source(""), HEADS, ("sourceChanged",)),
    Step("a batch", "explore", opened("#more-inputs", batch), HEADS, ("sourceChanged",)),
    Step(
        "the batch's second item", "explore", lambda p: p.locator("#batch-item").select_option("1"), HEADS, ("itemSet",)
    ),
    Step("a token hovered", "explore", hover("#tokens [data-testid=token]:nth-child(3)"), "#tokens", ("highlightSet",)),
    # the two workspaces Explore's run leads to: a run pinned to compare with (Test), the head types (Inside)
    Step("this run pinned as A", "test", tap("#pin-a"), "#compare-panel", ("pinned",)),
    Step("the run unpinned", "test", tap("#unpin"), "#compare-panel", ("unpinned",)),
    Step("heads found by name", "inside", find_heads("H1"), "#headtypes-panel", ("headFilterSet",)),
    Step(
        "a column of head types sorted",
        "inside",
        tap("#headtypes-panel button[data-sort]"),
        "#headtypes-panel",
        ("headSorted",),
    ),
]


def test_explore_and_the_controls_leave_what_they_changed_in_view(
    sized: Callable[[str, str], Page], live_server: str
) -> None:
    page = sized(live_server, "")
    walk(page, STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
