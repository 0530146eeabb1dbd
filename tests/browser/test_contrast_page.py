"""The contrast control for a claim: the MiniLM example "it -> animal" beside its declared contrast ("... too
wide"), the open head's weight from "it" to "animal" in both texts, checked against /api/attention's weights."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace, wait_idle

pytestmark = pytest.mark.browser

MINILM_EXAMPLE = "MiniLM: which heads make “it” look at “animal”?"
TIRED = "The animal didn't cross the street because it was too tired"
WIDE = "The animal didn't cross the street because it was too wide"


def weight(base: str, text: str, layer: int, head: int, q: int, k: int) -> float:
    body = {"model": "minilm", "text": text, "layer": layer, "include": ["weights"]}
    resp = httpx.post(f"{base}/api/attention", json=body, timeout=60)
    assert resp.status_code == 200, resp.text[:300]
    return float(resp.json()["layers"][0]["heads"][head]["weights"][q][k])


def test_the_example_runs_its_contrast_and_shows_both_weights(
    open_trained: Callable[..., Page], trained_server: str
) -> None:
    page = open_trained()
    value = page.locator("#example-select option", has_text=MINILM_EXAMPLE).get_attribute("value")
    assert value
    page.locator("#example-select").select_option(value)
    expect(page.get_by_test_id("top-heads").locator("button")).to_have_count(10)
    wait_idle(page)
    open_workspace(page, "test")  # the contrast sits with the other tests of a claim
    expect(page.get_by_test_id("contrast-text")).to_have_value(WIDE)  # the example's declared contrast
    with page.expect_response(lambda r: r.url.endswith("/api/compare")) as resp:
        page.get_by_test_id("contrast-run").click()
    sent = resp.value.request.post_data_json
    assert sent["a"]["text"] == TIRED and sent["b"]["text"] == WIDE
    layer = sent["a"]["layer"]
    tokens = resp.value.json()["a"]["tokens"]
    q, k = tokens.index("it"), tokens.index("animal")
    assert "pair=" in page.url and f"pair={q}-{k}" in page.url
    focus = page.evaluate("new URLSearchParams(location.search).get('focus')")  # "5.11": the head open large
    result = page.get_by_test_id("contrast-result")
    mine = result.locator("tr[data-side=a] td[data-key=weight]")
    theirs = result.locator("tr[data-side=b] td[data-key=weight]")
    expect(mine).to_have_count(1)
    shown_a, shown_b = (
        float(mine.get_attribute("data-value") or "nan"),
        float(theirs.get_attribute("data-value") or "nan"),
    )
    reading = result.locator(".contrast-reading").inner_text()
    name = reading.split(" puts ")[0]  # "L5 H11"
    got_layer, got_head = int(name.split()[0][1:]), int(name.split()[1][1:])
    assert got_layer == layer and (focus is None or focus == f"{got_layer}.{got_head}")
    want_a = weight(trained_server, TIRED, layer, got_head, q, k)
    want_b = weight(trained_server, WIDE, layer, got_head, q, k)
    assert shown_a == pytest.approx(want_a, abs=1e-6) and shown_b == pytest.approx(want_b, abs=1e-6)
    expect(mine).to_have_text(f"{want_a:.3f}")
    expect(theirs).to_have_text(f"{want_b:.3f}")
    assert f"puts {want_a:.2f}" in reading and f"and {want_b:.2f} in the contrast" in reading
    kept = min(want_a, want_b) / max(want_a, want_b)
    if abs(want_a - want_b) < 0.05:
        assert "does not resolve" in reading
    elif kept >= 0.5:
        assert f"keeps {round(100 * kept)}%" in reading and "weak evidence" in reading
    else:
        assert "follows the change" in reading
    assert "contrast=" in page.url
