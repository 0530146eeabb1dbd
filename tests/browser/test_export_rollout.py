"""The standalone export of attention rollout and attention flow in Chromium: a file saved with include rollout or
attention_flow (by POST /api/export, or by the page's Export button with the rollout panel on), opened from disk
with the network cut off, draws each layer's map equal to what /api/attention answers for the same body (float16
tolerance), under a line naming the fuse and the residual, and makes no request and logs no error."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import BrowserContext, Page

from tests.browser.conftest import wait_idle
from tests.browser.test_export import Offline, draws, export, offline_tab, open_file

pytestmark = pytest.mark.browser

INDUCTION = {"model": "induction", "text": "red ball king river red ball king river"}


def offline_page(page: Page, context: BrowserContext) -> Offline:
    """The test's tab, offline but for files (see offline_tab), recording what it asked and its errors."""
    log = offline_tab(page, context)
    log.page.on("request", lambda r: log.requests.append(r.url))
    log.page.on("console", lambda m: log.errors.append(m.text) if m.type == "error" else None)
    log.page.on("pageerror", lambda e: log.errors.append(str(e)))
    return log


def drawn_maps(page: Page, method: str) -> dict[int, np.ndarray]:
    """Each drawn map of `method` by its layer: the rows its heatmap was painted from."""
    maps = page.locator(f"[data-testid=rollout-map][data-method={method}]")
    out = {}
    for i in range(maps.count()):
        fig = maps.nth(i)
        out[int(fig.get_attribute("data-layer") or -1)] = np.array(fig.evaluate("(f) => f.drawn"), dtype=float)
    return out


def hover_map(page: Page, method: str, layer: int, q: int, k: int) -> str:
    fig = page.locator(f"[data-testid=rollout-map][data-method={method}][data-layer='{layer}']")
    layout = fig.evaluate("(f) => JSON.parse(f.dataset.layout)")
    box = fig.locator("canvas").bounding_box()
    assert box is not None
    c = layout["cell"]
    page.mouse.move(box["x"] + layout["left"] + (k + 0.5) * c, box["y"] + layout["top"] + (q + 0.5) * c)
    page.wait_for_selector("[data-testid=tooltip]:not([hidden])")
    return page.locator("[data-testid=tooltip]").inner_text()


def cell_luminance(page: Page, method: str, layer: int) -> np.ndarray:
    """The luminance at the centre of each cell of a drawn map (viridis and cividis grow lighter with the value)."""
    fig = page.locator(f"[data-testid=rollout-map][data-method={method}][data-layer='{layer}']")
    return np.array(
        fig.evaluate(
            """(f) => {
              const L = JSON.parse(f.dataset.layout), c = f.querySelector("canvas");
              const r = c.width / c.getBoundingClientRect().width, ctx = c.getContext("2d");
              return f.drawn.map((_, q) => f.drawn.map((_, k) => {
                const x = Math.floor((L.left + (k + 0.5) * L.cell) * r);
                const y = Math.floor((L.top + (q + 0.5) * L.cell) * r);
                const [R, G, B] = ctx.getImageData(x, y, 1, 1).data;
                return 0.2126 * R + 0.7152 * G + 0.0722 * B;
              }));
            }"""
        )
    )


def ranks(a: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(a.ravel(), kind="stable"), kind="stable").astype(float)


def check_drawn(page: Page, method: str, field: str, want: dict[str, Any]) -> None:
    got = drawn_maps(page, method)
    assert sorted(got) == [layer["index"] for layer in want["layers"]]
    for layer in want["layers"]:
        np.testing.assert_allclose(got[layer["index"]], np.array(layer[field]), rtol=1e-3, atol=1e-3)
        selector = f"[data-testid=rollout-map][data-method={method}][data-layer='{layer['index']}'] canvas"
        assert draws(page, selector) > 5, f"layer {layer['index']}'s {method} map is blank"
        # the image, not only its data: each cell's colour grows lighter with the API's value there
        light, value = cell_luminance(page, method, layer["index"]), np.array(layer[field])
        assert np.corrcoef(ranks(light), ranks(value))[0, 1] > 0.9, (light.round(), value.round(2))


