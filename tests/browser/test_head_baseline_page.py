"""The head-types table beside each score's shuffled baseline (POST /api/heads include baseline): the numbers
under each score are the API's, and the box round-trips through the link."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace

pytestmark = pytest.mark.browser


def above_text(b: dict, key: str) -> str:
    digits = 2 if key == "mean_distance" else 3
    z = "z –" if b["z"] is None else f"z {b['z']:.1f}"
    size = f"{abs(b['above']):.{digits}f}"
    return f"{'−' if b['above'] < 0 and float(size) > 0 else '+'}{size} · {z}"


def test_the_table_shows_how_far_each_head_stands_above_its_shuffles(open_page: Callable[..., Page]) -> None:
    page = open_page()
    open_workspace(page, "inside")
    expect(page.locator("#headtypes tbody tr[data-testid=head-type-row]").first).to_be_visible()
    assert page.locator("#headtypes .ht-above").count() == 0
    with page.expect_response(lambda r: r.url.endswith("/api/heads") and r.request.method == "POST") as resp:
        page.get_by_test_id("ht-baseline").check()
    assert resp.value.request.post_data_json["include"] == ["baseline"]
    body = resp.value.json()
    assert body["permutations"] == 20
    for r in body["heads"]:
        row = page.locator(f"#headtypes tbody tr[data-layer='{r['layer']}'][data-head='{r['head']}']")
        for key in ("previous_token", "mean_distance"):
            b = r["baselines"][key]
            expect(row.locator(f"td[data-col={key}] .ht-above")).to_have_text(above_text(b, key))
        expect(row.locator("td[data-col=entropy] .ht-above")).to_have_count(0)
    expect(page.locator("#headtypes-measured")).to_contain_text("20 shuffles")
    assert "hbase=1" in page.url
    page.reload()
    expect(page.get_by_test_id("ht-baseline")).to_be_checked()
    expect(page.locator("#headtypes .ht-above").first).to_be_visible()
