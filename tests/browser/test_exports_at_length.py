"""Exports and panels at length (issue 20): the JSON download written in parts holds every layer of minilm at 256
tokens (the page's float16 run, each value's float16 digits), every download says in the share status what it saved
(name, size, contents), the PNG's tick labels and legend numbers are thinned to what fits, the HTML button names what
it exports, and the multi-head flow (and every other panel) keeps its height from 8 tokens to 256."""

from __future__ import annotations

import itertools
import json
import math
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PHONE, Device, open_workspace, wait_idle
from tests.helpers import SENTINEL, page_until, settle

pytestmark = pytest.mark.browser

WORDS = ["the", "animal", "did", "not", "cross", "the", "street", "because", "it", "was", "too", "tired"]
WIDTHS = [1440, 800, 390]


def words(n: int) -> str:
    return " ".join((WORDS * (n // len(WORDS) + 1))[:n])


def settled(page: Page) -> None:
    """Every view of the result painted and nothing in flight."""
    page.wait_for_function(
        "() => performance.getEntriesByName('attnlab:drawn').length > 0"
        " && document.getElementById('views').getAttribute('aria-busy') === 'false'",
        timeout=120_000,
    )


@pytest.fixture
def at_width(tab_on: Callable[[Device], Page]) -> Callable[[int], Page]:
    """A page `width` px wide; 390 is a phone (touch, a mobile viewport, two device pixels a px)."""
    return lambda width: tab_on(PHONE if width <= PHONE.width else Device(width, 900))


def status(page: Page) -> str:
    return page.locator("#share-status").inner_text()


def size_in_words(n: int) -> str:
    return f"{n} B" if n < 1000 else f"{n / 1e3:.1f} kB" if n < 1e6 else f"{n / 1e6:.1f} MB"


def click_export(page: Page, button: str) -> None:
    """Press an export button as a person would: on a phone the controls are in a drawer, opened first."""
    if page.locator("#controls-toggle").is_visible():
        page.locator("#controls-toggle").click()
    page.locator(button).click()


# ---- the JSON at length ----


def test_json_download_holds_every_layer_of_minilm_at_256_tokens(
    full_length_server: str, page: Page, tmp_path: Path
) -> None:
    text = words(254)  # + [CLS] and [SEP]: 256 word pieces, the trained server's cap
    page.goto(f"{full_length_server}/?m=minilm&t={quote_plus(text)}")
    settled(page)
    with page.expect_download(timeout=120_000) as dl:
        click_export(page, "#export-json")
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert dl.value.suggested_filename == "attnlab-minilm.json"
    # the status line says what was saved: the name, the size the file has, every layer
    expect(page.locator("#share-status")).to_contain_text("Saved attnlab-minilm.json")
    said = status(page)
    assert f"({size_in_words(path.stat().st_size)})" in said, said
    assert "every layer (6) × 12 heads, 256 tokens" in said, said

    data = json.loads(path.read_text())
    assert data["precision"] == "float16" and "m=minilm" in data["link"]
    layers = data["response"]["layers"]
    assert [len(layer["heads"]) for layer in layers] == [12] * 6
    assert all(len(h["weights"]) == 256 and len(h["weights"][0]) == 256 for layer in layers for h in layer["heads"])
    # the numbers are the server's float16 ones (asked for again, one layer at a time): each written decimal reads
    # back as the very float16 the server sent
    body = {k: v for k, v in data["request"].items() if k not in ("include", "precision", "layer")}
    for layer in (0, 5):
        want = httpx.post(
            f"{full_length_server}/api/attention",
            json={**body, "layer": layer, "include": ["weights"], "precision": "float16"},
            timeout=120,
        ).json()
        for head in (0, 11):
            got = np.array(layers[layer]["heads"][head]["weights"], dtype=np.float64).astype(np.float16)
            ref = np.array(want["layers"][0]["heads"][head]["weights"], dtype=np.float32).astype(np.float16)
            assert np.array_equal(got, ref), (layer, head, np.abs(got.astype(float) - ref.astype(float)).max())


def test_json_numbers_are_the_shortest_that_read_back(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=the+cat+sat")
    checked = page.evaluate(
        """async () => {
          const ex = await import('/static/js/jsonparts.js');
          const { halfValues } = await import('/static/js/arrays.js');
          const t = ex.halfTexts(), v = halfValues();
          let bad = [];
          for (let h = 0; h < 65536; h++) {
            if (!Number.isFinite(v[h])) { if (t[h] !== 'null') bad.push(h); continue; }
            const back = Math.f16round(Number(t[h]));
            const digits = t[h].replace(/^-|e.*$/g, '').replace('.', '').replace(/^0+/, '').length;
            if (back !== v[h] && !(back === 0 && v[h] === 0)) bad.push(h);
            else if (digits > 5) bad.push(h);
          }
          const f = new Float32Array([0.1, 1 / 3, 1e-7, 123456.789, -2.5, 0]);
          return { bad: bad.slice(0, 5), f32: Array.from(f, ex.float32Text),
                   back: Array.from(f, (x) => Math.fround(Number(ex.float32Text(x))) === x) };
        }"""
    )
    assert checked["bad"] == []
    assert checked["f32"] == ["0.1", "0.33333334", "1e-7", "123456.79", "-2.5", "0"]
    assert all(checked["back"])


# ---- every download says what it saved ----


@pytest.mark.parametrize("width", WIDTHS)
def test_png_json_and_npz_say_what_they_saved(live_server: str, at_width: Callable[[int], Page], width: int) -> None:
    page = at_width(width)
    page.goto(f"{live_server}/?m=random&t=the+cat+sat+on+the+mat&heads=4")
    wait_idle(page)
    live = page.locator("#share-status")
    assert live.get_attribute("aria-live") == "polite"
    for button, name, contents in [
        ("#export-png", "attnlab-random-heads.png", "4 heads, 6 tokens"),
        ("#export-json", "attnlab-random.json", "4 heads, 6 tokens"),
        ("#export-npz", "attnlab-random.npz", "4 heads, 6 tokens"),
    ]:
        with page.expect_download() as dl:
            click_export(page, button)
        size = dl.value.path().stat().st_size
        expect(live).to_have_text(f"Saved {name} ({size_in_words(size)}): {contents}.")
        if button == "#export-npz":
            with zipfile.ZipFile(dl.value.path()) as z:
                assert "layers.0.heads.3.weights.npy" in z.namelist()
        if page.locator("#controls-toggle").is_visible():
            page.keyboard.press("Escape")


def test_html_button_names_what_it_exports(full_length_server: str, page: Page) -> None:
    button = page.locator("[data-testid=export-html]")
    for query, label in [
        ("?m=induction&layer=1&focus=1.2", "Download layer 1 head 2 as HTML"),
        ("?m=induction&layer=1", "Download layer 1 as HTML"),
        ("?m=induction&layer=all", "Download every layer as HTML"),
    ]:
        page.goto(f"{full_length_server}/{query}")
        wait_idle(page)
        expect(button).to_have_text(label)
    with page.expect_download() as dl:
        button.click()
    expect(page.locator("#share-status")).to_contain_text(f"Saved {dl.value.suggested_filename} (")
    assert "every layer" in status(page) and "opens offline" in status(page)


# ---- the PNG's labels fit ----

# Every label the PNG's head cards draw: fillText wrapped while the sheet is made, with where it lands on the canvas
# and the rotation it is drawn at (the key labels at -45°).
RECORD_LABELS = """() => {
  window.__labels = [];
  const ids = new WeakMap();
  let next = 0;
  const fill = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (text, x, y) {
    const m = this.getTransform();
    const r = window.devicePixelRatio || 1;
    if (!ids.has(this.canvas)) ids.set(this.canvas, ++next);
    window.__labels.push({ text: String(text), canvas: ids.get(this.canvas), shown: this.canvas.isConnected,
                           x: (m.a * x + m.c * y + m.e) / r,
                           y: (m.b * x + m.d * y + m.f) / r, angle: Math.round(Math.atan2(m.b, m.a) * 180 / Math.PI),
                           font: parseFloat(/(\\d+(\\.\\d+)?)px/.exec(this.font)[1]) });
    return fill.call(this, text, x, y);
  };
}"""


@pytest.mark.parametrize("n", [12, 24, 30])
def test_png_key_labels_never_overlap(open_page: Callable[..., Page], n: int) -> None:
    page = open_page(f"?m=random&t={quote_plus(words(n))}&heads=2")
    page.evaluate(RECORD_LABELS)
    with page.expect_download() as dl:
        page.locator("#export-png").click()
    assert dl.value.path().read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = page.evaluate("() => window.__labels")
    first = next(lab["canvas"] for lab in labels if lab["angle"] == -45 and not lab["shown"])  # the first card's
    keys = [lab for lab in labels if lab["canvas"] == first and lab["angle"] == -45]
    rows = [lab for lab in labels if lab["canvas"] == first and lab["angle"] == 0 and re.search(r" \d+$", lab["text"])]
    assert keys and rows, labels[:5]
    for group, across in ((keys, math.sqrt(0.5)), (rows, 1.0)):
        pos = sorted(lab["x"] if group is keys else lab["y"] for lab in group)
        gaps = [(b - a) * across for a, b in itertools.pairwise(pos)]
        assert min(gaps) >= group[0]["font"], (n, group[0]["font"], min(gaps), [g["text"] for g in group][:6])


def test_legend_numbers_are_thinned_to_what_fits(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=the+cat+sat")
    kept = page.evaluate(
        """async () => {
          const ex = await import('/static/js/exporter.js');
          return [ex.fittingTicks([24, 24, 24, 24, 24], 180), ex.fittingTicks([40, 40, 40, 40, 40], 180),
                  ex.fittingTicks([60, 60, 60, 60, 60], 180),
                  ex.fittingTicks([100, 100, 100], 180)];
        }"""
    )
    assert kept[0] == [True] * 5
    assert kept[1] == [True, False, True, False, True]
    assert kept[2] == [True, False, False, False, True]
    assert kept[3] == [True, False, True]


# ---- the panels keep their size at any length ----

PANEL_HEIGHTS = """() => Object.fromEntries(
  [...document.querySelectorAll('#views [data-col] > section.panel, #views [data-col] > * > section.panel')]
  .filter((e) => e.offsetParent && (e.dataset.view || e.id))
  .map((e) => [e.dataset.view || e.id, Math.round(e.getBoundingClientRect().height)]))"""

WORKSPACES = ["explore", "test", "inside", "mechanics", "lessons", "long"]


def flow_box(page: Page) -> dict[str, Any]:
    return page.evaluate(
        """() => {
          // the diagram (the panel below it holds, for a run small enough, the Q, K, V numbers in a closed details)
          const p = document.getElementById('flow').getBoundingClientRect();
          const icons = [...document.querySelectorAll('#flow .flow-head canvas')].map((c) => {
            const r = c.getBoundingClientRect();
            return [Math.round(r.width), Math.round(r.height), Number(c.dataset.rows), Number(c.dataset.cols)];
          });
          return { height: Math.round(p.height), icons };
        }"""
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_flow_panel_is_as_tall_at_256_tokens_as_at_8(
    live_server: str, at_width: Callable[[int], Page], width: int
) -> None:
    page = at_width(width)
    seen = {}
    for n in (8, 256):
        page.goto(f"{live_server}/?m=random&t={quote_plus(words(n))}&heads=8&ws=inside")
        settled(page)
        seen[n] = flow_box(page)
    assert abs(seen[256]["height"] - seen[8]["height"]) <= 4, seen
    # each head's icon is the same 36 px square, 256 positions reduced to 36 x 36 blocks
    assert {tuple(i[:2]) for i in seen[8]["icons"]} == {tuple(i[:2]) for i in seen[256]["icons"]} == {(36, 36)}, seen
    assert {tuple(i[2:]) for i in seen[256]["icons"]} == {(36, 36)}


def answered(page: Page, pending: set[Any]) -> None:
    """Every request the page was going to send has been sent (settle) and answered, and the answers painted (two
    animation frames after the last): a panel filled by its own request (head types, the audit) has its height."""
    settle(page)
    page_until(page, lambda: not pending, "every request of the page answered")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def test_no_panel_grows_with_length(live_server: str, page: Page) -> None:
    """Every panel of the page at 16 and at 256 tokens: none taller by more than a line of text, but the token list,
    which shows its first tokens and a button for the rest."""
    pending: set[Any] = set()
    page.on("request", lambda r: None if r.url.endswith(SENTINEL) else pending.add(r))  # settle's own: unread
    page.on("requestfinished", lambda r: pending.discard(r))
    page.on("requestfailed", lambda r: pending.discard(r))
    heights = {}
    for n in (16, 256):
        page.goto(f"{live_server}/?m=random&t={quote_plus(words(n))}&heads=4&causal=1")
        settled(page)
        heights[n] = {}
        for ws in WORKSPACES:  # each workspace's panels, drawn when it is shown
            open_workspace(page, ws)
            answered(page, pending)
            heights[n].update(page.evaluate(PANEL_HEIGHTS))
    grown = {
        k: (heights[16][k], h)
        for k, h in heights[256].items()
        if k in heights[16] and k != "tokens" and h > heights[16][k] + 24
    }
    assert len(heights[256]) > 8, heights
    assert grown == {}, heights


def test_the_flow_numbers_scroll_inside_their_box_at_length(live_server: str, page: Page) -> None:
    """Q, K, V, contexts and output at 256 tokens (a run small enough to carry them): 256 rows a table, held in a box
    that scrolls rather than a panel thousands of px tall."""
    page.goto(f"{live_server}/?m=random&t={quote_plus(words(256))}&d_model=8&heads=2&ws=inside")
    settled(page)
    numbers = page.locator("#numbers")
    expect(numbers).to_be_visible()
    numbers.locator("summary").click()
    expect(numbers.locator("table").first).to_be_attached()
    assert numbers.locator("table").first.locator("tr").count() == 256
    box = numbers.bounding_box()
    assert box is not None and box["height"] < 520, box
