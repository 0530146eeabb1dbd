"""The all-layers overview (static/js/overview.js) and the busy indicator (static/js/busy.js), in a real browser:
72 thumbnails for MiniLM whose pixels are the weights the API returns, downsampled by block max; pressing one (mouse
or keyboard) opens that head large and outlines it; `drawOverview` on its own, with plain and typed-array rows; and
"Running… n s" while a run is held in flight, the views still there."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import PageLog

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "static" / "js"
THUMB = 64
# about 100 wordpieces: long enough that every thumbnail is downsampled (100 rows into 64 pixels)
WORDS = "the quick brown fox jumps over the lazy dog while seven tired students read about attention heads"
LONG = " ".join([WORDS] * 6)
Open = Callable[[str], Page]


def thumbs(page: Page) -> Any:
    return page.get_by_test_id("overview-head")


def thumb(page: Page, layer: int, head: int) -> Any:
    return page.locator(f"[data-testid=overview-head][data-layer='{layer}'][data-head='{head}']")


def pixels(page: Page, layer: int, head: int) -> np.ndarray:
    """A thumbnail's canvas as (rows, cols, 3) RGB bytes."""
    data = thumb(page, layer, head).evaluate(
        """b => { const c = b.querySelector('canvas');
                  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  return {w: c.width, h: c.height, d: Array.from(d)}; }"""
    )
    return np.array(data["d"], dtype=float).reshape(data["h"], data["w"], 4)[:, :, :3]


def block_max(w: np.ndarray, side: int = THUMB) -> np.ndarray:
    """The largest value of each block, blocks as overview.js cuts them: position i goes to pixel floor(i * m / n)."""
    rows, cols = min(w.shape[0], side), min(w.shape[1], side)
    r = (np.arange(w.shape[0]) * rows) // w.shape[0]
    c = (np.arange(w.shape[1]) * cols) // w.shape[1]
    out = np.full((rows, cols), -np.inf)
    for i in range(rows):
        for j in range(cols):
            out[i, j] = w[np.ix_(r == i, c == j)].max()
    return out


def colours(page: Page, values: np.ndarray) -> np.ndarray:
    """The page's own viridis (colors.js colorAt) at each value: what a thumbnail must show."""
    rgb = page.evaluate(
        """async (vs) => { const C = await import('/static/js/colors.js');
                           return vs.map(v => C.colorAt(C.VIRIDIS, v)); }""",
        values.ravel().tolist(),
    )
    return np.array(rgb, dtype=float).reshape(*values.shape, 3)


def focused(page: Page) -> tuple[int, int]:
    plot = page.locator("#focus-plot")
    return int(plot.get_attribute("data-layer") or -1), int(plot.get_attribute("data-head") or -1)


def pressed(page: Page) -> list[tuple[int, int]]:
    got = page.locator("[data-testid=overview-head][aria-pressed=true]").evaluate_all(
        "els => els.map(e => [Number(e.dataset.layer), Number(e.dataset.head)])"
    )
    return [(int(a), int(b)) for a, b in got]


# ---- MiniLM through the page ------------------------------------------------------------------------------------


