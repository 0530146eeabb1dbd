"""The scale sweep's trained heads on the page: minilm's every head beside the random vectors, the numbers the API
measured (tests/test_scale_trained.py checks the API against NumPy)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace

pytestmark = pytest.mark.browser

Open = Callable[..., Page]


def test_the_sweep_draws_minilms_heads_and_tabulates_their_spread(open_trained: Open) -> None:
    page = open_trained()
    open_workspace(page, "mechanics")
    with page.expect_response("**/api/scale-sweep") as resp:
        page.locator("#sweep-draw").click()
    assert resp.value.request.post_data_json["models"] == ["minilm"]  # the trained server has no pycode
    [minilm] = resp.value.json()["trained"]
    page.wait_for_function("() => document.getElementById('sweep-plot').dataset.drawn === '1'")
    traces = page.evaluate("document.getElementById('sweep-plot').data.map(t => ({name: t.name, y: t.y}))")
    heads = next(t for t in traces if t["name"] == "minilm's heads (raw q·k)")
    assert heads["y"] == [h["std_raw"] for h in minilm["heads"]]
    row = page.get_by_test_id("sweep-trained").locator("tr[data-model=minilm]")
    expect(row.locator("td[data-key=heads]")).to_have_text(str(len(minilm["heads"])))
    median_std = statistics.median(h["std_raw"] for h in minilm["heads"])
    expect(row.locator("td[data-key=std]")).to_have_text(f"{median_std:.2f}")
    median_pred = statistics.median(h["predicted_std"] for h in minilm["heads"])
    expect(row.locator("td[data-key=predicted]")).to_have_text(f"{median_pred:.2f}")
    ratios = [h["ratio"] for h in minilm["heads"]]
    ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
    expect(row.locator("td[data-key=ratio]")).to_have_text(ratio)
    expect(page.get_by_test_id("scale-sweep")).to_contain_text("minilm (72 heads, d_k = 32")
