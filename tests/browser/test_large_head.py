"""The large head at length, on touch and by keyboard (issue 20, items 1, 3 and 8), in Chromium against a real
`attnlab serve`: what the last toggle changed outlined by one path whatever the number of cells, a tap that shows a
cell's numbers and a readout that blocks it, key labels thinned to what fits, hints for the device in hand, the large
head and the token list one tab stop each, and no mode bar."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle

pytestmark = pytest.mark.browser

Open = Callable[..., Page]


def words(n: int) -> str:
    return "?m=random&t=" + "+".join(f"w{i}" for i in range(n))


def wait_drawn_after(page: Page, action: Callable[[], None]) -> dict[str, Any]:
    """Do `action`, which sends one /api/attention; return its body once the page has drawn its answer."""
    marks = page.evaluate("() => performance.getEntriesByName('attnlab:drawn').length")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        action()
    page.wait_for_function("(n) => performance.getEntriesByName('attnlab:drawn').length > n", arg=marks, timeout=60_000)
    wait_idle(page)
    settled(page)
    return resp.value.request.post_data_json  # type: ignore[no-any-return]


def settled(page: Page) -> None:
    """Wait until plotly has placed the large head for good: its margins fit to its labels, its labels to its axes."""
    page.wait_for_selector("#focus-plot[data-ticks]:not([data-ticks=''])", state="attached")


# the large head's overlay: plotly's shapes, its traces named "changed", and the SVG the plot holds
OVERLAY_JS = """() => {
  const el = document.getElementById('focus-plot');
  return {
    shapes: el.layout.shapes.length,
    paths: el.querySelectorAll('.shapelayer path').length,
    changed: el.layout.shapes.filter((s) => s.name === 'changed').length,
  };
}"""

# the page px of data point (x, y) of the large head
POINT_JS = """([x, y]) => {
  const el = document.getElementById('focus-plot');
  const L = el._fullLayout;
  const cells = el.querySelector('.nsewdrag'); // the cells' area as drawn
  const box = cells.getBoundingClientRect();
  // the whole plot into view once when any of it is off screen (the controls above the large head grow), so that
  // every point asked for after it is read at the same scroll
  if (box.top < 0 || box.bottom > window.innerHeight) window.scrollBy(0, box.top - 20);
  const now = cells.getBoundingClientRect();
  return [now.left + L.xaxis.d2p(x), now.top + L.yaxis.d2p(y)];
}"""


def point(page: Page, x: float, y: float) -> tuple[float, float]:
    px, py = page.evaluate(POINT_JS, [x, y])
    return float(px), float(py)


def pixels_around(page: Page, x: float, y: float, r: int = 3) -> list[tuple[int, int, int]]:
    """The screen's RGB in a (2r+1)^2 px square centred on viewport point (x, y), read from a screenshot."""
    sx, sy = page.evaluate("() => [window.scrollX, window.scrollY]")
    clip = {"x": x + sx - r, "y": y + sy - r, "width": 2 * r + 1, "height": 2 * r + 1}
    png = page.screenshot(clip=clip, full_page=True)  # the clip in page coordinates, wherever it is scrolled
    return page.evaluate(
        """async (b64) => {
          const img = new Image();
          img.src = 'data:image/png;base64,' + b64;
          await img.decode();
          const c = document.createElement('canvas');
          c.width = img.width; c.height = img.height;
          const ctx = c.getContext('2d');
          ctx.drawImage(img, 0, 0);
          const d = ctx.getImageData(0, 0, c.width, c.height).data;
          const out = [];
          for (let i = 0; i < d.length; i += 4) out.push([d[i], d[i + 1], d[i + 2]]);
          return out;
        }""",
        base64.b64encode(png).decode(),
    )


def outlined(px: list[tuple[int, int, int]]) -> bool:
    """Black and white both there: the overlay's white-under-dotted-black line (no colour of a scale, nor the hatch
    #3a3a3a / #bdbdbd, is either)."""
    return any(max(p) < 40 for p in px) and any(min(p) > 225 for p in px)


# ---- 1. what changed: one overlay, whatever the number of cells -----------------------------------------------