def test_overview_shows_every_head_of_minilm_and_a_press_opens_it(open_trained: Open, page_log: PageLog) -> None:
    page = open_trained("?m=minilm&t=The+animal+did+not+cross+the+street+because+it+was+tired&layer=all")
    panel = page.get_by_test_id("overview")
    expect(panel).to_be_visible()
    expect(thumbs(page)).to_have_count(72)
    expect(panel.locator("[data-role=partial]")).to_be_hidden()
    assert panel.locator(".ov-row").all_inner_texts() == [f"L{i}" for i in range(6)]
    assert panel.locator(".ov-col").all_inner_texts() == [f"H{i}" for i in range(12)]
    got = {
        (int(a), int(b)) for a, b in thumbs(page).evaluate_all("els => els.map(e => [e.dataset.layer, e.dataset.head])")
    }
    assert got == {(layer, head) for layer in range(6) for head in range(12)}
    # small: at most 64 CSS px a side
    sizes = (
        thumbs(page)
        .locator("canvas")
        .evaluate_all("cs => cs.map(c => [c.getBoundingClientRect().width, c.getBoundingClientRect().height])")
    )
    assert all(0 < w <= THUMB and 0 < h <= THUMB for w, h in sizes), sizes[:3]
    # the open head is outlined: the first head until another is opened
    assert pressed(page) == [(0, 0)]
    outline = thumb(page, 0, 0).evaluate("b => getComputedStyle(b).outlineStyle")
    assert outline == "solid"

    expect(page.get_by_role("button", name="Layer 3 head 7", exact=True)).to_have_count(1)
    page.get_by_role("button", name="Layer 3 head 7", exact=True).click()
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "3")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "7")
    expect(page.locator("#focus-title")).to_have_text("Layer 3 · head 7, large")
    assert pressed(page) == [(3, 7)]
    assert thumb(page, 0, 0).evaluate("b => getComputedStyle(b).outlineStyle") == "none"
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_overview_of_a_run_that_holds_one_layer_shows_that_layer_and_says_so(open_trained: Open) -> None:
    # about 200 wordpieces: every layer at once is over the test server's result limit (4 million values)
    text = "+".join(WORDS.split() * 12)
    page = open_trained(f"?m=minilm&t={text}&layer=2")
    expect(thumbs(page)).to_have_count(12)
    assert {int(n) for n in thumbs(page).evaluate_all("els => els.map(e => e.dataset.layer)")} == {2}
    expect(page.get_by_test_id("overview").locator("[data-role=partial]")).to_have_text(
        "This run holds layer 2 of 6 only; the Layer menu picks which."
    )
    assert pressed(page) == [(2, 0)]
    # 200 positions into 64 pixels a side
    assert pixels(page, 2, 3).shape == (THUMB, THUMB, 3)
    page.get_by_role("button", name="Layer 2 head 3", exact=True).click()
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "3")
    assert pressed(page) == [(2, 3)]


def test_overview_keyboard_moves_with_arrows_and_opens_with_enter_and_space(open_trained: Open) -> None:
    page = open_trained("?m=minilm&t=Keys+and+queries+meet+in+every+head&layer=all")
    expect(thumbs(page)).to_have_count(72)
    # one tab stop: the open head's thumbnail
    assert thumbs(page).evaluate_all("els => els.filter(e => e.tabIndex === 0).length") == 1
    expect(thumb(page, 0, 0)).to_have_attribute("tabindex", "0")
    thumb(page, 0, 0).focus()
    for key in ["ArrowRight", "ArrowRight", "ArrowDown", "ArrowDown", "ArrowLeft"]:
        page.keyboard.press(key)
    expect(thumb(page, 2, 1)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "2")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "1")
    assert pressed(page) == [(2, 1)]
    expect(thumb(page, 2, 1)).to_be_focused()  # the redraw kept the person where they were
    page.keyboard.press("End")
    page.keyboard.press("ArrowUp")
    expect(thumb(page, 1, 11)).to_be_focused()
    page.keyboard.press(" ")
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "1")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "11")
    assert pressed(page) == [(1, 11)]
    expect(thumb(page, 1, 11)).to_have_attribute("tabindex", "0")


def test_overview_pixels_are_the_block_max_of_the_api_weights(open_trained: Open, trained_server: str) -> None:
    body = {"model": "minilm", "text": LONG, "include": ["weights"]}
    result = httpx.post(f"{trained_server}/api/attention", json=body, timeout=60).json()
    S = len(result["tokens"])
    assert S > THUMB  # the thumbnails are downsampled, not drawn cell by cell
    page = open_trained(f"?m=minilm&t={LONG.replace(' ', '+')}&layer=all")
    expect(thumbs(page)).to_have_count(72)
    weights = {
        (li, hi): np.array(h["weights"]) for li, L in enumerate(result["layers"]) for hi, h in enumerate(L["heads"])
    }
    picks = [(0, 0), (2, 5), (5, 11)]
    for layer, head in picks:
        drawn = pixels(page, layer, head)
        assert drawn.shape == (THUMB, THUMB, 3)
        expected = colours(page, block_max(weights[(layer, head)]))
        assert np.abs(drawn - expected).max() <= 3, (layer, head)
    # the check can tell heads apart: a head's pixels are far from another head's weights
    a, b = (0, 0), (2, 5)
    assert np.abs(weights[a] - weights[b]).max() > 0.3
    other = colours(page, block_max(weights[b]))
    assert np.abs(pixels(page, *a) - other).max() > 40
    # and from the mean of each block, which would wash a sharp head out
    w = weights[a]
    rows = (np.arange(S) * THUMB) // S
    mean = np.array([[w[np.ix_(rows == i, rows == j)].mean() for j in range(THUMB)] for i in range(THUMB)])
    assert np.abs(pixels(page, *a) - colours(page, mean)).max() > 10


