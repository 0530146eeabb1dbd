"""Matrices typed in on the page (model `given`, static/js/typed.js): a score matrix drawn with the masks applied and
the server's softmax, a weight matrix drawn as typed, both reachable by a link."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import focus_z, masked_cells, wait_idle

pytestmark = pytest.mark.browser

SCORES = [[1.0, 2.0, -1.0, 0.5], [0.0, 3.0, 1.0, -2.0], [2.0, -1.0, 0.0, 1.0], [0.5, 0.5, 4.0, -3.0]]
WEIGHTS = [[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.2, 0.3, 0.5]]


def softmax_rows(scores: list[list[float]], eligible: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    out = np.zeros_like(s)
    for i in range(len(s)):
        e = np.exp(s[i, eligible[i]] - s[i, eligible[i]].max())
        out[i, eligible[i]] = e / e.sum()
    return out


def typed_grid(matrix: list[list[float]]) -> str:
    return "\n".join(" ".join(f"{v:g}" for v in row) for row in matrix)  # as JavaScript writes them


def test_a_typed_score_matrix_is_drawn_with_causal_masking_and_numpys_softmax(
    page: Page, typed_pycode_server: str, run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    page.goto(f"{typed_pycode_server}/?m=given")
    wait_idle(page)
    panel = page.get_by_test_id("typed")
    expect(panel).to_be_visible()
    page.get_by_test_id("typed-matrix").fill(typed_grid(SCORES))
    sent = run_and_wait(lambda: page.get_by_test_id("typed-apply").click())
    assert sent["scores"] == SCORES and "qkv" not in sent["include"]
    eligible = np.ones((4, 4), dtype=bool)
    np.testing.assert_allclose(np.asarray(focus_z(page), dtype=float), softmax_rows(SCORES, eligible), atol=5e-4)
    assert masked_cells(page) == set()

    sent = run_and_wait(lambda: page.get_by_test_id("mask-causal").check())
    assert sent["masks"]["causal"] is True and sent["scores"] == SCORES
    causal = np.tril(np.ones((4, 4), dtype=bool))
    drawn = focus_z(page)
    assert drawn[0][1] is None and drawn[2][3] is None  # the masked cells are drawn as masked
    assert {(0, 1), (0, 3), (2, 3)} <= masked_cells(page)
    expected = softmax_rows(SCORES, causal)
    for q in range(4):
        got = [v for v in drawn[q] if v is not None]
        assert [round(v, 3) for v in got] == [round(float(v), 3) for v in expected[q, : q + 1]], q
    # the link holds the typed matrix: opening it draws the same numbers
    link = page.url
    assert "typed=" in link
    page.goto(link)
    wait_idle(page)
    assert focus_z(page) == drawn
    expect(page.get_by_test_id("typed-matrix")).to_have_value(typed_grid(SCORES))


def test_a_typed_weight_matrix_is_drawn_as_given_and_a_refusal_is_said_at_the_box(
    page: Page, typed_pycode_server: str, run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    typed = {"kind": "pattern", "m": WEIGHTS, "values": [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]}
    page.goto(f"{typed_pycode_server}/?m=given&causal=1&typed={quote(json.dumps(typed))}")
    wait_idle(page)
    expect(page.get_by_test_id("typed-kind")).to_have_value("pattern")
    drawn = focus_z(page)
    # as typed, to float32's precision (the page's run), with the cells above the diagonal masked
    assert [[round(v, 6) for v in row if v is not None] for row in drawn] == [[1.0], [0.25, 0.75], [0.2, 0.3, 0.5]]
    assert page.locator("[data-testid=head-heatmap]").count() == 1
    # weight on a cell the causal mask excludes: the server's 422, beside the box, and the view keeps the last run
    page.get_by_test_id("typed-matrix").fill("0.5 0.5 0\n0.25 0.75 0\n0.2 0.3 0.5")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("typed-apply").click()
    assert resp.value.status == 422
    error = page.get_by_test_id("typed-error")
    expect(error).to_contain_text("causal mask excludes query 0 -> key 1")
    expect(page.get_by_test_id("typed-matrix")).to_have_attribute("aria-invalid", "true")
    assert focus_z(page) == drawn
    # a box the page itself cannot read is said there, with no request
    page.get_by_test_id("typed-matrix").fill("1 0\n0.5")
    page.get_by_test_id("typed-apply").click()
    expect(error).to_contain_text("row 2 has 1 numbers but row 1 has 2")