def test_a_mask_change_outlines_the_changed_cells_with_one_path(page: Page, open_page: Open) -> None:
    n = 64
    page.set_viewport_size({"width": 1440, "height": 900})
    open_page(words(n) + "&query=0")
    wait_drawn_after(page, lambda: page.get_by_test_id("mask-causal").check())
    causal = page.evaluate(OVERLAY_JS)
    assert "2016 cells became masked" in page.locator("#change-summary").inner_text()
    # two paths (white under dotted black) and the query row's outline, not 2,016 dotted rectangles
    assert causal["changed"] == 2 and causal["shapes"] == 3 and causal["paths"] == 3, causal
    # the changed region's edge (between diagonal cell (q, q) and its masked neighbour (q, q + 1)) is outlined ...
    for q in (10, 40):
        assert outlined(pixels_around(page, *point(page, q + 0.5, q))), q
    # ... and the inside of a region that did not change is not
    assert not outlined(pixels_around(page, *point(page, 5, 40)))


def test_one_blocked_cell_and_a_whole_triangle_take_the_same_paths(page: Page, open_page: Open) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    open_page(words(48) + "&query=0")
    wait_drawn_after(page, lambda: page.get_by_test_id("mask-causal").check())
    many = page.evaluate(OVERLAY_JS)
    x, y = point(page, 3, 30)
    wait_drawn_after(page, lambda: page.mouse.click(x, y))  # a click blocks (3, 30): one cell changed
    assert "1 cell became masked" in page.locator("#change-summary").inner_text()
    one = page.evaluate(OVERLAY_JS)
    assert one["changed"] == many["changed"] == 2
    # the same two paths; the click also put the cell cursor (two outlines) on the cell
    assert one["paths"] == many["paths"] + 2 and one["shapes"] == many["shapes"] + 2, (one, many)
    assert outlined(pixels_around(page, *point(page, 2.5, 30)))  # its left edge


# ---- 3. touch ---------------------------------------------------------------------------------------------------


@pytest.fixture
def phone(phone_at: Callable[[str, str], Page], live_server: str) -> Callable[[str], Page]:
    """A 390 px touch screen (a phone) on the fast models, its large head placed."""

    def open_(query: str) -> Page:
        page = phone_at(live_server, query)
        settled(page)
        return page

    return open_


def test_a_tap_shows_the_cells_numbers_and_the_readout_blocks_it(phone: Callable[[str], Page]) -> None:
    page = phone("?m=random&t=the+cat+sat+on+the+mat&causal=1")
    page.locator("#focus-plot").scroll_into_view_if_needed()
    readout = page.get_by_test_id("focus-readout")
    expect(readout).to_be_hidden()
    x, y = point(page, 1, 3)
    page.touchscreen.tap(x, y)
    # the numbers, without a run: query, key, score, weight and the masks
    expect(readout).to_be_visible()
    expect(readout).to_contain_text("query 3 “on” → key 1 “cat”")
    text = readout.inner_text()
    assert "score " in text and "weight " in text and "eligible" in text, text
    block = readout.get_by_role("button", name="Block this cell")
    body = wait_drawn_after(page, block.tap)
    assert body["masks"]["blocked"] == [[3, 1]]
    expect(readout).to_contain_text("masked by blocked")
    expect(readout.get_by_role("button", name="Unblock this cell")).to_be_visible()
    # a masked cell says which mask
    x, y = point(page, 5, 2)
    page.touchscreen.tap(x, y)
    expect(readout).to_contain_text("query 2 “sat” → key 5 “mat”")
    expect(readout).to_contain_text("masked by causal")
    # the pair, which shift-click picks with a mouse
    page.get_by_role("button", name="Top heads for this pair").tap()
    page.wait_for_function(
        "() => (document.getElementById('focus-plot').layout.shapes || []).some((s) => s.name === 'pair')"
    )


def test_hints_on_touch_say_tap(phone: Callable[[str], Page]) -> None:
    page = phone("?m=random&t=the+cat+sat+on+the+mat")
    for panel in ("tokens", "focus"):
        hint = page.locator(f"[data-view={panel}] .panel-head .muted.small").first.inner_text()
        assert "tap" in hint and "hover" not in hint and "click" not in hint, (panel, hint)


def test_key_labels_are_thinned_to_what_fits_at_390_px(phone: Callable[[str], Page]) -> None:
    page = phone(words(120))
    settled(page)
    for axis, per in (("xtick", 13), ("ytick", 11)):
        xs = page.evaluate(
            f"""() => [...document.querySelectorAll('#focus-plot .{axis} text')].map((t) => {{
                 const b = t.getBoundingClientRect(); return '{axis}' === 'xtick' ? b.right : b.top; }})"""
        )
        assert len(xs) >= 4, xs
        gaps = [b - a for a, b in zip(sorted(xs), sorted(xs)[1:], strict=False)]
        # rotated 45°, a 9 px label needs ~13 px along the axis not to run into the next one
        assert min(gaps) >= per, (axis, gaps)


