"""The page's "Long input" panel (static/js/deepzoom.js, /?long=1): a long text run on the random model through
POST /api/runs, every head's overview drawn from its summary, the deep-zoom canvas zoomed by keyboard to single
weights whose shown values equal the tile the API serves, only the tiles in view asked for, and a run the server
dropped posted again. The models offered take the text's length (pycode is filled to its positions), and the canvas
has position axes, a minimap of the view and a keyboard cell cursor read out beside it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, wait_idle
from tests.fixtures import LIMITS
from tests.helpers import serve

pytestmark = pytest.mark.browser

TILE_URL = re.compile(r"/api/runs/([^/]+)/tiles/(\d+)/(\d+)/(\d+)/(\d+)/(\d+)")
RUN_BYTES = 3_000_000  # one run of 3,000 tokens fits, a second pushes the first out
RUN_TOKENS = 4000  # the small store's own ATTNLAB_MAX_RUN_TOKENS: above its 3,000-token runs, below the default's


def long_text(n: int) -> str:
    """n words with repeats (stripes) from a small vocabulary."""
    return " ".join(f"w{(i * 7) % 97}" if i % 5 else "the" for i in range(n))


@pytest.fixture(scope="module")
def tiny_store() -> Iterator[str]:
    """A server that keeps about one small long run, and takes runs of up to RUN_TOKENS (not the default)."""
    env = {**LIMITS, "ATTNLAB_RUN_BYTES": str(RUN_BYTES), "ATTNLAB_MAX_RUN_TOKENS": str(RUN_TOKENS)}
    with serve("textbook,random", **env) as base:
        yield base


def open_long(page: Page, base: str) -> Page:
    page.goto(f"{base}/?long=1")
    wait_idle(page)
    expect(page.get_by_test_id("dz-text")).to_be_visible()
    return page


def run_text(page: Page, text: str | None = None, words: int | None = None, timeout: float = 60_000) -> dict[str, Any]:
    if text is not None:
        page.get_by_test_id("dz-text").fill(text)
    else:
        page.get_by_test_id(f"dz-gen-{words}").click()
    with page.expect_request(lambda r: r.url.endswith("/api/runs") and r.method == "POST") as posted:
        page.get_by_test_id("dz-run").click()
    page.wait_for_function(
        "() => { const r = document.querySelector('[data-panel=deepzoom]').deepzoom.run();"
        " return r && document.querySelectorAll('#dz-overview canvas').length"
        " === r.config.n_layers * r.config.n_heads; }",
        timeout=timeout,
    )
    settle(page)
    got: dict[str, Any] = page.evaluate(
        "() => { const d = document.querySelector('[data-panel=deepzoom]').deepzoom; const r = d.run();"
        " return {name: d.name(), config: r.config, tokens: r.tokens}; }"
    )
    return {**got, "body": posted.value.post_data_json}


def settle(page: Page) -> None:
    """Wait until every tile the view asked for is drawn."""
    page.wait_for_function("() => document.getElementById('dz-level').dataset.waiting === '0'", timeout=30_000)


def frame(page: Page) -> int:
    return int(page.get_by_test_id("dz-level").get_attribute("data-frame") or 0)


def drawn_since(page: Page, before: int) -> None:
    """Wait for a frame after frame `before`: a move asked of the view is drawn in the next animation frame, so until
    then its tiles are not asked and the minimap shows the view before it."""
    page.wait_for_function("(n) => Number(document.getElementById('dz-level').dataset.frame) > n", arg=before)


def press(page: Page, key: str) -> None:
    """Press a key on the canvas and wait for the frame it draws."""
    before = frame(page)
    page.get_by_test_id("dz-canvas").press(key)
    drawn_since(page, before)


def zoom_to_deepest(page: Page, levels: int) -> None:
    """Press + until the view is at the deepest level (single weights), one frame at a time."""
    for _ in range(40):
        if page.get_by_test_id("dz-level").get_attribute("data-z") == str(levels):
            break
        press(page, "+")
    expect(page.get_by_test_id("dz-level")).to_have_attribute("data-z", str(levels))
    settle(page)


def view_state(page: Page) -> dict[str, Any]:
    return page.evaluate("() => document.querySelector('[data-panel=deepzoom]').deepzoom.state()")


def tiles_asked(log: PageLog, since: int = 0) -> list[tuple[int, int, int]]:
    out = []
    for url in log.requests[since:]:
        m = TILE_URL.search(url)
        if m:
            out.append((int(m.group(4)), int(m.group(5)), int(m.group(6))))
    return out


def tiles_meeting(view: dict[str, float], z: int, levels: int, seq_len: int) -> set[tuple[int, int, int]]:
    """The tiles of level z that a view (positions at its edges) meets, computed here apart from the page."""
    span = 256 * 2 ** (levels - z)
    last = -(-seq_len // span) - 1
    xs = range(max(0, int(view["k0"] // span)), min(last, int((view["k1"] - 1e-9) // span)) + 1)
    ys = range(max(0, int(view["q0"] // span)), min(last, int((view["q1"] - 1e-9) // span)) + 1)
    return {(z, x, y) for x in xs for y in ys}


def canvas_point(page: Page, dx: float, dy: float) -> tuple[float, float]:
    """The page point dx, dy from the deep-zoom canvas's middle."""
    box = page.get_by_test_id("dz-canvas").bounding_box()
    assert box
    return box["x"] + box["width"] / 2 + dx, box["y"] + box["height"] / 2 + dy