@pytest.mark.parametrize(("field", "method"), [("rollout", "rollout"), ("attention_flow", "flow")])
def test_an_export_with_rollout_or_flow_draws_every_layers_map_offline(
    full_length_server: str, page: Page, context: BrowserContext, tmp_path: Path, field: str, method: str
) -> None:
    options = {"heads": "max", "residual": False}
    body = {**INDUCTION, "view": "all", "include": [field], "rollout": options}
    path = export(full_length_server, body, tmp_path / f"induction-{method}.html")
    plain = export(full_length_server, {**INDUCTION, "view": "all"}, tmp_path / "induction.html")
    want = httpx.post(
        f"{full_length_server}/api/attention", json={**INDUCTION, "include": [field], "rollout": options}, timeout=60
    ).json()
    log = offline_page(page, context)
    open_file(log, path)
    section = page.locator(f"[data-testid=sa-{method}]")
    assert section.is_visible()
    assert "fused by max" in section.inner_text() and "no residual" in section.inner_text()
    check_drawn(page, method, field, want)
    other = "flow" if method == "rollout" else "rollout"
    assert page.locator(f"[data-testid=rollout-map][data-method={other}]").count() == 0
    # the hover reads the cell under the pointer: position 7 after layer 1, input 4
    tip = hover_map(page, method, 1, 7, 4)
    assert "position 7" in tip and "input 4" in tip, tip
    share = re.search(r"share (\d\.\d+)", tip)
    assert share is not None and abs(float(share.group(1)) - want["layers"][1][field][7][4]) < 1e-3, tip
    # the maps stay through a change of view, and follow the palette
    page.select_option("#sa-view-select", "layer")
    page.select_option("#palette-select", "cividis")
    check_drawn(page, method, field, want)
    assert log.left() == [] and log.errors == []
    # a file without them has no such section
    bare = open_file(log, plain)  # the same tab, a new document
    assert bare.locator("#sa-stacked").is_hidden() and bare.locator("[data-testid=rollout-map]").count() == 0


def test_the_export_button_sends_the_rollout_panels_flow_and_the_file_draws_it(
    full_length_server: str, page: Page, context: BrowserContext, tmp_path: Path
) -> None:
    """The page with the rollout panel on, method flow, fused by min, the residual on (rollout=min.1.flow in the
    link): its Export button sends include attention_flow with those options, and the file draws that flow."""
    page.goto(f"{full_length_server}/?m=induction&t=red+ball+king+river+red+ball&layer=1&rollout=min.1.flow")
    wait_idle(page)
    page.wait_for_function("() => document.getElementById('rollout-grid').dataset.drawn === 'min.1.flow'")
    button = page.locator("[data-testid=export-html]")
    assert "attention flow" in button.inner_text()
    with page.expect_request("**/api/export") as sent, page.expect_download() as dl:
        button.click()
    body = sent.value.post_data_json
    assert body["include"] == ["attention_flow"] and body["rollout"] == {"heads": "min", "residual": True}
    assert body["layer"] == 1
    path = tmp_path / dl.value.suggested_filename
    dl.value.save_as(path)
    same = {k: v for k, v in body.items() if k not in ("view", "head", "query", "palette", "title", "matrix")}
    want = httpx.post(f"{full_length_server}/api/attention", json=same, timeout=60).json()
    # the page's own flow panel's map for layer 1, read before the tab opens the file
    on_page = np.array(
        page.locator("#rollout-grid [data-testid=rollout-map][data-layer='1']").evaluate("(f) => f.drawn"), dtype=float
    )
    log = offline_page(page, context)
    opened = open_file(log, path)
    assert "fused by min" in opened.locator("[data-testid=sa-flow]").inner_text()
    check_drawn(opened, "flow", "attention_flow", want)
    # the page's own flow panel drew the same map for layer 1
    np.testing.assert_allclose(drawn_maps(opened, "flow")[1], on_page, atol=1e-3)
    assert log.left() == [] and log.errors == []