@pytest.mark.parametrize("width", [800, 1440])
def test_key_labels_fit_at_wider_sizes(page: Page, open_page: Open, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    open_page(words(200))
    settled(page)
    xs = page.evaluate(
        "() => [...document.querySelectorAll('#focus-plot .xtick text')].map((t) => t.getBoundingClientRect().right)"
    )
    gaps = [b - a for a, b in zip(sorted(xs), sorted(xs)[1:], strict=False)]
    assert len(xs) >= 6 and min(gaps) >= 13, gaps


# ---- 8. keyboard ------------------------------------------------------------------------------------------------

TAB_STOPS = """(root) => [...(root ? document.querySelector(root) : document)
  .querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
  .filter((e) => e.tabIndex >= 0 && !e.disabled && e.getClientRects().length > 0
                 && getComputedStyle(e).visibility !== 'hidden').length"""


def test_the_large_head_is_one_tab_stop_with_a_cell_cursor(page: Page, open_page: Open) -> None:
    open_page("?m=random&t=the+cat+sat+on+the+mat")
    assert page.evaluate(TAB_STOPS, "[data-view=focus] #focus-plot") == 0  # nothing inside the plot
    assert page.locator(".modebar-btn").count() == 0  # no mode bar anywhere
    # Tab from the control before the plot lands on it
    page.locator("#focus-title").evaluate("(e) => { e.tabIndex = -1; e.focus(); }")
    page.keyboard.press("Tab")
    plot = page.locator("#focus-plot")
    expect(plot).to_be_focused()
    readout = page.get_by_test_id("focus-readout")
    expect(readout).to_contain_text("query 0 “the” → key 0 “the”")
    assert readout.locator("[aria-live=polite]").count() == 1
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    expect(readout).to_contain_text("query 2 “sat” → key 1 “cat”")
    cursor = page.evaluate(
        """() => document.getElementById('focus-plot').layout.shapes
             .filter((s) => s.name === 'cursor').map((s) => [s.x0, s.y0])"""
    )
    assert cursor and all(c == [0.5, 1.5] for c in cursor), cursor
    body = wait_drawn_after(page, lambda: page.keyboard.press("Enter"))
    assert body["masks"]["blocked"] == [[2, 1]]
    expect(plot).to_be_focused()
    expect(readout).to_contain_text("masked by blocked")
    body = wait_drawn_after(page, lambda: page.keyboard.press(" "))
    assert body["masks"]["blocked"] == []
    expect(plot).to_be_focused()


def test_the_token_list_is_one_tab_stop(page: Page, open_page: Open) -> None:
    open_page(words(20))
    assert page.evaluate(TAB_STOPS, "#tokens") == 1
    page.get_by_test_id("token").first.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(page.get_by_test_id("token").nth(2)).to_be_focused()
    page.keyboard.press("End")
    expect(page.get_by_test_id("token").nth(19)).to_be_focused()
    page.keyboard.press("ArrowLeft")
    body = wait_drawn_after(page, lambda: page.keyboard.press("Enter"))
    assert body["masks"]["padded"] == [18]
    expect(page.get_by_test_id("token").nth(18)).to_be_focused()
    expect(page.get_by_test_id("token").nth(18)).to_have_attribute("aria-pressed", "true")
    assert page.evaluate(TAB_STOPS, "#tokens") == 1


def test_a_drag_zooms_and_reset_zoom_shows_the_whole_head(page: Page, open_page: Open) -> None:
    open_page(words(40))
    settled(page)
    reset = page.locator("#focus-reset")
    expect(reset).to_be_hidden()
    (x0, y0), (x1, y1) = point(page, 2, 2), point(page, 12, 12)
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x1, y1, steps=5)
    page.mouse.up()
    expect(reset).to_be_visible()
    span = page.evaluate(
        "() => { const r = document.getElementById('focus-plot')._fullLayout.xaxis.range; return r[1] - r[0]; }"
    )
    assert span < 15, span
    reset.click()
    expect(reset).to_be_hidden()
    span = page.evaluate(
        "() => { const r = document.getElementById('focus-plot')._fullLayout.xaxis.range; return r[1] - r[0]; }"
    )
    assert span >= 39, span