def assert_beside(page: Page, tip: Any, point: tuple[float, float]) -> None:
    """The weight's box is next to `point` (within 40 px each way) and wholly inside the window."""
    box = tip.bounding_box()
    assert box, "the weight's box is not drawn"
    gap_x = max(box["x"] - point[0], point[0] - (box["x"] + box["width"]), 0)
    gap_y = max(box["y"] - point[1], point[1] - (box["y"] + box["height"]), 0)
    assert gap_x <= 40 and gap_y <= 40, (box, point)
    size = page.viewport_size
    assert size and box["x"] >= 0 and box["y"] >= 0
    assert box["x"] + box["width"] <= size["width"] and box["y"] + box["height"] <= size["height"], (box, size)


def hover_cell(page: Page, dx: float, dy: float) -> dict[str, str]:
    page.get_by_test_id("dz-canvas").scroll_into_view_if_needed()
    box = page.get_by_test_id("dz-canvas").bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] / 2 + dx, box["y"] + box["height"] / 2 + dy)
    cell = page.get_by_test_id("dz-cell")
    expect(cell).to_have_attribute("data-weight", re.compile(r"."))
    return page.evaluate("() => ({...document.getElementById('dz-cell').dataset})")


def api_weight(base: str, run: str, z: int, query: int, key: int, layer: int = 0, head: int = 0) -> float:
    r = httpx.get(f"{base}/api/runs/{run}/tiles/{layer}/{head}/{z}/{key // 256}/{query // 256}")
    assert r.status_code == 200, r.text
    t = r.json()
    return float(t["weights"][query - t["q0"]][key - t["k0"]])


def distinct_colours(page: Page, selector: str) -> int:
    return page.evaluate(
        """(sel) => { const c = document.querySelector(sel); const d = c.getContext('2d')
          .getImageData(0, 0, c.width, c.height).data; const seen = new Set();
          for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
          return seen.size; }""",
        selector,
    )


