"""A checkpoint on the page: the model picker lists it from GET /api/models with its family and size, the line
beside it says how closely it matched transformers, and choosing it draws its heads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle
from tests.fixtures import Unloadable

pytestmark = pytest.mark.browser


def test_a_checkpoint_is_listed_with_its_family_and_reference_and_draws(
    page: Page, checkpoint_server: str, run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    entry = next(m for m in httpx.get(f"{checkpoint_server}/api/models").json()["models"] if m["name"] == "mine")
    reference = entry["reference"]
    assert max(reference["max_abs_diff"].values()) <= 1e-5
    page.goto(f"{checkpoint_server}/?m=textbook")
    wait_idle(page)
    option = page.get_by_test_id("model-select").locator("option[value=mine]")
    expect(option).to_have_text(
        f"mine · llama, {entry['layers']} layers × {entry['heads']} heads, width {entry['d_model']}"
    )
    expect(page.get_by_test_id("model-reference")).to_be_hidden()  # textbook: nobody compared it with anything
    body = run_and_wait(lambda: page.get_by_test_id("model-select").select_option("mine"))
    assert body["model"] == "mine"
    worst = max(reference["max_abs_diff"].values())
    worst = "0" if worst == 0 else f"{worst:.0e}".replace("e-0", "e-")
    expect(page.get_by_test_id("model-reference")).to_have_text(f"matches {reference['library']} to {worst}")
    # its heads are drawn, one heatmap per head of the layer shown, over its own tokens
    expect(page.get_by_test_id("head-heatmap")).to_have_count(entry["heads"])
    answer = httpx.post(f"{checkpoint_server}/api/attention", json={"model": "mine", "text": body["text"]}).json()
    expect(page.get_by_test_id("token")).to_have_count(len(answer["tokens"]))


def test_a_checkpoint_that_cannot_load_stays_out_of_the_picker(page: Page, unloadable_server: Unloadable) -> None:
    base = unloadable_server.base
    listed = httpx.get(f"{base}/api/models").json()
    assert sorted(u["name"] for u in listed["unavailable"]) == ["bad", "gone", "t5"]
    page.goto(f"{base}/")
    wait_idle(page)
    expect(page.get_by_test_id("model-select").locator("option")).to_have_count(len(listed["models"]))
    for name in ("bad", "gone", "t5"):
        expect(page.get_by_test_id("model-select").locator(f"option[value={name}]")).to_have_count(0)
