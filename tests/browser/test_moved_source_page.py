"""Beyond the heatmap on the page, part four: the Moved view's strip of what each head adds to the output at each
query (include head_contributions), and the claims panel's perturbation of a cross-attention run (source + side)
with the server's source_boundary check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle

pytestmark = pytest.mark.browser

Opener = Callable[..., Page]
TEXT = "a+b+c+d+e"
SOURCE_Q = "?m=random&t=a+b+c&src=x+y+z+w&spad=2"  # source position 2 is padding: no query may read it
STRIPS = """els => els.map(e => {
  const fig = e.closest('figure');
  return {layer: Number(fig.dataset.layer), head: Number(fig.dataset.head), max: Number(e.dataset.max),
    label: e.querySelector('svg').getAttribute('aria-label'), caption: e.querySelector('.contrib-cap').textContent,
    values: [...e.querySelectorAll('rect')].map(r => Number(r.dataset.value)),
    titles: [...e.querySelectorAll('rect title')].map(t => t.textContent)};
})"""
BARS = """els => els.map(e => ({layer: e.closest('svg').dataset.layer, position: Number(e.dataset.position),
  delta: Number(e.dataset.delta), protected: e.classList.contains('protected'), leak: e.classList.contains('leak'),
  changed: e.classList.contains('changed')}))"""


def contributions(api: dict[str, Any]) -> dict[tuple[int, int], list[float]]:
    return {(la["index"], h["index"]): h["contribution"] for la in api["layers"] for h in la["heads"]}


def test_the_moved_view_draws_each_heads_contribution_as_the_server_sends_it(
    open_page: Opener, page_log: PageLog
) -> None:
    page = open_page(f"?m=random&t={TEXT}&causal=1")
    assert page_log.attention_requests()
    assert all("head_contributions" not in b["include"] for b in page_log.attention_requests())
    expect(page.get_by_test_id("head-contribution")).to_have_count(0)
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.locator("input[name=view][value=moved]").check()
    body = resp.value.request.post_data_json
    assert "head_contributions" in body["include"] and "value_norms" in body["include"]
    wait_idle(page)
    api = page.request.post(resp.value.url, data=body).json()  # the page reads the arrays form; ask for JSON
    want = contributions(api)
    strips = page.get_by_test_id("head-contribution")
    expect(strips).to_have_count(page.get_by_test_id("head-heatmap").count())
    drawn = strips.evaluate_all(STRIPS)
    assert drawn
    tokens = api["tokens"]
    for s in drawn:
        server = want[(s["layer"], s["head"])]
        assert s["values"] == pytest.approx(server, rel=1e-3, abs=1e-6), s
        assert s["max"] == pytest.approx(max(server), rel=1e-3)
        assert f"0–{max(server):.3f}" in s["caption"] and f"total {sum(server):.3f}" in s["caption"]
        top = max(range(len(server)), key=lambda q: (server[q], -q))
        assert f"most at {top} “{tokens[top]}”" in s["label"]
        assert s["titles"][top].startswith(f"query {top} “{tokens[top]}”: adds {server[top]:.3f}")
    # each head's own numbers: two heads' strips differ where the server's do
    assert len({tuple(s["values"]) for s in drawn}) == len({tuple(want[(s["layer"], s["head"])]) for s in drawn})
    card = page.get_by_test_id("head-heatmap").first
    expect(card).to_have_attribute("aria-label", "Layer 0 head 0: moved. " + _card_summary(drawn[0]))
    # back to weights: no strip, and the next run asks for no contribution
    page.locator("input[name=view][value=weights]").check()
    expect(strips).to_have_count(0)
    assert "view=moved" not in page.url
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as again:
        page.reload()
    assert "head_contributions" not in again.value.request.post_data_json["include"]


def _card_summary(strip: dict[str, Any]) -> str:
    """The card's label names what its strip says, with "It" for the head."""
    rest = strip["label"].split(" adds to the layer output", 1)[1]
    return f"It adds to the layer output{rest}. Press Enter to open it large."


