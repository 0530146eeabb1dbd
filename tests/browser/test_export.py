"""The standalone export in Chromium: a file saved by POST /api/export (or the page's Export HTML button) opened from
disk with the network cut off: it draws, hovers, switches heads, queries, layers and views, makes no request that
leaves the file and logs no error; MiniLM's 512 tokens, every layer, open and draw the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Page, Route

import attnlab
from tests.browser.conftest import wait_idle
from wire.arrays import read_arrays
from wire.standalone import read_embedded

pytestmark = pytest.mark.browser

MODELS = "textbook,random,custom,induction,minilm"
INDUCTION = {"model": "induction", "text": "red ball king river red ball king river"}
# 36 x 14 word pieces + 6 + [CLS] and [SEP]: MiniLM's 512 positions, every one
LONG = " ".join(["The animal didn't cross the street because it was too tired."] * 36) + " the cat sat on the mat"


@dataclass
class Offline:
    """A page whose every request is recorded and, unless it is the file itself, refused."""

    page: Page
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def left(self) -> list[str]:
        return [u for u in self.requests if not u.startswith("file://")]


@pytest.fixture
def offline(page: Page) -> Offline:
    """The session's tab with every request but the file's refused (the route is the tab's: the tab takes it off when
    the test ends, and a routed tab asks the network for everything, nothing from its cache)."""
    log = Offline(page)

    def only_files(route: Route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", only_files)
    page.on("request", lambda r: log.requests.append(r.url))
    page.on("console", lambda m: log.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log.errors.append(str(e)))
    return log


def export(base: str, body: dict[str, Any], path: Path, timeout: float = 60) -> Path:
    resp = httpx.post(f"{base}/api/export", json=body, timeout=timeout)
    assert resp.status_code == 200, resp.text[:500]
    path.write_bytes(resp.content)
    return path


def open_file(log: Offline, path: Path, timeout: float = 60_000) -> Page:
    page = log.page
    page.goto(path.as_uri())
    page.wait_for_function("() => document.body.dataset.drawn", timeout=timeout)
    assert page.evaluate("() => document.body.dataset.drawn") != "error", page.locator("#sa-error").inner_text()
    return page


def draws(page: Page, selector: str = "[data-testid=head-heatmap] canvas") -> int:
    """Distinct colours on the first canvas that matches: a blank or one-colour canvas has 1."""
    return int(
        page.evaluate(
            """(sel) => {
              const c = document.querySelector(sel);
              const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
              const seen = new Set();
              for (let i = 0; i < d.length; i += 4) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
              return seen.size;
            }""",
            selector,
        )
    )


def hover_cell(page: Page, card: str, q: int, k: int) -> str:
    fig = page.locator(card)
    layout = fig.evaluate("(f) => JSON.parse(f.dataset.layout)")
    box = fig.locator("canvas").bounding_box()
    assert box is not None
    c = layout["cell"]
    page.mouse.move(box["x"] + layout["left"] + (k + 0.5) * c, box["y"] + layout["top"] + (q + 0.5) * c)
    page.wait_for_selector("[data-testid=tooltip]:not([hidden])")
    return page.locator("[data-testid=tooltip]").inner_text()


def test_export_opens_offline_and_hover_head_query_layer_and_view_work(
    full_length_server: str, offline: Offline, tmp_path: Path
) -> None:
    path = export(full_length_server, {**INDUCTION, "view": "layer"}, tmp_path / "induction.html")
    result = read_arrays(read_embedded(path.read_text()))
    tokens = result["tokens"]
    page = open_file(offline, path)
    cards = page.locator("[data-testid=head-heatmap]")
    assert cards.count() == len(result["layers"][0]["heads"])
    assert draws(page) > 20
    layer0 = cards.first.locator("canvas").screenshot()

    # hover: the query and key tokens and the weight the file holds, and the row/column lit in every head
    text = hover_cell(page, "[data-testid=head-heatmap] >> nth=1", 5, 4)
    weight = float(result["layers"][0]["heads"][1]["weights"][5, 4])
    assert f"query 5 “{tokens[5]}”" in text and f"key 4 “{tokens[4]}”" in text, text
    assert f"weight {weight:.4f}" in text, text
    assert cards.nth(0).get_attribute("data-highlight") == "5,4"

    # switch layers: the other layer's heads, drawn differently
    page.select_option("[data-testid=layer-select]", "1")
    page.wait_for_selector("[data-testid=head-heatmap][data-layer='1']")
    assert cards.first.locator("canvas").screenshot() != layer0

    # choose a head: it opens large, with the retrieval of the last query; then choose another query
    page.select_option("#sa-view-select", "head")
    page.select_option("#head-select", "1")
    large = page.locator("[data-testid=head-heatmap]")
    assert large.count() == 1 and large.get_attribute("data-head") == "1" and large.get_attribute("data-layer") == "1"
    diagram = page.locator("[data-testid=retrieval-diagram]")
    assert diagram.get_attribute("data-query") == str(len(tokens) - 1)
    page.select_option("#query-select", "3")
    assert diagram.get_attribute("data-query") == "3"
    row = result["layers"][1]["heads"][1]["weights"][3]
    eligible = result["eligible"][3]
    drawn_keys = [int(k) for k in diagram.locator(".rd-key").evaluate_all("(gs) => gs.map((g) => g.dataset.key)")]
    assert drawn_keys == list(range(len(tokens)))
    numbers = diagram.locator(".rd-key .rd-num").all_text_contents()
    for k, shown in enumerate(numbers):
        assert (shown == f"{row[k]:.3f}") if eligible[k] else shown.startswith("✕"), (k, shown)
    # a click on a row of the large head retrieves for that query
    text = hover_cell(page, "[data-testid=head-heatmap]", 6, 2)
    assert f"query 6 “{tokens[6]}”" in text
    page.mouse.down()
    page.mouse.up()
    assert diagram.get_attribute("data-query") == "6"

    # every layer at a glance: one thumbnail a head; pressing one opens it large
    page.select_option("#sa-view-select", "all")
    thumbs = page.locator("[data-testid=overview-head]")
    assert thumbs.count() == sum(len(layer["heads"]) for layer in result["layers"])
    page.locator("[data-testid=overview-head][data-layer='0'][data-head='1']").click()
    large = page.locator("[data-testid=head-heatmap]")
    assert large.get_attribute("data-layer") == "0" and large.get_attribute("data-head") == "1"
    assert draws(page) > 20

    assert offline.left() == [], offline.left()
    assert offline.requests == [path.as_uri()]
    assert offline.errors == []


def test_export_opens_on_the_view_asked_for(full_length_server: str, offline: Offline, tmp_path: Path) -> None:
    body = {**INDUCTION, "view": "head", "layer": 1, "head": 2, "query": 4, "palette": "cividis"}
    page = open_file(offline, export(full_length_server, body, tmp_path / "head.html"))
    large = page.locator("[data-testid=head-heatmap]")
    assert large.get_attribute("data-layer") == "1" and large.get_attribute("data-head") == "2"
    assert page.locator("[data-testid=retrieval-diagram]").get_attribute("data-query") == "4"
    assert page.locator("#palette-select").input_value() == "cividis"
    assert page.locator("[data-testid=layer-select]").is_disabled()  # one layer embedded: nothing to switch to
    assert offline.left() == [] and offline.errors == []


def test_export_prints_positions_from_1_when_asked(full_length_server: str, offline: Offline, tmp_path: Path) -> None:
    body = {**INDUCTION, "view": "head", "layer": 1, "head": 2, "query": 4}
    chosen = "#query-select option:checked"
    page = open_file(offline, export(full_length_server, body, tmp_path / "from0.html"))
    assert page.locator(chosen).inner_text().split()[0] == "4"
    page = open_file(offline, export(full_length_server, {**body, "positions_from": 1}, tmp_path / "from1.html"))
    assert page.locator(chosen).inner_text().split()[0] == "5"
    assert page.locator("[data-testid=retrieval-diagram]").get_attribute("data-query") == "4"  # the data's index
    assert offline.left() == [] and offline.errors == []


def test_export_follows_a_dark_system_theme(full_length_server: str, offline: Offline, tmp_path: Path) -> None:
    path = export(full_length_server, {**INDUCTION, "view": "layer"}, tmp_path / "dark.html")
    offline.page.emulate_media(color_scheme="dark")
    page = open_file(offline, path)
    bg = page.evaluate("() => getComputedStyle(document.documentElement).backgroundColor")
    page.emulate_media(color_scheme="light")
    assert bg != page.evaluate("() => getComputedStyle(document.documentElement).backgroundColor")


@pytest.mark.slow
def test_minilm_512_tokens_every_layer_opens_and_draws_offline(
    full_length_server: str, offline: Offline, tmp_path: Path
) -> None:
    path = export(full_length_server, {"model": "minilm", "text": LONG, "view": "all"}, tmp_path / "minilm.html", 300)
    result = read_arrays(read_embedded(path.read_text()))
    S = len(result["tokens"])
    values = sum(h["weights"].size for layer in result["layers"] for h in layer["heads"])
    assert S == 512 and len(result["layers"]) == 6 and values == 72 * 512 * 512
    size = path.stat().st_size
    assert size / values <= 2.5, f"{size / values:.2f} bytes per attention value ({size / 1e6:.1f} MB)"
    page = open_file(offline, path, timeout=120_000)
    thumbs = page.locator("[data-testid=overview-head]")
    assert thumbs.count() == 72
    assert draws(page, "[data-testid=overview-head] canvas") > 5
    page.locator("[data-testid=overview-head][data-layer='5'][data-head='11']").click()
    page.wait_for_selector("[data-testid=head-heatmap][data-layer='5'][data-head='11']")
    assert draws(page) > 5
    page.select_option("#sa-view-select", "layer")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=head-heatmap]').length === 12")
    assert draws(page) > 5
    assert offline.left() == [] and offline.errors == []


def test_the_page_export_button_downloads_a_file_that_opens_offline(
    full_length_server: str, page: Page, tmp_path: Path
) -> None:
    page.goto(f"{full_length_server}/?m=induction&layer=1&focus=1.2")
    wait_idle(page)
    button = page.locator("[data-testid=export-html]")
    assert button.is_enabled()
    with page.expect_request("**/api/export") as sent, page.expect_download() as dl:
        button.click()
    body = sent.value.post_data_json
    assert body["model"] == "induction" and body["view"] == "head" and body["layer"] == 1 and body["head"] == 2
    assert "include" not in body and "precision" not in body
    assert dl.value.suggested_filename == "attnlab-induction-head-L1-H2.html"
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    assert "Saved" in page.locator("#share-status").inner_text()
    result = read_arrays(read_embedded(path.read_text()))
    same = {k: v for k, v in body.items() if k not in ("view", "head", "query", "palette", "title")}
    want = httpx.post(f"{full_length_server}/api/attention", json={**same, "include": ["weights"]}, timeout=60).json()
    assert result["tokens"] == want["tokens"]
    np.testing.assert_allclose(
        result["layers"][0]["heads"][2]["weights"], want["layers"][0]["heads"][2]["weights"], rtol=1e-3, atol=1e-4
    )
    offline_page = page  # the same tab, cut off from everything but the file
    log = Offline(offline_page)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    offline_page.on("request", lambda r: log.requests.append(r.url))
    offline_page.on("pageerror", lambda e: log.errors.append(str(e)))
    opened = open_file(log, path)
    assert opened.locator("[data-testid=head-heatmap]").get_attribute("data-head") == "2"
    assert draws(opened) > 20
    assert log.left() == [] and log.errors == []


def test_the_page_counting_from_1_exports_a_file_that_does_too(
    full_length_server: str, page: Page, tmp_path: Path
) -> None:
    page.goto(f"{full_length_server}/?m=induction&layer=1&focus=1.2&query=4&from1=1")
    wait_idle(page)
    with page.expect_request("**/api/export") as sent, page.expect_download() as dl:
        page.locator("[data-testid=export-html]").click()
    assert sent.value.post_data_json["positions_from"] == 1
    path = tmp_path / "from1.html"
    dl.value.save_as(path)
    log = Offline(page)  # the same tab, cut off from everything but the file
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    log.page.on("pageerror", lambda e: log.errors.append(str(e)))
    opened = open_file(log, path)
    assert opened.locator("#query-select option:checked").inner_text().split()[0] == "5"
    assert log.errors == []


def test_show_draws_inside_its_sandboxed_iframe(offline: Offline, tmp_path: Path) -> None:
    """attnlab.show's output as a notebook renders it: an iframe with srcdoc, scripts only (an opaque origin)."""
    view = attnlab.show(INDUCTION["model"], INDUCTION["text"], layer=1, view="head", head=3, query=5)
    host = tmp_path / "notebook.html"
    host.write_text(f"<!doctype html><html><body><h1>a notebook</h1>{view._repr_html_()}</body></html>")
    page = offline.page
    page.goto(host.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("[data-testid=retrieval-diagram][data-query='5']").wait_for(timeout=30_000)
    inner = next(f for f in page.frames if f is not page.main_frame)
    assert inner.evaluate("() => document.body.dataset.drawn") == "1"
    assert inner.evaluate("() => origin") == "null"  # sandboxed: not the host page's origin
    large = frame.locator("[data-testid=head-heatmap]")
    assert large.get_attribute("data-layer") == "1" and large.get_attribute("data-head") == "3"
    assert offline.left() == [] and offline.errors == []


# ---- the page and the file draw with the same views ------------------------------------------------------------

# What the heads grid and the retrieval diagram drew, as geometry: each head's cell layout and canvas size; the
# diagram's size, its rows' boxes and its lines' paths and widths.
DRAWN_JS = """() => {
  const grid = document.querySelector('.heads-grid');
  const svg = document.querySelector('[data-testid=retrieval-diagram]');
  const attrs = (sel, names) =>
    svg ? [...svg.querySelectorAll(sel)].map((e) => names.map((n) => e.getAttribute(n))) : null;
  return {
    width: grid ? grid.clientWidth : null,
    heads: grid ? [...grid.querySelectorAll('[data-testid=head-heatmap]')].map((f) => {
      const c = f.querySelector('canvas');
      return {head: f.dataset.head, layout: JSON.parse(f.dataset.layout), size: [c.style.width, c.style.height]};
    }) : null,
    viewBox: svg ? svg.getAttribute('viewBox') : null,
    keys: attrs('.rd-key rect', ['y', 'height']),
    queries: attrs('.rd-query rect', ['y', 'height']),
    lines: attrs('.rd-line', ['d', 'stroke-width', 'data-key']),
  };
}"""


def drawn(page: Page) -> dict[str, Any]:
    return page.evaluate(DRAWN_JS)


def test_the_page_and_its_export_draw_the_heads_grid_and_the_retrieval_alike(
    full_length_server: str, page: Page, tmp_path: Path
) -> None:
    """One run drawn on the page and in its exported file: the same cell size and layout for every head of the grid
    (at the grid's width), the same diagram rows, row height and line widths (the file's weights are float16: the
    widths agree to within its precision). A copy of the views in the file, with its own row height, line width or
    cell size, fails this."""
    text = "red ball king river red ball king river"
    page.goto(f"{full_length_server}/?m=induction&t={text.replace(' ', '+')}&focus=0.1&query=5")
    wait_idle(page)
    on_page = drawn(page)
    assert len(on_page["heads"]) == 4 and len(on_page["lines"]) == 8, on_page

    offline = Offline(page)  # the same tab, cut off from everything but the file
    offline.page.route(
        "**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort()
    )
    offline.page.on("pageerror", lambda e: offline.errors.append(str(e)))
    body = {"model": "induction", "text": text, "layer": 0}
    grid_file = export(full_length_server, {**body, "view": "layer"}, tmp_path / "layer.html")
    file_page = open_file(offline, grid_file)
    # the file's grid as wide as the page's: a grid's cell size follows its width (the window widened by what the
    # grid lacks, again while the file's margins take part of each step)
    in_file = drawn(file_page)
    for _ in range(4):
        grown = on_page["width"] - in_file["width"]
        if grown == 0:
            break
        viewport = file_page.viewport_size
        assert viewport is not None
        file_page.set_viewport_size({"width": viewport["width"] + grown, "height": viewport["height"]})
        file_page.reload()
        file_page.wait_for_function("() => document.body.dataset.drawn")
        in_file = drawn(file_page)
    assert in_file["width"] == on_page["width"]
    assert in_file["heads"] == on_page["heads"]

    head_file = export(full_length_server, {**body, "view": "head", "head": 1, "query": 5}, tmp_path / "head.html")
    file_page = open_file(offline, head_file)
    in_file = drawn(file_page)
    assert in_file["viewBox"] == on_page["viewBox"]
    assert in_file["keys"] == on_page["keys"] and in_file["queries"] == on_page["queries"]
    assert [(d, k) for d, _, k in in_file["lines"]] == [(d, k) for d, _, k in on_page["lines"]]
    widths = [
        (float(w_file), float(w_page))
        for (_, w_file, _), (_, w_page, _) in zip(in_file["lines"], on_page["lines"], strict=True)
    ]
    assert all(abs(a - b) < 0.02 for a, b in widths), widths
    assert offline.errors == []


def test_the_export_carries_the_sinks_view_and_the_moved_view(
    full_length_server: str, page: Page, tmp_path: Path
) -> None:
    """A page that hides the first token and draws Moved exports that view: the file's weights hide key 0 (rows
    renormalised), it embeds each head's value norms and opens drawing them, and it says which keys it hides."""
    page.goto(f"{full_length_server}/?m=induction&t=red+ball+king+river+red+ball&layer=1&sinks=first&view=moved")
    wait_idle(page)
    with page.expect_request("**/api/export") as sent, page.expect_download() as dl:
        page.locator("[data-testid=export-html]").click()
    body = sent.value.post_data_json
    assert body["sinks"] == {"hide": "first", "renormalise": True} and body["matrix"] == "moved"
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    result = read_arrays(read_embedded(path.read_text()))
    assert result["sinks"]["hidden"] == [0]
    same = {k: v for k, v in body.items() if k not in ("view", "head", "query", "palette", "title", "matrix")}
    want = httpx.post(
        f"{full_length_server}/api/attention",
        json={**same, "include": ["weights", "value_norms", "head_contributions"]},
        timeout=60,
    ).json()
    for got, head in zip(result["layers"][0]["heads"], want["layers"][0]["heads"], strict=True):
        weights = np.asarray(got["weights"], dtype=float)
        assert np.all(weights[:, 0] == 0)
        rows = weights.sum(axis=1)
        assert np.allclose(rows[rows > 0], 1, atol=2e-3)  # renormalised over keys 1.. (row 0 had only key 0)
        np.testing.assert_allclose(weights, head["weights"], rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(got["value_norms"], head["value_norms"], rtol=2e-3, atol=1e-3)
        np.testing.assert_allclose(got["contribution"], head["contribution"], rtol=2e-3, atol=1e-3)
    offline_page = page  # the same tab, cut off from everything but the file
    log = Offline(offline_page)
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file://") else route.abort())
    offline_page.on("pageerror", lambda e: log.errors.append(str(e)))
    opened = open_file(log, path)
    cards = opened.locator("[data-testid=head-heatmap]")
    assert cards.count() == 4 and cards.first.get_attribute("data-view") == "moved"
    assert cards.first.get_attribute("data-hidden") == "0"
    assert "moved" in opened.locator("#sa-summary").inner_text()
    assert "Hiding key 0" in opened.locator("#sa-sinks").inner_text()
    # each card's strip of what the head adds to the output: the embedded numbers, drawn
    strips = opened.locator("[data-testid=head-contribution]")
    assert strips.count() == 4
    drawn = strips.first.locator("rect").evaluate_all("(rs) => rs.map((r) => Number(r.dataset.value))")
    np.testing.assert_allclose(drawn, want["layers"][0]["heads"][0]["contribution"], rtol=2e-3, atol=1e-3)
    assert log.errors == []
