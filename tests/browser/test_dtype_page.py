"""Display · "Compute in" (issue 25, item 6): the page sends `dtype` on /api/attention, keeps it in the link, shows
the answer's max difference from float32, and leaves it off the analyses that compute in the server's dtype."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle

pytestmark = pytest.mark.browser

Open = Callable[..., Page]


def test_choosing_bfloat16_recomputes_and_shows_the_servers_difference(
    open_page: Open, run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    page = open_page("?m=random&t=the+cat+sat+on+the+mat&causal=0")
    diff = page.get_by_test_id("dtype-diff")
    expect(diff).to_be_hidden()  # a float32 run is the reference
    body = run_and_wait(lambda: page.get_by_test_id("dtype-select").select_option("bfloat16"))
    expect(page).to_have_url(re.compile(r"dtype=bfloat16"))
    assert body["dtype"] == "bfloat16"
    expect(diff).to_contain_text("max difference from float32")
    # the number shown is the server's, measured against the same body at float32
    base = {k: v for k, v in body.items() if k != "dtype"}
    url = page.url.split("?")[0] + "api/attention"
    half = page.request.post(url, data=body).json()
    full = page.request.post(url, data=base).json()
    measured = max(
        float(np.abs(np.array(a["weights"]) - np.array(b["weights"])).max())
        for a, b in zip(half["layers"][0]["heads"], full["layers"][0]["heads"], strict=True)
    )
    assert measured > 0 and half["config"]["max_diff_vs_float32"] == pytest.approx(measured, abs=1e-7)
    shown = re.search(r"float32: ([0-9.e+-]+)", diff.text_content() or "")
    assert shown is not None and float(shown.group(1)) == pytest.approx(measured, rel=0.05)
    page.reload()
    wait_idle(page)
    expect(page.get_by_test_id("dtype-select")).to_have_value("bfloat16")
    expect(diff).to_contain_text("bfloat16: max difference from float32")
