"""The Long input panel's blocks, above single weights, as their largest or their mean weight (the tiles' `agg`): the
block under the pointer says the value the API's tile of that kind holds, the tiles asked are of that kind, and the
overview is drawn from the summary of that kind. And a tile still on its way, drawn from its coarser parent."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import PageLog
from tests.browser.test_deepzoom_page import TILE_URL, hover_cell, open_long, run_text, settle

pytestmark = pytest.mark.browser

OVERVIEW_PIXELS = """() => Array.from(document.querySelector('#dz-overview canvas').getContext('2d')
  .getImageData(0, 0, 64, 64).data)"""


def block_value(base: str, run: str, agg: str, z: int, cell: dict[str, str]) -> float:
    """The API tile's value (of kind `agg`, level z) for the block holding the hovered cell."""
    q, k = int(cell["query"]), int(cell["key"])
    span = 256 * int(cell.get("cell") or 1)
    r = httpx.get(f"{base}/api/runs/{run}/tiles/0/0/{z}/{k // span}/{q // span}?agg={agg}", timeout=30)
    assert r.status_code == 200, r.text
    t = r.json()
    size = t["cell"]
    return float(t["weights"][(q - t["q0"]) // size][(k - t["k0"]) // size])


def test_blocks_show_their_largest_or_their_mean_weight(page: Page, page_log: PageLog, live_server: str) -> None:
    open_long(page, live_server)
    run = run_text(page, words=5000)
    level = page.get_by_test_id("dz-level")
    z = int(level.get_attribute("data-z") or -1)
    assert 0 <= z < run["config"]["levels"]  # the whole matrix: blocks, not single weights
    expect(page.get_by_test_id("dz-agg")).to_have_value("max")
    expect(level).to_contain_text("their largest weight")
    largest = hover_cell(page, -60, 60)
    cell = 2 ** (run["config"]["levels"] - z)
    assert largest["exact"] == "0"
    want = block_value(live_server, run["name"], "max", z, {**largest, "cell": str(cell)})
    assert float(largest["weight"]) == pytest.approx(want, rel=1e-6)
    before = page.evaluate(OVERVIEW_PIXELS)

    since = len(page_log.requests)
    page.get_by_test_id("dz-agg").select_option("mean")
    expect(level).to_contain_text("their mean weight")
    settle(page)
    asked = [u for u in page_log.requests[since:] if TILE_URL.search(u)]
    assert asked and all(u.endswith("?agg=mean") for u in asked), asked
    mean = hover_cell(page, -60, 60)
    assert (mean["query"], mean["key"]) == (largest["query"], largest["key"])
    want = block_value(live_server, run["name"], "mean", z, {**mean, "cell": str(cell)})
    assert float(mean["weight"]) == pytest.approx(want, rel=1e-6)
    assert 0 < want < float(largest["weight"])  # a block's mean is under its largest weight
    expect(page.get_by_test_id("dz-cell")).to_contain_text("mean weight")
    assert page.evaluate(OVERVIEW_PIXELS) != before  # the overview is the means' now
    assert not page_log.page_errors


def test_a_tile_on_its_way_shows_its_coarser_parent(page: Page, page_log: PageLog, live_server: str) -> None:
    open_long(page, live_server)
    run_text(page, words=5000)
    level = page.get_by_test_id("dz-level")
    z = int(level.get_attribute("data-z") or -1)
    assert level.get_attribute("data-stand-ins") == "0"  # every tile of the fitted level is in
    held: list[Route] = []
    finer = re.compile(rf"/tiles/0/0/{z + 1}/")
    page.route(finer, lambda r: held.append(r))  # the next level's tiles wait
    page.get_by_test_id("dz-canvas").press("+")
    expect(level).to_have_attribute("data-z", str(z + 1))
    page.wait_for_function("() => Number(document.getElementById('dz-level').dataset.waiting) > 0")
    # each tile asked for is drawn meanwhile from its parent, kept from the level before
    assert int(level.get_attribute("data-stand-ins") or 0) == int(level.get_attribute("data-waiting") or 0) > 0
    for route in held:
        route.continue_()
    page.unroute(finer)
    settle(page)
    assert level.get_attribute("data-stand-ins") == "0"
    assert not page_log.page_errors