def test_deepzoom_pasted_text_zooms_to_exact_weights(page: Page, page_log: PageLog, live_server: str) -> None:
    """Pasted text down to exact weights, the minimap and a picked row. How long the page's tasks take on the way is
    bench/deepzoom.py's to measure (its goal: no task over 200 ms), never a test's."""
    open_long(page, live_server)
    run = run_text(page, text=long_text(6000))
    cfg = run["config"]
    assert cfg["seq_len"] == 6000 and len(run["tokens"]) == 6000
    assert run["body"]["options"]["positions"] is True  # the random layer runs with its positions on
    # the overview: one thumbnail per head, each with the structure of its weights (many colours, not a flat fill)
    assert page.locator("#dz-overview canvas").count() == cfg["n_layers"] * cfg["n_heads"] == 4
    assert distinct_colours(page, "#dz-overview canvas") > 20
    assert distinct_colours(page, "#dz-canvas") > 20
    levels = cfg["levels"]
    zoom_to_deepest(page, levels)
    # a cell below the diagonal (query after key): the shown weight is the tile's exact value, with both tokens
    cell = hover_cell(page, -40, 40)
    assert cell["exact"] == "1"
    q, k = int(cell["query"]), int(cell["key"])
    assert q > k
    want = api_weight(live_server, run["name"], levels, q, k)
    assert want > 0
    assert float(cell["weight"]) == pytest.approx(want, rel=1e-6)
    text = page.get_by_test_id("dz-cell").text_content() or ""
    assert f"query {q} “{run['tokens'][q]}”" in text and f"key {k} “{run['tokens'][k]}”" in text
    # the hovered weight is beside the pointer, in sight, not only in the line under the canvas
    tip = page.get_by_test_id("dz-tip")
    expect(tip).to_be_visible()
    assert float(tip.get_attribute("data-weight") or "nan") == float(cell["weight"])
    assert_beside(page, tip, canvas_point(page, -40, 40))
    # only the tiles in view are asked for: at each step of a pan, every tile asked is one the new view meets
    stepped = 0
    for _ in range(6):
        since = len(page_log.requests)
        press(page, "Shift+ArrowRight")
        settle(page)
        in_view = {(levels, t["x"], t["y"]) for t in view_state(page)["tiles"]}
        asked = tiles_asked(page_log, since)
        assert set(asked) <= in_view, (asked, in_view)
        stepped += bool(asked)
    assert stepped  # the pan crossed into tiles not asked for before
    deepest = [t for t in tiles_asked(page_log) if t[0] == levels]
    per_side = -(-cfg["seq_len"] // 256)
    assert 0 < len(set(deepest)) < per_side * per_side // 10  # the few the view met, not the level's all
    # the minimap: a click far from the view moves it there, and the rectangle drawn is the view's extent that the
    # tiles asked since were computed from (none of them was asked before: each one the rectangle meets is asked)
    minimap = page.get_by_test_id("dz-minimap")
    size = minimap.evaluate("(c) => c.drawn.size")
    since = len(page_log.requests)
    before = frame(page)
    minimap.click(position={"x": size * 0.2, "y": size * 0.85})
    drawn_since(page, before)
    settle(page)
    view = view_state(page)["view"]
    rect = minimap.evaluate("(c) => c.drawn.rect")
    per = cfg["seq_len"] / size
    extent = {"k0": rect["x"] * per, "q0": rect["y"] * per, "k1": (rect["x"] + rect["w"]) * per}
    extent["q1"] = (rect["y"] + rect["h"]) * per
    assert extent == pytest.approx({k: min(max(v, 0), cfg["seq_len"]) for k, v in view.items()}, abs=1e-6)
    # the view's middle is where the click was, within a pixel of the minimap (the pointer's pixel)
    assert (extent["k0"] + extent["k1"]) / 2 == pytest.approx(0.2 * cfg["seq_len"], abs=per)
    assert (extent["q0"] + extent["q1"]) / 2 == pytest.approx(0.85 * cfg["seq_len"], abs=per)
    assert set(tiles_asked(page_log, since)) == tiles_meeting(extent, levels, levels, cfg["seq_len"])
    # a click picks the query row: its top keys from GET /rows/
    box = page.get_by_test_id("dz-canvas").bounding_box()
    assert box
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    expect(page.get_by_test_id("dz-top").locator("li[data-key]").first).to_be_visible()
    assert not page_log.page_errors


def test_deepzoom_recovers_a_run_the_server_dropped(page: Page, page_log: PageLog, tiny_store: str) -> None:
    open_long(page, tiny_store)
    run = run_text(page, text=long_text(3000))
    name = run["name"]
    # another client's run pushes this one out of the store
    other = httpx.post(
        f"{tiny_store}/api/runs",
        json={"model": "random", "text": long_text(3000), "masks": {"causal": True}},
        headers={"X-Attnlab-Run": "another-client-run"},
        timeout=120,
    )
    assert other.status_code == 200, other.text
    gone = httpx.get(f"{tiny_store}/api/runs/{name}/tiles/0/0/0/0/0")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "run_expired"
    posts = sum(u.endswith("/api/runs") for u in page_log.requests)
    zoom_to_deepest(page, run["config"]["levels"])
    expect(page.get_by_test_id("dz-note")).to_contain_text("posted again")
    assert sum(u.endswith("/api/runs") for u in page_log.requests) == posts + 1
    cell = hover_cell(page, -40, 40)
    q, k = int(cell["query"]), int(cell["key"])
    assert float(cell["weight"]) == pytest.approx(api_weight(tiny_store, name, run["config"]["levels"], q, k), rel=1e-6)
    assert not page_log.page_errors


def test_deepzoom_thirty_thousand_words_to_a_single_weight(page: Page, page_log: PageLog, live_server: str) -> None:
    """30,000 words down to one exact weight, the token list virtualised. How long the page's tasks take on the way
    is bench/deepzoom.py's to measure (the goal: none over 200 ms), not a test's."""
    open_long(page, live_server)
    run = run_text(page, words=30000, timeout=120_000)
    assert run["config"]["seq_len"] == 30000
    zoom_to_deepest(page, run["config"]["levels"])
    cell = hover_cell(page, -40, 40)
    assert cell["exact"] == "1"
    # the token list holds only the rows in sight, not thirty thousand
    assert 0 < page.locator("#dz-tokens .dz-token").count() < 40
    assert not page_log.page_errors


def test_deepzoom_link_opens_the_panel(open_page: Callable[..., Page]) -> None:
    page = open_page("?long=1")
    expect(page.get_by_test_id("dz-text")).to_be_visible()
    expect(page.get_by_test_id("dz-model")).to_have_value("random")
    page.get_by_test_id("dz-toggle").click()
    expect(page.get_by_test_id("dz-text")).to_be_hidden()
    page.wait_for_function("() => !location.search.includes('long=1')")


def test_deepzoom_geometry_and_colours(js: Callable[[str], Any]) -> None:
    got = js(
        """
        const m = await mod("longrun.js");
        const z = await mod("zoomview.js");
        const c = await mod("colors.js");
        const lru = new m.Lru(2); lru.set("a", 1); lru.set("b", 2); lru.get("a"); lru.set("c", 3);
        const lut = z.makeLut(c.VIRIDIS);
        const px = (img, i) => Array.from(img.data.slice(i * 4, i * 4 + 3));
        const log = z.paint([[0, 1e-4, 1]], { log: true, lo: 1e-5, hi: 1 }, lut);
        const lin = z.paint([[0.5]], { log: false, hi: 1 }, lut);
        return {
          deepest: m.levelFor(1, 5), fitted: m.levelFor(512 / 6000, 5), top: m.levelFor(0.001, 5),
          over: m.levelFor(20, 5), retina: m.levelFor(0.5, 5, 2),
          tiles: m.tilesInView({ k0: 300, q0: 0, k1: 700, q1: 200 }, 5, 5, 6000),
          edge: m.tilesInView({ k0: 5900, q0: 5900, k1: 6400, q1: 6400 }, 5, 5, 6000),
          coarse: m.tilesInView({ k0: 0, q0: 0, k1: 6000, q1: 6000 }, 1, 5, 6000),
          outside: m.tilesInView({ k0: 7000, q0: 0, k1: 7100, q1: 10 }, 5, 5, 6000),
          lru: [...lru.map.keys()],
          words: m.wordCount("  a b\\n c  "), made: m.wordCount(m.makeText(1234)),
          masked: px(log, 0), mid: px(log, 1), top_colour: px(log, 2), half: px(lin, 0),
          grey: c.hexToRgb(c.MASK_FILL), last: c.hexToRgb(c.VIRIDIS[10]), middle: c.colorAt(c.VIRIDIS, 0.2),
          linmid: c.colorAt(c.VIRIDIS, 0.5),
        };
        """
    )
    assert (got["deepest"], got["fitted"], got["top"], got["over"], got["retina"]) == (5, 1, 0, 5, 5)
    assert got["tiles"] == [{"x": 1, "y": 0}, {"x": 2, "y": 0}]
    assert got["edge"] == [{"x": 23, "y": 23}]  # 6,000 positions: 24 tiles of 256, the last cut at S
    assert len(got["coarse"]) == 4 and got["outside"] == []
    assert got["lru"] == ["a", "c"]  # "b" was the least recently used
    assert (got["words"], got["made"]) == (3, 1234)
    assert got["masked"] == got["grey"]  # a weight of 0 is the masked grey, never a palette colour
    assert got["top_colour"] == got["last"]
    assert got["mid"] == pytest.approx(got["middle"], abs=3)  # 1e-4 is a fifth of the way from 1e-5 to 1 in log
    assert got["half"] == pytest.approx(got["linmid"], abs=3)


def test_deepzoom_5000_words_wheel_drag_pinch_token_list_and_fit(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    """One run of 5,000 words walked as a person moves about it: the wheel, a drag and a pinch; the token list, which
    holds only the rows in sight and picks a row; then back to the whole matrix, asking only the fitted level."""
    open_long(page, live_server)
    run = run_text(page, text=long_text(5000))
    canvas = page.get_by_test_id("dz-canvas")
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    assert box
    at = (150.0, 320.0)
    cell_at = "([x, y]) => document.querySelector('[data-panel=deepzoom]').deepzoom.cellAt(x, y)"
    before = page.evaluate(cell_at, list(at))
    scale0 = view_state(page)["scale"]
    # the wheel zooms about the cursor: the cell under it stays under it
    page.mouse.move(box["x"] + at[0], box["y"] + at[1])
    page.mouse.wheel(0, -400)
    page.wait_for_function(
        "(s) => document.querySelector('[data-panel=deepzoom]').deepzoom.state().scale > s", arg=scale0
    )
    after = page.evaluate(cell_at, list(at))
    scale1 = view_state(page)["scale"]
    assert scale1 > scale0 * 1.5
    assert abs(after["query"] - before["query"]) <= 1 / scale0 and abs(after["key"] - before["key"]) <= 1 / scale0
    # a drag pans: the view moves by the drag over the scale
    k0 = view_state(page)["view"]["k0"]
    page.mouse.down()
    page.mouse.move(box["x"] + at[0] - 100, box["y"] + at[1], steps=5)
    page.mouse.up()
    assert view_state(page)["view"]["k0"] == pytest.approx(k0 + 100 / scale1, abs=0.5 / scale1)
    # two pointers moving apart zoom in about their middle
    page.evaluate(
        """() => {
          const cv = document.getElementById('dz-canvas'); const r = cv.getBoundingClientRect();
          const ev = (type, id, x) => cv.dispatchEvent(new PointerEvent(type, { pointerId: id, bubbles: true,
            clientX: r.left + x, clientY: r.top + 250, pointerType: 'touch', isPrimary: id === 1 }));
          ev('pointerdown', 1, 200); ev('pointerdown', 2, 300);
          ev('pointermove', 2, 350); ev('pointermove', 2, 400);
          ev('pointerup', 1, 200); ev('pointerup', 2, 400);
        }"""
    )
    assert view_state(page)["scale"] == pytest.approx(scale1 * 2, rel=0.02)
    # the token list
    tokens = page.get_by_test_id("dz-tokens")
    rows = tokens.locator(".dz-token")
    assert 0 < rows.count() < 40  # the rows in sight, not 5,000
    tokens.evaluate("(el) => { el.scrollTop = 4000 * 20; }")
    expect(rows.first).to_have_attribute("data-index", "4000")
    assert rows.count() < 40
    # that row, by its index: the list redraws its rows as it scrolls, so "the first row" can be another by the click
    q = 4000
    tokens.locator(f".dz-token[data-index='{q}']").click()
    expect(page.get_by_test_id("dz-row-title")).to_have_text(f"{q} “{run['tokens'][q]}”")
    top = page.get_by_test_id("dz-top").locator("li[data-key]")
    expect(top.first).to_be_visible()
    r = httpx.get(f"{live_server}/api/runs/{run['name']}/rows/0/0/{q}").json()
    assert [int(k) for k in top.evaluate_all("(els) => els.map((e) => e.dataset.key)")] == [t["key"] for t in r["top"]]
    # the view moved to that query row
    view = view_state(page)["view"]
    assert view["q0"] <= q < view["q1"]
    # down to single weights
    levels = run["config"]["levels"]
    zoom_to_deepest(page, levels)
    # back to the whole matrix at once: every tile asked since is of the fitted level, and all of them are drawn
    since = len(page_log.requests)
    press(page, "0")
    expect(page.get_by_test_id("dz-level")).not_to_have_attribute("data-z", str(levels))
    settle(page)
    state = view_state(page)
    z = state["z"]
    span = 256 * 2 ** (levels - z)
    every = {(z, x, y) for x in range(-(-5000 // span)) for y in range(-(-5000 // span))}
    assert {(z, t["x"], t["y"]) for t in state["tiles"]} == every
    assert set(tiles_asked(page_log, since)) <= every
    assert not page_log.page_errors


def test_deepzoom_fits_a_phone(page: Page, open_page: Callable[..., Page]) -> None:
    page.set_viewport_size({"width": 390, "height": 900})  # the phone width the page is tested at
    open_page("?long=1")
    expect(page.get_by_test_id("dz-canvas")).to_be_visible()
    assert page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth") == 0
    box = page.get_by_test_id("dz-canvas").bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390


def test_deepzoom_counts_against_this_servers_run_limit(page: Page, tiny_store: str) -> None:
    """The word count warns at the server's own ATTNLAB_MAX_RUN_TOKENS (read from /api/health), not the default."""
    assert httpx.get(f"{tiny_store}/api/health").json()["limits"]["max_run_tokens"] == RUN_TOKENS < 32_768
    open_long(page, tiny_store)
    page.get_by_test_id("dz-text").fill(long_text(RUN_TOKENS + 500))
    page.get_by_test_id("dz-text").dispatch_event("input")
    expect(page.locator("#dz-count")).to_contain_text("4,500 words (a run takes up to 4,000)")


def test_deepzoom_offers_models_by_length_and_reads_pycode_out_cell_by_cell(
    page: Page, page_log: PageLog, typed_pycode_server: str
) -> None:
    """One page: a long text leaves out the models with fewer positions and says so; pycode's button fills its
    positions with its own code and runs it; the axes label positions (tokens once they fit); the keyboard cursor's
    cell is read out with the weight the API's tile holds, and that weight shows beside the cursor."""
    base = typed_pycode_server
    open_long(page, base)
    models = httpx.get(f"{base}/api/models").json()["models"]
    pycode = next(m for m in models if m["name"] == "pycode")
    options = page.get_by_test_id("dz-model").locator("option")
    # given reads typed-in matrices: never offered; pycode takes a text as long as its positions
    expect(options).to_have_count(1)
    assert options.evaluate_all("(os) => os.map((o) => o.value)") == ["pycode"]
    # 200 words that pycode reads as more than 256 tokens: the server's refusal is shown as one, with the way out
    page.get_by_test_id("dz-text").fill("assertEqual(values) " * 200)
    page.get_by_test_id("dz-text").dispatch_event("input")
    expect(page.get_by_test_id("dz-model")).to_have_value("pycode")
    page.get_by_test_id("dz-run").click()
    refused = page.get_by_test_id("dz-status")
    expect(refused).to_contain_text(f"limit {pycode['max_positions']}")
    expect(refused).to_contain_text(f"“pycode at its {pycode['max_positions']} positions” fills them")
    expect(refused).to_have_class(re.compile(r"\bfield-error\b"))
    page.get_by_test_id("dz-gen-5000").click()
    expect(options).to_have_count(0)  # 5,000 words: no model here takes them
    expect(page.get_by_test_id("dz-absent")).to_have_text(
        re.compile(rf"^Not offered for 5,000 words: pycode \({pycode['max_positions']} positions\)\.")
    )
    # pycode at its positions: its own code repeated as often as it fits, run as it is
    with page.expect_request(lambda r: r.url.endswith("/api/runs") and r.method == "POST") as posted:
        page.get_by_test_id("dz-fill-pycode").click()
    page.wait_for_function(
        "() => { const r = document.querySelector('[data-panel=deepzoom]').deepzoom.run();"
        " return r && r.model === 'pycode' && document.querySelectorAll('#dz-overview canvas').length"
        " === r.config.n_layers * r.config.n_heads; }",
        timeout=60_000,
    )
    settle(page)
    expect(page.get_by_test_id("dz-absent")).to_be_hidden()
    expect(page.get_by_test_id("dz-model")).to_have_value("pycode")
    body = posted.value.post_data_json
    assert body and body["text"].count(pycode["default_text"].strip()) >= 2
    run = page.evaluate(
        "() => { const d = document.querySelector('[data-panel=deepzoom]').deepzoom; const r = d.run();"
        " return {name: d.name(), config: r.config, tokens: r.tokens}; }"
    )
    n = run["config"]["seq_len"]
    assert pycode["max_positions"] // 2 < n <= pycode["max_positions"]
    assert distinct_colours(page, "#dz-canvas") > 20
    # the axes at the whole matrix: round numbers at each position's middle, nothing past the matrix's end
    axis_k = page.get_by_test_id("dz-axis-k").evaluate("(c) => c.drawn")
    state = view_state(page)
    assert not axis_k["tokens"] and axis_k["step"] > 1
    assert [t["at"] for t in axis_k["ticks"]] == list(range(0, n, axis_k["step"]))
    for t in axis_k["ticks"]:
        assert t["px"] == pytest.approx((t["at"] + 0.5 - state["view"]["k0"]) * state["scale"])
    # zoomed in until a token fits a position (a few presses of +, however long the run): every query in view is
    # labelled, one tick each
    for _ in range(6):
        press(page, "+")
        settle(page)
        axis_q = page.get_by_test_id("dz-axis-q").evaluate("(c) => c.drawn")
        if axis_q["tokens"]:
            break
    state = view_state(page)
    assert axis_q["tokens"] and state["scale"] >= 14
    shown = [t["at"] for t in axis_q["ticks"]]
    view = state["view"]
    assert shown == [q for q in range(n) if view["q0"] <= q + 0.5 <= view["q1"]]
    # the keyboard cursor: from the view's middle, two keys right and three rows down
    canvas = page.get_by_test_id("dz-canvas")
    start = page.evaluate("() => document.querySelector('[data-panel=deepzoom]').deepzoom.cursor()")
    for key in ["ArrowRight", "ArrowRight", "ArrowDown", "ArrowDown", "ArrowDown"]:
        press(page, key)
    settle(page)
    read = page.get_by_test_id("dz-read")
    expect(read).to_have_attribute("aria-live", "polite")
    expect(read).to_have_attribute("data-weight", re.compile(r"."))
    q, k = start["query"] + 3, start["key"] + 2
    assert (int(read.get_attribute("data-query") or -1), int(read.get_attribute("data-key") or -1)) == (q, k)
    want = api_weight(base, run["name"], run["config"]["levels"], q, k)
    assert float(read.get_attribute("data-weight") or "nan") == pytest.approx(want, rel=1e-6)
    said = read.text_content() or ""
    assert said.startswith(f"query {q} “{run['tokens'][q]}” → key {k} “{run['tokens'][k]}”: weight "), said
    # the weight is beside the cursor's cell, in sight
    box = canvas.bounding_box()
    assert box
    corner = (
        box["x"] + (k + 1 - state["view"]["k0"]) * state["scale"],
        box["y"] + (q + 1 - state["view"]["q0"]) * state["scale"],
    )
    tip = page.get_by_test_id("dz-tip")
    expect(tip).to_be_visible()
    assert float(tip.get_attribute("data-weight") or "nan") == pytest.approx(want, rel=1e-6)
    assert_beside(page, tip, corner)
    # Enter picks the cursor's query row
    canvas.press("Enter")
    expect(page.get_by_test_id("dz-row-title")).to_contain_text(f"{q} “")
    assert not page_log.page_errors
