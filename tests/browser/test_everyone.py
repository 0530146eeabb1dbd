"""The page for everyone (issue 11) at 390, 800 and 1440 px: no sideways scroll, errors where you act (and a roll
back to the last good state), focus kept after actions, a dark theme from the system, readable scores, and heads
that keep their size at length."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle

pytestmark = pytest.mark.browser

WIDTHS = [390, 800, 1440]
HEIGHT = 900
RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
LONG = "?m=random&heads=8&t=" + "+".join(f"w{i % 40}" for i in range(136))
Action = Callable[[Callable[[], None]], dict[str, Any]]


@pytest.fixture
def at(page: Page, open_page: Callable[..., Page]) -> Iterator[Callable[[int, str], Page]]:
    """Open the page at `query` in a window `width` px wide."""

    def go(width: int, query: str = "") -> Page:
        page.set_viewport_size({"width": width, "height": HEIGHT})
        return open_page(query)

    yield go


def sideways(page: Page) -> int:
    """How many px the page scrolls sideways (0 = none)."""
    return int(page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def inside(page: Page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    width = page.evaluate("() => document.documentElement.clientWidth")
    return box is not None and box["x"] >= -1 and box["x"] + box["width"] <= width + 1


def on_screen(page: Page, selector: str) -> bool:
    box = page.locator(selector).first.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", css)[:3])


def luminance(css: str) -> float:
    r, g, b = rgb(css)
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_scrolls_sideways_or_is_cut_off(at: Callable[[int, str], Page], width: int) -> None:
    page = at(width, RANDOM + "&causal=1")
    assert sideways(page) == 0
    views = ("#heads-grid", "#focus-plot", "#retrieval", "#tokens", "#eligibility")
    for selector in views:
        assert inside(page, selector), selector
    open_workspace(page, "inside")
    assert inside(page, "section:has(#stats) .scroll")
    assert sideways(page) == 0
    open_workspace(page, "explore")
    run = page.get_by_test_id("run-button")
    toggle = page.locator("#controls-toggle")
    if width < 900:
        # the controls live in a drawer: closed, nothing in it takes focus; open, Run is on screen
        expect(run).to_be_hidden()
        expect(toggle).to_have_attribute("aria-expanded", "false")
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(run).to_be_visible()
        run.scroll_into_view_if_needed()
        assert inside(page, "#run-button")
        expect(page.get_by_test_id("model-select")).to_be_focused()
        page.keyboard.press("Escape")
        expect(run).to_be_hidden()
        expect(toggle).to_be_focused()
    else:
        expect(toggle).to_be_hidden()
        expect(run).to_be_visible()
    assert sideways(page) == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_an_error_shows_where_you_acted_and_rolls_back(
    at: Callable[[int, str], Page], run_and_wait: Action, width: int
) -> None:
    page = at(width, "")  # textbook: causal and position 4 padded, so query 0 sees key 0 only
    good = page.url
    cell = page.locator("#eligibility button[data-q='0'][data-k='0']")
    cell.scroll_into_view_if_needed()
    body = run_and_wait(lambda: cell.click())
    assert body["masks"]["blocked"] == [[0, 0]]
    note = page.get_by_test_id("action-error")
    expect(note).to_be_visible()
    expect(note).to_contain_text("no eligible key")
    expect(note).to_contain_text("All-masked rows")
    # beside the grid the person used, on their screen; the banner is the live region
    assert page.locator("section:has(#eligibility) [data-testid=action-error]").count() == 1
    assert on_screen(page, "[data-testid=action-error]")
    expect(page.get_by_test_id("error-banner")).to_have_attribute("role", "alert")
    # rolled back: the cell, the blocked count and the link are the last good run's
    expect(page.locator("#eligibility button[data-q='0'][data-k='0']")).to_have_text("✓")
    expect(page.locator("#blocked-count")).to_have_text("no cells blocked")
    assert page.url == good
    expect(page.locator("#change-summary")).to_have_text("")  # told once, beside the grid: not again here
    expect(page.locator("#run-status")).to_contain_text("back at the last run that worked")
    assert sideways(page) == 0
    # the next good run clears it
    run_and_wait(lambda: page.locator("#eligibility button[data-q='1'][data-k='0']").click())
    expect(note).to_have_count(0)
    expect(page.get_by_test_id("error-banner")).to_be_hidden()


@pytest.mark.parametrize("width", WIDTHS)
def test_a_bad_option_marks_its_field(at: Callable[[int, str], Page], run_and_wait: Action, width: int) -> None:
    page = at(width, RANDOM)
    if width < 900:
        page.locator("#controls-toggle").click()
    page.locator("#opt-heads").fill("7")
    run_and_wait(lambda: page.locator("#opt-heads").press("Tab"))  # the box's change, as a person leaves it
    note = page.get_by_test_id("action-error")
    expect(note).to_contain_text("width must divide by heads")
    expect(note).to_be_visible()
    assert (
        page.locator("#random-options [data-testid=action-error], #random-options + [data-testid=action-error]").count()
        <= 1
    )
    expect(page.locator("#opt-heads")).to_have_attribute("aria-invalid", "true")
    # the box keeps the 7 the message names; the views and the link are the last good run's
    expect(page.locator("#opt-heads")).to_have_value("7")
    assert "heads=7" not in page.url
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    # dismissed where the person reads it: the message's own ✕ beside the field (the banner is then only the live
    # region, its ✕ hidden with it); in the closed drawer, the floating banner's ✕
    banner = page.get_by_test_id("error-banner")
    if width < 900:
        page.keyboard.press("Escape")
        expect(page.locator("#controls-toggle")).to_have_attribute("aria-expanded", "false")
        dismiss = banner.locator("[data-role=dismiss]")
    else:
        expect(banner.locator("[data-role=dismiss]")).to_be_hidden()
        dismiss = note.get_by_test_id("action-error-dismiss")
    expect(dismiss).to_be_visible()
    assert on_screen(page, "#error-banner" if width < 900 else "[data-testid=action-error-dismiss]")
    dismiss.click()
    expect(note).to_have_count(0)
    expect(banner).to_be_hidden()
    if width >= 900:
        expect(page.locator("#opt-heads")).to_be_focused()  # back at the field the message was about
    # no message is left to say why the box would hold 7: it is back at the run the views show, unmarked
    expect(page.locator("#opt-heads")).to_have_value("4")
    expect(page.locator("#opt-heads")).not_to_have_attribute("aria-invalid", "true")
    assert "heads=7" not in page.url


@pytest.mark.parametrize("width", WIDTHS)
def test_focus_stays_where_you_were(at: Callable[[int, str], Page], run_and_wait: Action, width: int) -> None:
    page = at(width, RANDOM)
    # opening a head keeps focus on its card
    page.locator("#head-0-2").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "2")
    expect(page.locator("#head-0-2")).to_be_focused()
    # the eligibility grid is one tab stop; arrows move within it; toggling keeps focus on the cell
    grid = page.locator("#eligibility")
    assert grid.locator("button[tabindex='0']").count() == 1
    grid.locator("button[tabindex='0']").focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowRight")
    expect(grid.locator("button[data-q='2'][data-k='1']")).to_be_focused()
    body = run_and_wait(lambda: page.keyboard.press("Enter"))
    assert body["masks"]["blocked"] == [[2, 1]]
    expect(grid.locator("button[data-q='2'][data-k='1']")).to_be_focused()
    expect(grid.locator("button[data-q='2'][data-k='1']")).to_have_text("B")
    assert grid.locator("button[tabindex='0']").count() == 1
    # ablating from a card keeps focus on its button
    ablate = page.locator("[data-testid=head-ablate][data-head='1']")
    ablate.focus()
    page.keyboard.press("Enter")
    expect(page.locator("[data-testid=head-ablate][data-head='1']")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("[data-testid=head-ablate][data-head='1']")).to_be_focused()


TAB_STOPS = """() => [...document.querySelectorAll('a[href], button, input, select, textarea, [tabindex]')]
  .filter((e) => e.tabIndex >= 0 && !e.disabled && e.getClientRects().length > 0
                 && getComputedStyle(e).visibility !== 'hidden').length"""


def test_the_grid_costs_one_tab_stop(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=" + "+".join(f"t{i}" for i in range(15)))
    grid_buttons = page.locator("#eligibility button").count()
    assert grid_buttons == 225
    stops = page.evaluate(TAB_STOPS)
    in_grid = page.evaluate(
        TAB_STOPS.replace("document.querySelectorAll(", "document.getElementById('eligibility').querySelectorAll(")
    )
    assert in_grid == 1
    assert stops < 429 - 224, stops  # 429 before: every one of the 225 cells was a stop


def test_the_large_head_shows_focus(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    assert page.locator(".modebar-btn").count() == 0  # no plotly mode bar: its buttons were 18 tab stops
    page.locator("#focus-plot").focus()
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"


def test_dark_theme_follows_the_system(page: Page, open_page: Callable[..., Page], page_log: PageLog) -> None:
    page.emulate_media(color_scheme="dark")
    open_page(RANDOM + "&causal=1&view=scores")
    css = page.evaluate(
        """() => { const s = (el) => getComputedStyle(el);
          const panel = document.querySelector('.panel');
          return {bg: s(document.body).backgroundColor || s(document.documentElement).backgroundColor,
                  root: s(document.documentElement).backgroundColor,
                  panel: s(panel).backgroundColor, ink: s(panel).color,
                  paper: document.getElementById('focus-plot').layout.paper_bgcolor,
                  input: s(document.getElementById('sequence-input')).backgroundColor}; }"""
    )
    assert luminance(css["root"]) < 0.15 and luminance(css["panel"]) < 0.2
    assert luminance(css["ink"]) > 0.7 and luminance(css["input"]) < 0.25
    assert luminance(css["paper"] if css["paper"].startswith("rgb") else hex_rgb(css["paper"])) < 0.2
    # the heatmaps keep their scales: masked cells dark grey and hatched, eligible cells coloured
    pixels = page.evaluate(
        """() => {
          const fig = document.querySelector('[data-testid=head-heatmap]');
          const ctx = fig.querySelector('canvas').getContext('2d');
          const r = window.devicePixelRatio || 1;
          const {left, top, cell} = JSON.parse(fig.dataset.layout);
          const at = (q, k) =>
            Array.from(ctx.getImageData((left + k * cell + 2) * r, (top + q * cell + 2) * r, 1, 1).data);
          return {masked: at(0, 5), eligible: at(5, 0)};
        }"""
    )
    assert max(pixels["masked"][:3]) - min(pixels["masked"][:3]) <= 2
    assert pixels["eligible"] != pixels["masked"]
    page.emulate_media(color_scheme="light")
    assert luminance(page.evaluate("() => getComputedStyle(document.documentElement).backgroundColor")) > 0.85
    assert page_log.page_errors == []


def hex_rgb(h: str) -> str:
    h = h.lstrip("#")
    return f"rgb({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)})"


@pytest.mark.parametrize("width", WIDTHS)
def test_heads_keep_their_size_at_length(at: Callable[[int, str], Page], width: int) -> None:
    page = at(width, LONG)
    cards = page.get_by_test_id("head-heatmap")
    expect(cards).to_have_count(8)
    thumb = page.evaluate("async () => (await import('/static/js/heads.js')).THUMB_PX")
    sizes = cards.locator("canvas").evaluate_all("els => els.map((c) => c.getBoundingClientRect().width)")
    assert len(set(sizes)) == 1 and sizes[0] <= thumb + 20, sizes
    grid = page.locator("#heads-grid").bounding_box()
    assert grid is not None and grid["height"] <= 1.5 * HEIGHT, grid
    # the token list starts collapsed, and opens on request
    more = page.locator("#tokens-more")
    expect(more).to_have_text("Show all 136 tokens")
    expect(page.get_by_test_id("token")).to_have_count(48)
    more.click()
    expect(page.get_by_test_id("token")).to_have_count(136)
    expect(more).to_have_attribute("aria-expanded", "true")
    # the eligibility grid is a fixed-size picture, not a solid block of 18,496 buttons
    elig = page.locator("#eligibility canvas").bounding_box()
    assert elig is not None and elig["width"] <= 300
    assert sideways(page) == 0


def test_scores_get_a_per_head_scale_and_a_legend_with_numbers(
    open_page: Callable[..., Page], page_log: PageLog, live_server: str
) -> None:
    page = open_page(RANDOM + "&causal=1&view=scores")
    body = page_log.attention_requests()[-1]
    result = httpx.post(f"{live_server}/api/attention", json=body, timeout=30).json()
    eligible = result["eligible"]
    want = [
        max(abs(v) for q, row in enumerate(h["scores"]) for k, v in enumerate(row) if eligible[q][k])
        for h in result["layers"][0]["heads"]
    ]
    cards = page.get_by_test_id("head-heatmap")
    got = [float(v) for v in cards.evaluate_all("els => els.map((e) => e.dataset.scaleMax)")]
    assert got == pytest.approx(want)
    expect(cards.first.locator(".flag-range")).to_have_text(f"±{want[0]:.2f}")
    page.locator("#score-scale").select_option("shared")
    expect(cards.first).to_have_attribute("data-scale-max", re.compile(r"\d"))
    shared = [float(v) for v in cards.evaluate_all("els => els.map((e) => e.dataset.scaleMax)")]
    assert shared == pytest.approx([max(want)] * len(want))
    ticks = page.locator("#legend .legend-ticks span").all_text_contents()
    assert len(ticks) == 5 and float(ticks[0]) == pytest.approx(-max(want), abs=0.01) and ticks[2] == "0.00"
    page.locator("#score-scale").select_option("clip")
    expect(page.locator("#legend")).to_contain_text("clipped")
    assert "sscale=clip" in page.url


def test_no_value_colour_can_be_mistaken_for_masked(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/api/health")
    nearest = page.evaluate(
        """async () => { const C = await import('/static/js/colors.js');
          const m = C.hexToRgb(C.MASK_FILL); let best = 1e9;
          for (const stops of [C.VIRIDIS, C.CIVIDIS, C.RDBU]) for (let i = 0; i <= 200; i++) {
            const c = C.colorAt(stops, i / 200);
            best = Math.min(best, Math.hypot(c[0] - m[0], c[1] - m[1], c[2] - m[2])); }
          return best; }"""
    )
    assert nearest > 40, nearest  # the old #e4e4e4 sat 23 from RdBu's near-white centre


def test_a_window_of_zero_is_refused_in_words(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page(RANDOM)
    sent = len(page_log.attention_requests())
    page.locator("#mask-window").fill("0")
    page.locator("#mask-window").dispatch_event("change")
    expect(page.locator("#window-error")).to_contain_text("1 or more")
    expect(page.locator("#mask-window")).to_have_attribute("aria-invalid", "true")
    page.locator("#mask-window").fill("-5")
    page.locator("#mask-window").dispatch_event("change")
    expect(page.locator("#window-error")).to_contain_text("got “-5”")
    assert len(page_log.attention_requests()) == sent  # nothing was quietly turned into a window of 1
    assert "window=" not in page.url


def test_the_model_menu_shows_the_current_head_count(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&heads=8")
    expect(page.get_by_test_id("model-select").locator("option[value=random]")).to_have_text("random · 8 heads")


def test_a_custom_link_opens_a_page(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page("?m=custom")
    expect(page.get_by_test_id("head-heatmap")).to_have_count(1)
    expect(page.get_by_test_id("model-select")).to_have_value("textbook")
    expect(page.get_by_test_id("error-banner")).to_be_hidden()


def test_a_long_text_says_the_limit_and_how_to_raise_it(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page(RANDOM)
    page.get_by_test_id("sequence-input").fill(" ".join(f"w{i}" for i in range(300)))
    run_and_wait(lambda: page.get_by_test_id("run-button").click())
    banner = page.get_by_test_id("error-banner")
    expect(banner).to_contain_text("limit 256")
    expect(banner).to_contain_text("raise this limit with the ATTNLAB_MAX_TOKENS setting")
    assert banner.inner_text().lower().count("shorten") == 1  # said once: by the server's message, not again
    expect(page.get_by_test_id("sequence-input")).to_have_attribute("aria-invalid", "true")
    # what was typed stays in the box to shorten; the views and the link are the last good run
    assert page.get_by_test_id("sequence-input").input_value().startswith("w0 w1")
    expect(page.get_by_test_id("token")).to_have_count(6)
    assert "w299" not in page.url
    wait_idle(page)


def close(a: list[int], b: list[int], tol: int = 12) -> bool:
    return max(abs(u - v) for u, v in zip(a, b, strict=True)) <= tol


def test_the_png_has_every_head_a_legend_and_the_masked_key(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1&heads=32&d_model=64")
    expect(page.locator("#heads-pager")).to_contain_text("of 32")  # two pages on screen
    page.get_by_test_id("head-heatmap").first.hover()  # a transient highlight must not reach the file
    with page.expect_download() as png:
        page.locator("#export-png").click()
    data = png.value.path().read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    probe = page.evaluate(
        """async (bytes) => {
          const ex = await import('/static/js/exporter.js'), heads = await import('/static/js/heads.js');
          const C = await import('/static/js/colors.js');
          const tokens = ['the', 'cat', 'sat', 'on', 'the', 'mat'];
          const L = heads.exportLayout({tokens, keyTokens: null});
          const sizes = Array.from({length: 32}, () => ({w: L.width, h: L.height}));
          const sheet = ex.sheetLayout(sizes, 6);
          const img = await createImageBitmap(new Blob([new Uint8Array(bytes)], {type: 'image/png'}));
          const c = document.createElement('canvas');
          c.width = img.width; c.height = img.height;
          const ctx = c.getContext('2d');
          ctx.drawImage(img, 0, 0);
          const r = window.devicePixelRatio || 1;
          const px = (x, y) =>
            Array.from(ctx.getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data).slice(0, 3);
          const {x, y, w} = ex.LEGEND;
          return {sheetHeight: sheet.height * r, ratio: r, barStart: px(x + 1, y + 6), barEnd: px(x + w - 1, y + 6),
                  masked: px(x + w + 12 + 1, y + 16 + 7), viridis: [C.VIRIDIS[0], C.VIRIDIS[10]].map(C.hexToRgb),
                  mask: [C.MASK_FILL, C.MASK_HATCH].map(C.hexToRgb)};
        }""",
        list(data),
    )
    assert height == probe["sheetHeight"], (width, height, probe)  # all 32 heads, not the 24 on screen
    assert close(probe["barStart"], probe["viridis"][0]) and close(probe["barEnd"], probe["viridis"][1])
    assert any(close(probe["masked"], m) for m in probe["mask"]), probe["masked"]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_large_head_marks_the_query_and_pair(at: Callable[[int, str], Page], width: int) -> None:
    page = at(width, RANDOM + "&causal=1&query=3&pair=3-1")
    plot = page.locator("#focus-plot")
    layout = page.evaluate("() => document.getElementById('focus-plot').layout")
    names = {s.get("name") for s in layout["shapes"]}
    assert {"query", "pair"} <= names
    pair = next(s for s in layout["shapes"] if s.get("name") == "pair")
    assert (pair["x0"], pair["y0"]) == (0.5, 2.5)
    # its height follows its width
    box = plot.bounding_box()
    assert box is not None
    assert abs(layout["height"] - min(560, max(280, box["width"] * 0.9))) <= 2, (layout["height"], box["width"])
    # and shows no toolbar on the cells
    page.locator("#focus-plot").hover()
    assert page.locator("#focus-plot .modebar-btn").count() == 0


def test_the_retrieval_diagram_follows_its_query_and_shows_the_context(open_page: Callable[..., Page]) -> None:
    long = "?m=random&t=" + "+".join(f"w{i}" for i in range(60)) + "&causal=1&query=1"
    page = open_page(long)
    svg = page.get_by_test_id("retrieval-diagram")
    box = page.locator("section:has(#retrieval) .scroll")
    assert box.evaluate("(e) => e.scrollTop") == 0
    svg.focus()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")  # from query 1 round to the last, 59
    expect(svg).to_have_attribute("data-query", "59")
    chosen = page.locator("#retrieval .rd-chosen rect").bounding_box()
    frame = box.bounding_box()
    assert (
        chosen
        and frame
        and frame["y"] <= chosen["y"]
        and chosen["y"] + chosen["height"] <= frame["y"] + frame["height"]
    )
    # no reason text runs past the diagram
    overflow = page.evaluate(
        """() => { const svg = document.getElementById('retrieval'); const w = svg.viewBox.baseVal.width;
          return [...svg.querySelectorAll('.rd-num')].filter((t) => t.getBBox().x + t.getBBox().width > w).length; }"""
    )
    assert overflow == 0
    # the textbook's second half: weights times values give the context, number by number
    page = open_page("?m=textbook&query=2")
    ctx = page.locator("#retrieval-context")
    expect(ctx).to_be_visible()
    expect(ctx).to_contain_text("context of query 2")
    rows = ctx.locator("tr")
    expect(rows).to_have_count(4)  # keys 0, 1, 2 (causal) and the total
    expect(rows.last).to_contain_text("context")


def test_a_long_retrieval_diagram_draws_the_rows_scrolled_to(open_page: Callable[..., Page]) -> None:
    """At 200 tokens the diagram draws the rows its box shows and the others as the box scrolls to them: wheeled to
    its end, the last query's and the last key's rows are there, inside the box, with their tokens and the key's
    reason; a click on the last query retrieves for it, and the last key then reads its weight."""
    n = 200
    page = open_page("?m=random&t=" + "+".join(f"w{i}" for i in range(n)) + "&causal=1&query=1")
    svg = page.get_by_test_id("retrieval-diagram")
    box = page.locator("section:has(#retrieval) .scroll")
    last_query = page.locator(f"#retrieval g.rd-query[data-query='{n - 1}']")
    last_key = page.locator(f"#retrieval g.rd-key[data-key='{n - 1}']")
    box.scroll_into_view_if_needed()
    box.hover()
    page.mouse.wheel(0, box.evaluate("(b) => b.scrollHeight - b.clientHeight"))
    page.wait_for_function("(b) => b.scrollTop + b.clientHeight >= b.scrollHeight - 1", arg=box.element_handle())
    expect(last_key).to_contain_text(f"w{n - 1}")
    expect(last_key.locator(".rd-num")).to_contain_text("✕ causal")  # query 1 cannot see the last key
    frame = box.bounding_box()
    for row in (last_query, last_key):
        rect = row.locator("rect").bounding_box()
        assert frame and rect and frame["y"] <= rect["y"] and rect["y"] + rect["height"] <= frame["y"] + frame["height"]
    last_query.click()
    expect(svg).to_have_attribute("data-query", str(n - 1))
    expect(last_key.locator(".rd-num")).to_have_text(re.compile(r"^-?\d+\.\d{3} · [01]\.\d{3}$"))


def test_a_zero_weight_line_is_grey(js_page: Page) -> None:
    out = js_page.evaluate(
        """async () => { const R = await import('/static/js/retrieval.js');
          const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
          document.body.append(svg);
          const view = {tokens: ['a', 'b', 'c'], keyTokens: null, eligible: [[true, true, true]], reasons: {},
                        palette: 'viridis', pair: null};
          const head = {index: 0, scores: [[1, 2, 3]], weights: [[0, 0.25, 0.75]]};
          R.renderRetrieval(svg, view, head, 0, () => {}, () => {});
          return [...svg.querySelectorAll('.rd-line')].map((l) => l.getAttribute('class')); }"""
    )
    assert out == ["rd-line rd-zero", "rd-line", "rd-line"]


@pytest.fixture
def js_page(page: Page, live_server: str) -> Page:
    page.goto(f"{live_server}/api/health")
    return page


def test_head_similarity_has_axes_a_colour_bar_and_hover(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    open_workspace(page, "inside")
    sim = page.get_by_test_id("head-similarity")
    expect(sim).to_be_visible()
    data = page.evaluate("() => document.querySelector('[data-testid=head-similarity]').data[0]")
    assert data["x"] == ["H0", "H1", "H2", "H3"] and data["colorbar"]["title"]["text"] == "cosine"
    assert "%{z" in data["hovertemplate"]
    expect(sim.locator(".xtitle")).to_have_text("head")


def test_the_long_eligibility_picture_works_from_the_keyboard(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page(LONG)
    grid = page.locator("#elig-canvas")
    grid.focus()
    for key in ("ArrowRight", "ArrowRight", "ArrowDown", "End"):
        page.keyboard.press(key)
    expect(page.locator("#elig-canvas")).to_have_attribute("data-q", "1")
    expect(page.locator("#elig-canvas")).to_have_attribute("data-k", "135")
    expect(page.locator("#elig-cursor")).to_contain_text("query 1 “w1” → key 135 “w15”: eligible")
    body = run_and_wait(lambda: page.keyboard.press("Enter"))
    assert body["masks"]["blocked"] == [[1, 135]]
    expect(page.locator("#elig-canvas")).to_be_focused()
    expect(page.locator("#elig-cursor")).to_contain_text("masked by blocked")