def test_a_link_in_the_moved_view_asks_for_the_contributions_at_once(open_page: Opener, page_log: PageLog) -> None:
    page = open_page(f"?m=random&t={TEXT}&view=moved")
    first = page_log.attention_requests()[0]
    assert "head_contributions" in first["include"] and "value_norms" in first["include"]
    expect(page.get_by_test_id("head-contribution")).to_have_count(page.get_by_test_id("head-heatmap").count())
    assert len(page_log.attention_requests()) == 1  # asked once, not again when the view draws


def test_a_source_run_perturbs_either_side_and_draws_the_source_boundary(open_page: Opener) -> None:
    page = open_page(SOURCE_Q)
    open_workspace(page, "test")
    side = page.get_by_test_id("perturb-side")
    expect(side).to_be_visible()
    expect(side).to_have_value("query")
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    body = resp.value.request.post_data_json
    assert body["side"] == "query" and body["text"] == "a b c"
    assert body["source"] == {"text": "x y z w", "padding": [True, True, False, True]}
    assert not {"include", "layer", "texts"} & set(body)
    api = resp.value.json()
    check_rendered(page, api)
    # the keyboard picks the source side: the position menu lists the source's tokens, the first padded one first
    with page.expect_response("**/api/perturb") as resp:
        side.focus()
        side.select_option("source")
    body = resp.value.request.post_data_json
    assert body["side"] == "source" and body["position"] == 2 and body["source"]["text"] == "x y z w"
    options = page.locator("#perturb-position option").all_text_contents()
    assert len(options) == 1 + 4 and options[0].startswith("source position 2") and "w" in options[-1]
    api = resp.value.json()
    assert api["side"] == "source"
    check = check_rendered(page, api)
    assert check["protected"] == [0, 1, 2] and check["holds"] is True  # every query's cell to it is padding
    expect(page.locator(".dc-what")).to_contain_text("source position 2 “z”")
    bars = page.locator("[data-testid=perturb-chart] rect.bar").evaluate_all(BARS)
    assert not any(b["changed"] for b in bars)  # position 2 is the source's: no query bar is marked changed
    expect(page.get_by_test_id("perturb-verdict")).to_have_attribute("data-side", "source")
    # the link keeps the side, and a reload asks the same
    assert "pside=source" in page.url
    with page.expect_response("**/api/perturb") as resp:
        page.reload()
    wait_idle(page)
    assert resp.value.request.post_data_json["side"] == "source"
    expect(page.get_by_test_id("perturb-side")).to_have_value("source")
    expect(page.get_by_test_id("perturb-verdict")).to_contain_text(api["verdict"])


def check_rendered(page: Page, api: dict[str, Any]) -> dict[str, Any]:
    """The verdict and check list are the server's, and the bars are hatched by source_boundary's own sets."""
    names = [c["name"] for c in api["checks"]]
    assert names == ["source_boundary"]
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_contain_text(api["verdict"])
    expect(verdict).to_have_attribute("data-checks", "source_boundary")
    check = api["checks"][0]
    li = page.locator("#claims-panel li[data-check=source_boundary]")
    expect(li).to_contain_text(check["claim"])
    expect(li).to_have_attribute("data-holds", str(check["holds"]).lower())
    expect(page.locator("[data-testid=perturb-chart][data-layer=final]")).to_have_count(1)
    bars = page.locator("[data-testid=perturb-chart] rect.bar").evaluate_all(BARS)
    final = sorted((b for b in bars if b["layer"] == "final"), key=lambda b: b["position"])
    assert [b["delta"] for b in final] == pytest.approx(api["final_delta"], abs=1e-6)
    assert check["protected"], check  # the test must hatch something
    for b in bars:
        want = check["protected_by_layer"][int(b["layer"])] if b["layer"] != "final" else check["protected"]
        assert b["protected"] == (b["position"] in want), b
        assert not b["leak"], b
    return check  # type: ignore[no-any-return]


def test_without_a_source_the_perturb_body_and_link_carry_no_side(open_page: Opener) -> None:
    page = open_page("?m=random&t=a+b+c+d&causal=1&pert=q,direction,1&pside=source")
    expect(page.get_by_test_id("perturb-side")).to_be_hidden()
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    body = resp.value.request.post_data_json
    assert "side" not in body and "source" not in body and body["text"] == "a b c d"
    assert "pside" not in page.url