# ---- drawOverview on its own ------------------------------------------------------------------------------------

DRAW = """async ({n, typed, causal}) => {
  const O = await import('/static/js/overview.js');
  // previous-token attention over n positions: w[q][q-1] = 1 (w[0][0] = 1)
  const row = (q) => {
    const r = typed ? new Float32Array(n) : new Array(n).fill(0);
    r[Math.max(0, q - 1)] = 1;
    return r;
  };
  const w = Array.from({length: n}, (_, q) => row(q));
  const eligible = causal ? Array.from({length: n}, (_, q) => Array.from({length: n}, (_, k) => k <= q)) : null;
  const layers = [{index: 0, heads: [{index: 0, weights: w}, {index: 1, weights: w}]},
                  {index: 1, heads: [{index: 0, weights: w}, {index: 1, weights: w}]}];
  const box = document.createElement('div');
  const picked = [];
  const before = document.body.innerHTML.length;
  const h = O.drawOverview(box, layers, {palette: 'viridis', selected: [1, 0], eligible,
                                         onPick: (l, hd) => picked.push([l, hd])});
  const after = document.body.innerHTML.length;
  const b = box.querySelector('[data-layer="1"][data-head="1"]');
  b.click();
  const pressedBefore = [...box.querySelectorAll('[aria-pressed=true]')].map(e => e.id);
  h.select([0, 1]);
  const pressedAfter = [...box.querySelectorAll('[aria-pressed=true]')].map(e => e.id);
  const c = box.querySelector('canvas');
  const d = Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data);
  return {w: c.width, h: c.height, d, count: box.querySelectorAll('button').length, picked,
          pressedBefore, pressedAfter, touched: after !== before, inDocument: document.contains(box)};
}"""


def test_draw_overview_downsamples_a_long_matrix_by_block_max(open_page: Callable[..., Page]) -> None:
    page = open_page()
    bottom, top = (
        np.array(c)
        for c in page.evaluate(
            "async () => { const C = await import('/static/js/colors.js');"
            " return [0, 1].map(t => C.colorAt(C.VIRIDIS, t)); }"
        )
    )
    mask = np.array([0x3A, 0x3A, 0x3A])
    out = page.evaluate(DRAW, {"n": 512, "typed": True, "causal": True})
    assert (out["w"], out["h"], out["count"]) == (THUMB, THUMB, 4)
    px = np.array(out["d"], dtype=float).reshape(THUMB, THUMB, 4)[:, :, :3]
    for i in range(THUMB):
        for j in range(THUMB):
            # 512 -> 64: 8 x 8 blocks; the ones over the diagonal and just under it hold a weight of 1
            want = top if j in (i, i - 1) else mask if j > i else bottom
            assert np.abs(px[i, j] - want).max() <= 2, (i, j, px[i, j], want)
    assert out["picked"] == [[1, 1]]
    assert out["pressedBefore"] == ["overview-1-0"]  # a press asks; the outline moves when told (select)
    assert out["pressedAfter"] == ["overview-0-1"]
    assert not out["touched"] and not out["inDocument"]


def test_draw_overview_draws_typed_rows_as_plain_rows(open_page: Callable[..., Page]) -> None:
    page = open_page()
    for n in (512, 37, 5):
        plain = page.evaluate(DRAW, {"n": n, "typed": False, "causal": False})
        typed = page.evaluate(DRAW, {"n": n, "typed": True, "causal": False})
        side = min(n, THUMB)
        assert (plain["w"], plain["h"]) == (side, side)
        assert plain["d"] == typed["d"]


