"""The in-view walk of the Lessons and the Long input workspaces: a lesson opened from the index, answered, checked,
its answer shown and closed; a long run set up and run, its blocks' measure changed, zoomed, its cell cursor moved by
the keyboard, its minimap and its tokens pressed. Each leaves the view it changed in the viewport, at 1440x900 and on a
390x844 touch phone.

One page per size walks the steps in turn; the long run is a few hundred words on the fast `random` layer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.inview import Step, press, walk
from tests.browser.test_inview_explore import keys, settled, tap

pytestmark = pytest.mark.browser

LESSON = "[data-testid=lesson-task]"
ZOOM = "[data-testid=dz-canvas]"
WORDS = 400  # a long run, yet one this machine answers at once


def lesson_opened(page: Page) -> None:
    """The first lab step opened from the index (a <details> opened first)."""
    if not page.locator("#lesson-index").evaluate("(d) => d.open"):
        press(page, "#lesson-index > summary")
    press(page, "a[data-lesson='lab-1']")


def answered(page: Page) -> None:
    page.get_by_test_id("lesson-answer").fill("0.5")
    press(page, "[data-testid=lesson-check]")


def long_run(page: Page) -> None:
    """The form's every control as a person sets up a run: a model, the masks, the text filled by each button and
    then typed, and Run."""
    page.get_by_test_id("dz-model").select_option("random")
    page.get_by_test_id("dz-causal").set_checked(False)
    page.get_by_test_id("dz-causal").set_checked(True)
    page.get_by_test_id("dz-positions").set_checked(False)
    for words in (30000, 5000):
        press(page, f"[data-testid=dz-gen-{words}]")
        page.wait_for_function("(n) => document.getElementById('dz-text').value.split(' ').length >= n", arg=words)
    page.get_by_test_id("dz-text").fill(" ".join(f"w{i % 50}" for i in range(WORDS)))
    press(page, "[data-testid=dz-run]")
    page.wait_for_function(
        "() => { const r = document.querySelector('[data-panel=deepzoom]').deepzoom.run();"
        " return r && document.querySelectorAll('#dz-overview canvas').length"
        " === r.config.n_layers * r.config.n_heads; }",
        timeout=30_000,
    )


def aggregate(page: Page) -> None:
    settled(page)
    page.get_by_test_id("dz-agg").select_option("mean")


def minimap(page: Page) -> None:
    settled(page)
    map_ = page.get_by_test_id("dz-minimap")
    map_.scroll_into_view_if_needed()
    box = map_.bounding_box()
    assert box is not None
    if page.evaluate("() => matchMedia('(pointer: coarse)').matches"):
        page.touchscreen.tap(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.8)
    else:
        page.mouse.click(box["x"] + box["width"] * 0.8, box["y"] + box["height"] * 0.8)


STEPS: list[Step] = [
    Step("a lesson opened from the index", "lessons", lesson_opened, LESSON),
    Step("a lesson answered and checked", "explore", answered, "#lesson-feedback", ("panelSet",), ("lesson-check",)),
    Step(
        "attnlab's answer shown", "explore", tap("#lesson-reveal"), "#lesson-attnlab", ("panelSet",), ("lesson-reveal",)
    ),
    Step(
        "the lesson closed",
        "explore",
        tap("#lesson-close"),
        "section[data-view=tokens]",  # the view in the card's place, at the top of its workspace
        ("panelSet",),
        ("lesson-close",),
    ),
    Step("the long input opened", "long", tap("#dz-toggle"), "#dz-body", ("panelSet",), ("dz-toggle",)),
    Step("the long input closed", "long", tap("#dz-toggle"), "[data-testid=deepzoom]", ("panelSet",), ("dz-toggle",)),
    Step("the long input opened again", "long", tap("#dz-toggle"), "#dz-body", ("panelSet",), ("dz-toggle",)),
    Step(
        "a long run set up and run",
        "long",
        long_run,
        "[data-testid=dz-overview]",
        controls=("dz-model", "dz-causal", "dz-positions", "dz-gen-30000", "dz-gen-5000", "dz-text", "dz-run"),
    ),
    Step("its blocks' mean shown", "long", aggregate, ZOOM, controls=("dz-agg",)),
    Step("zoomed in", "long", tap("[data-zoom=in]"), ZOOM, controls=("[data-zoom=in]",)),
    Step("zoomed out", "long", tap("[data-zoom=out]"), ZOOM, controls=("[data-zoom=out]",)),
    Step("the cell cursor moved", "long", keys(ZOOM, "ArrowDown"), ZOOM, controls=("dz-canvas",)),
    Step("the minimap pressed", "long", minimap, ZOOM, controls=("dz-minimap",)),
    Step("the whole matrix", "long", tap("[data-zoom=fit]"), ZOOM, controls=("[data-zoom=fit]",)),
    Step("a token's row", "long", tap("#dz-tokens [data-index='7']"), "[data-testid=dz-top]", controls=("dz-tokens",)),
]


def test_lessons_and_the_long_input_leave_what_they_changed_in_view(
    sized: Callable[[str, str], Page], live_server: str
) -> None:
    page = sized(live_server, "")
    walk(page, STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
