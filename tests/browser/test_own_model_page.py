"""A checkpoint on the page: the model picker lists it from GET /api/models with its family and size, the line
beside it says how closely it matched transformers, and choosing it draws its heads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle
from tests.checkpoints import make_checkpoint
from tests.helpers import serve

pytestmark = pytest.mark.browser


def test_the_label_and_reference_line_of_a_model(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const M = await mod('modelinfo.js');
        const mine = {name: 'mine', family: 'llama', layers: 2, heads: 4, d_model: 64,
          reference: {library: 'transformers 5.24.0', max_abs_diff: {weights: 3.1e-7, output: 2e-8}}};
        const lib = 'transformers 5.24.0';
        const wrong = {...mine, reference: {library: lib, max_abs_diff: {weights: 1e-8, output: 0.31}}};
        const why = 'transformers is not installed';
        const alone = {...mine, reference: {library: null, max_abs_diff: null, reason: why}};
        const random = {name: 'random', family: 'random', layers: 1, heads: 4, d_model: 64, reference: null};
        return {
          mine: M.modelLabel(mine, {model: 'x'}), random: M.modelLabel(random, {model: 'random', options: {heads: 8}}),
          lines: [mine, wrong, alone, random].map(M.referenceLine),
        };
        """
    )
    assert out["mine"] == "mine · llama, 2 layers × 4 heads, width 64"
    assert out["random"] == "random · 8 heads"  # a built-in model is its own family: no family or width said
    assert out["lines"] == [
        "matches transformers 5.24.0 to 3e-7",
        "differs from transformers 5.24.0 by up to 3e-1",  # the worse of the two differences, and no "matches"
        "Not compared with transformers: transformers is not installed",
        "",
    ]


@pytest.fixture(scope="module")
def checkpoint_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`attnlab serve` with textbook and a tiny random llama checkpoint served as `mine`."""
    directory = make_checkpoint("llama", tmp_path_factory.mktemp("mine"))
    with serve(f"textbook,mine={directory}") as base:
        yield base


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


def test_a_checkpoint_that_cannot_load_stays_out_of_the_picker(page: Page, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    with serve(f"textbook,broken={tmp_path}") as base:
        listed = httpx.get(f"{base}/api/models").json()
        assert [u["name"] for u in listed["unavailable"]] == ["broken"]
        page.goto(f"{base}/")
        wait_idle(page)
        expect(page.get_by_test_id("model-select").locator("option")).to_have_count(len(listed["models"]))
        expect(page.get_by_test_id("model-select").locator("option[value=broken]")).to_have_count(0)