def test_draw_overview_paints_72_heads_of_512_tokens_fast(open_page: Callable[..., Page]) -> None:
    """MiniLM at 512 tokens: 72 heads of 262,144 weights. Drawing them costs about what reading every weight once
    costs (measured in the same page, so a loaded machine slows both), and well under 100 ms on an idle one."""
    page = open_page()
    ms = page.evaluate(
        """async () => {
          const O = await import('/static/js/overview.js');
          const n = 512, H = 12, L = 6;
          const make = (seed) => Array.from({length: n}, (_, q) => {
            const r = new Float32Array(n);
            for (let k = 0; k < n; k++) r[k] = ((q * 31 + k * 17 + seed) % 97) / 97;
            return r;
          });
          const layers = Array.from({length: L}, (_, l) => ({index: l,
            heads: Array.from({length: H}, (_, h) => ({index: h, weights: make(l * H + h)}))}));
          const eligible = Array.from({length: n}, () => new Array(n).fill(true));
          const box = document.createElement('div');
          let draw = Infinity, read = Infinity, sum = 0;
          for (let i = 0; i < 5; i++) {
            for (const l of layers) for (const h of l.heads) h.weights = h.weights.slice();  // no cache to hit
            let t0 = performance.now();
            O.drawOverview(box, layers, {palette: 'cividis', selected: null, eligible});
            draw = Math.min(draw, performance.now() - t0);
            t0 = performance.now();
            for (const l of layers) for (const h of l.heads) {
              for (const r of h.weights) for (let k = 0; k < n; k++) sum += r[k];
            }
            read = Math.min(read, performance.now() - t0);
          }
          return {draw, read, sum, drawn: box.querySelectorAll('canvas').length};
        }"""
    )
    assert ms["drawn"] == 72
    assert ms["draw"] < 5 * ms["read"] + 20, ms  # colours worked out per weight would cost over 10 times
    assert ms["draw"] < 250, ms  # under 100 ms on an idle machine; this one is shared


def test_overview_module_imports_nothing_of_the_page_store() -> None:
    """A standalone page imports overview.js: it and everything it imports stay clear of the page's store."""
    seen: set[str] = set()
    todo = ["overview.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += re.findall(r"""from\s+["']\./([\w.-]+\.js)["']""", (JS / name).read_text())
        todo += re.findall(r"""import\(\s*["']\./([\w.-]+\.js)["']""", (JS / name).read_text())
    assert "colors.js" in seen
    assert not seen & {"store.js", "state.js", "main.js", "effects.js", "api.js", "requests.js"}, seen


# ---- the busy indicator -----------------------------------------------------------------------------------------


def test_busy_indicator_counts_seconds_while_a_run_is_in_flight(
    open_page: Callable[..., Page], page_log: PageLog
) -> None:
    page = open_page("?m=random&t=the+cat+sat+on+the+mat")
    busy = page.get_by_test_id("busy-indicator")
    pill = busy.locator("[data-role=pill]")
    expect(busy).to_have_attribute("role", "status")
    expect(busy).to_have_attribute("aria-live", "polite")
    expect(pill).to_be_hidden()
    # hold the next attention request in flight until the test lets it go
    held: list[Route] = []
    page.route("**/api/attention", lambda route: held.append(route))
    # the held run never reaches the server, which would answer the page's progress questions with a 404
    page.route(
        "**/api/progress/*",
        lambda route: route.fulfill(
            content_type="application/json",
            body='{"run": "x", "stage": "layers", "done": 0, "total": 0, "elapsed_ms": 1}',
        ),
    )
    page.get_by_test_id("sequence-input").fill("the cat sat on the mat again")
    page.get_by_test_id("run-button").click()
    expect(pill).to_be_visible()
    expect(pill.locator("[data-role=label]")).to_have_text("Running…")
    expect(busy).to_have_attribute("data-busy", "run")
    expect(pill.locator("[data-role=seconds]")).to_have_text("1 s", timeout=5_000)
    expect(pill.locator("[data-role=seconds]")).to_have_text("2 s", timeout=5_000)
    expect(pill.locator("[data-role=seconds]")).to_have_attribute("aria-hidden", "true")
    # the views stay on screen, dimmed a little, not blanked
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    expect(page.get_by_test_id("head-heatmap").first).to_be_visible()
    expect(page.locator("[data-view=heads]")).to_have_css("opacity", "0.72")
    assert page.locator("#views").get_attribute("aria-busy") == "true"
    assert held, "the run never asked"
    for route in held:
        route.continue_()
    page.unroute("**/api/attention")
    expect(page.get_by_test_id("token")).to_have_count(7, timeout=20_000)
    expect(pill).to_be_hidden(timeout=20_000)
    expect(busy).to_have_attribute("data-busy", "")
    expect(page.locator("[data-view=heads]")).to_have_css("opacity", "1")
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_overview_and_busy_stay_out_of_a_one_layer_model(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=a+b+c")
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    expect(page.get_by_test_id("overview")).to_be_hidden()
    expect(page.get_by_test_id("busy-indicator").locator("[data-role=pill]")).to_be_hidden()
