"""The views in sight draw first (static/js/sight.js): a view below the fold draws after the page has painted the
ones in sight, which the `attnlab:visible` mark says; `attnlab:drawn` comes once every view is drawn, and the
views stay busy (aria-busy) until then."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import PageLog

pytestmark = [pytest.mark.browser, pytest.mark.cold]  # about the first paint of a first visit

RANDOM = "?m=random&t=the+cat+sat+on+the+mat&causal=1"
# a window short enough for the large head to open below the fold, and under 1200 px wide, where the large head sits
# below the heads rather than beside them
SHORT = {"width": 1150, "height": 360}

# What was drawn when each mark was made: performance.mark wrapped, so the state is read in the task that marks
# (an observer hears of a mark later, after the views that follow it in that task have drawn).
AT_MARKS = """
(() => {
  window.__atMarks = [];
  const mark = performance.mark.bind(performance);
  performance.mark = (name, ...rest) => {
    if (name === "attnlab:visible" || name === "attnlab:drawn") {
      const focus = document.getElementById("focus-plot");
      window.__atMarks.push({
        name,
        focus: focus && focus.drawn ? Number(focus.dataset.head) : null,
        heads: document.querySelectorAll("[data-testid=head-heatmap] canvas").length,
        retrieval: document.querySelectorAll("[data-testid=retrieval-diagram] *").length,
        busy: document.getElementById("views").getAttribute("aria-busy"),
      });
    }
    return mark(name, ...rest);
  };
})();
"""

DRAWN_COUNT = "() => performance.getEntriesByName('attnlab:drawn').length"
VISIBLE = "() => performance.getEntriesByName('attnlab:visible').length > 0"
# 160 positions: a large head of 160 x 160 cells, over focus.js's SKETCH_CELLS (128 x 128)
LONG = "?m=random&t=" + "+".join(f"w{i % 37}" for i in range(160))


def at_marks(page: Page) -> list[dict[str, Any]]:
    return page.evaluate("() => window.__atMarks")  # type: ignore[no-any-return]


def below_fold(page: Page, selector: str) -> bool:
    return page.evaluate(  # type: ignore[no-any-return]
        "(sel) => document.querySelector(sel).getBoundingClientRect().top > window.innerHeight + 200", selector
    )


def test_the_views_in_sight_are_painted_before_the_ones_below_the_fold_draw(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    page.set_viewport_size(SHORT)
    page.add_init_script(AT_MARKS)
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function(f"() => ({DRAWN_COUNT})() > 0", timeout=20_000)
    assert below_fold(page, "#focus-plot") and below_fold(page, "[data-testid=retrieval-diagram]")
    marks = at_marks(page)
    names = [m["name"] for m in marks]
    assert names[:2] == ["attnlab:visible", "attnlab:drawn"], marks
    seen, drawn = marks[0], marks[1]
    # in sight: the four heads, drawn; below the fold: the large head and the retrieval diagram, not yet
    assert seen["heads"] == 4 and seen["focus"] is None and seen["retrieval"] == 0, seen
    assert seen["busy"] == "true", seen
    assert drawn["focus"] is not None and drawn["retrieval"] > 0, drawn
    page.wait_for_function("() => document.getElementById('views').getAttribute('aria-busy') === 'false'")
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_a_view_scrolled_into_sight_draws_with_the_views_in_sight(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    page.add_init_script(AT_MARKS)
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function(f"() => ({DRAWN_COUNT})() > 0", timeout=20_000)
    # the large head scrolled into sight, then another head opened (from the keyboard, which scrolls nothing): the
    # large head's draw is not put off
    page.locator("#focus-plot").scroll_into_view_if_needed()
    assert not below_fold(page, "#focus-plot")
    before = len(at_marks(page))
    n = page.evaluate(DRAWN_COUNT)
    page.locator("[data-testid=head-heatmap]").nth(2).dispatch_event("keydown", {"key": "Enter"})
    page.wait_for_function(f"(n) => ({DRAWN_COUNT})() > n", arg=n, timeout=20_000)
    seen = next(m for m in at_marks(page)[before:] if m["name"] == "attnlab:visible")
    assert seen["focus"] == 2, seen
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_a_large_head_is_sketched_in_the_first_paint_and_plotted_after(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    """A large head in sight, before its first plot: its cells on a canvas where the plot puts them, in the paint
    that `attnlab:visible` marks (here plotly is held back, so the plot can only come after); once plotly is in, the
    plot, with the same pixels in the same place, and the sketch gone."""
    held: list[Route] = []
    page.route("**/vendor/plotly.min.js", lambda route: held.append(route))
    page.goto(f"{live_server}/{LONG}")
    page.wait_for_function(VISIBLE, timeout=20_000)
    plot = page.locator("#focus-plot")
    sketch = plot.locator(":scope > canvas.focus-sketch")
    expect(sketch).to_have_count(1)
    assert plot.evaluate("(el) => !el._fullLayout && !el.drawn")  # not plotted: only sketched
    assert sketch.evaluate("(c) => [c.width, c.height]") == [160, 160]
    pixels = sketch.evaluate("(c) => c.toDataURL('image/png')")
    at = sketch.bounding_box()
    assert at and at["width"] > 100 and at["height"] == at["width"], at
    for route in held:
        route.continue_()
    page.wait_for_function(f"() => ({DRAWN_COUNT})() > 0", timeout=20_000)
    expect(sketch).to_have_count(0)
    assert plot.evaluate("(el) => el.style.minHeight") == ""
    image = plot.locator("image").first  # plotly's image trace: the head's cells, one pixel each
    assert image.get_attribute("href") == pixels
    placed = image.bounding_box()
    assert placed and all(abs(placed[k] - at[k]) <= 2 for k in ("x", "y", "width", "height")), (at, placed)
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_a_small_head_is_plotted_without_a_sketch(page: Page, page_log: PageLog, live_server: str) -> None:
    page.add_init_script(
        """new MutationObserver(() => { if (document.querySelector('.focus-sketch')) window.__sketched = true; })
          .observe(document, { childList: true, subtree: true });"""
    )
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function(f"() => ({DRAWN_COUNT})() > 0", timeout=20_000)
    assert page.evaluate("() => !!document.getElementById('focus-plot')._fullLayout")
    assert page.evaluate("() => window.__sketched") is None
    assert page_log.console_errors == [] and page_log.page_errors == []


# What the heads' thumbnails hold when the first paint is marked: each card's canvas painted (any pixel not
# transparent) or not, and whether the card is within the margin of sight (sight.js MARGIN_PX)
PAINTED_AT_VISIBLE = """
(() => {
  const mark = performance.mark.bind(performance);
  performance.mark = (name, ...rest) => {
    if (name === "attnlab:visible" && !window.__cards) {
      window.__cards = [...document.querySelectorAll("[data-testid=head-heatmap]")].map((fig) => {
        const c = fig.querySelector("canvas");
        const px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
        let painted = false;
        for (let i = 3; i < px.length && !painted; i += 4) painted = px[i] !== 0;
        const box = fig.getBoundingClientRect();
        return { painted, inSight: box.bottom >= -200 && box.top <= innerHeight + 200 };
      });
    }
    return mark(name, ...rest);
  };
})();
"""


def test_a_large_page_of_heads_paints_the_thumbnails_in_sight_first(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    """Eight heads of 192 x 192 cells (over heads.js's SKETCH_CELLS in all): the first paint has every card, the
    thumbnails in sight painted and the ones below the fold not yet; once every view is drawn, every thumbnail is."""
    page.add_init_script(PAINTED_AT_VISIBLE)
    page.goto(f"{live_server}/?m=random&heads=8&t=" + "+".join(f"w{i % 37}" for i in range(192)))
    page.wait_for_function(f"() => ({DRAWN_COUNT})() > 0", timeout=20_000)
    cards = page.evaluate("() => window.__cards")
    assert len(cards) == 8, cards
    seen = [c for c in cards if c["inSight"]]
    below = [c for c in cards if not c["inSight"]]
    assert seen and below, cards  # the test's window holds some of the grid, not all of it
    assert all(c["painted"] for c in seen) and not any(c["painted"] for c in below), cards
    painted = page.evaluate(
        """() => [...document.querySelectorAll("[data-testid=head-heatmap] canvas")].map((c) =>
          c.getContext("2d").getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 === 3 && v !== 0))"""
    )
    assert painted == [True] * 8
    assert page_log.console_errors == [] and page_log.page_errors == []
