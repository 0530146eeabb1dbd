"""Beyond the heatmap on the page, part three: attention flow as the rollout panel's second method, and the claims
panel's perturbation run inside a batch (texts + item) with the batch's own checks."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import numpy as np
import pytest
from playwright.sync_api import Page, Response, expect

from tests.browser.conftest import open_workspace, wait_idle

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]
REPEAT = "red+ball+king+river+frog+red+ball+king"
BATCH = ["a b c d e f", "x y z", "p q r s"]  # random: one token a word, padded to 6
BATCH_Q = "?m=random&batch=" + "%0A".join(t.replace(" ", "+") for t in BATCH) + "&causal=1"
BARS = """els => els.map(e => ({layer: e.closest('svg').dataset.layer, position: Number(e.dataset.position),
  delta: Number(e.dataset.delta), protected: e.classList.contains('protected'), leak: e.classList.contains('leak')}))"""


def close(got: Any, want: Any, atol: float = 1e-6) -> bool:
    return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), atol=atol, rtol=0))


def asks(name: str) -> Callable[[Response], bool]:
    """An /api/attention answer to a body whose include names `name`."""
    return lambda r: r.url.endswith("/api/attention") and f'"{name}"' in (r.request.post_data or "")


def drawn_maps(page: Page) -> list[Any]:
    return page.evaluate(  # type: ignore[no-any-return]
        "() => [...document.querySelectorAll('[data-testid=rollout-map]')].map((f) => f.drawn)"
    )


def test_flow_draws_the_servers_numbers_and_keeps_its_method_in_the_link(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    open_workspace(page, "inside")
    with page.expect_response(asks("rollout")) as roll:
        page.get_by_test_id("rollout-on").check()
    grid = page.get_by_test_id("rollout-grid")
    expect(grid).to_have_attribute("data-drawn", "mean.1")
    rollout = roll.value.json()
    method = page.get_by_test_id("rollout-method")
    expect(method).to_be_enabled()
    with page.expect_response(asks("attention_flow")) as resp:
        method.focus()  # a native select: the keyboard reaches it
        method.select_option("flow")
    sent = resp.value.request.post_data_json
    assert sent["include"] == ["attention_flow"] and sent["rollout"] == {"heads": "mean", "residual": True}
    assert "layer" not in sent
    expect(grid).to_have_attribute("data-drawn", "mean.1.flow")
    assert "rollout=mean.1.flow" in unquote(page.url)
    # the maps are the server's numbers for the same body, asked again apart from the page
    api = page.request.post(resp.value.url, data=sent).json()
    drawn = drawn_maps(page)
    assert len(drawn) == len(api["layers"]) == 2
    for layer, got in zip(api["layers"], drawn, strict=True):
        assert close(got, layer["attention_flow"])
        assert all(sum(row) == pytest.approx(1, abs=1e-5) or sum(row) == 0 for row in got)
    # after layer 0 flow is the fused map itself, as rollout is; after layer 1 they part (bottleneck vs every path)
    assert close(drawn[0], rollout["layers"][0]["rollout"], atol=1e-6)
    assert not close(drawn[1], rollout["layers"][1]["rollout"], atol=1e-3)
    first = page.get_by_test_id("rollout-map").first
    expect(first).to_have_attribute("aria-label", re.compile(r"^Attention flow after layer 0: position 7 draws most"))
    expect(page.get_by_test_id("rollout-methods")).to_contain_text("narrowest pipe")
    page.reload()
    wait_idle(page)
    expect(grid).to_have_attribute("data-drawn", "mean.1.flow")
    expect(page.get_by_test_id("rollout-method")).to_have_value("flow")
    assert close(drawn_maps(page)[1], api["layers"][1]["attention_flow"])


def test_flow_past_the_servers_positions_shows_its_refusal_and_rollout_stays_choosable(
    page: Page, open_trained: Open
) -> None:
    words = "+".join(["the", "cat", "sat", "on", "a", "mat"] * 12)  # 72 words: over 64 positions on minilm
    # the link asks for flow by itself; the answer is a 422 naming include, in the server's words
    with page.expect_response(asks("attention_flow"), timeout=60_000) as refused:
        open_trained(f"?m=minilm&t={words}&layer=0&rollout=mean.1.flow")
    resp = refused.value
    assert resp.status == 422
    err = resp.json()["error"]
    assert err["field"] == "include" and "positions" in err["message"]
    reason = page.get_by_test_id("rollout-reason")
    expect(reason).to_be_visible()
    expect(reason).to_contain_text(err["message"])
    expect(reason).to_have_attribute("data-method", "flow")
    expect(page.get_by_test_id("rollout-map")).to_have_count(0)
    method = page.get_by_test_id("rollout-method")
    expect(method).to_be_enabled()  # the way back is open
    with page.expect_response(asks("rollout")) as back:
        method.select_option("rollout")
    assert back.value.status == 200
    expect(reason).to_be_hidden()
    expect(page.get_by_test_id("rollout-grid")).to_have_attribute("data-drawn", "mean.1")
    expect(page.get_by_test_id("rollout-map")).to_have_count(6)
    assert "rollout=mean.1" in unquote(page.url) and "flow" not in unquote(page.url).split("rollout=")[1].split("&")[0]


def test_a_batch_perturbs_an_item_inside_the_batch_and_draws_its_checks(open_page: Callable[..., Page]) -> None:
    page = open_page(BATCH_Q)
    open_workspace(page, "test")
    page.locator("#perturb-position").select_option("1")
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    body = resp.value.request.post_data_json
    assert body["texts"] == BATCH and "text" not in body and body["item"] == 0  # the item the views show
    assert body["position"] == 1
    item = page.get_by_test_id("perturb-item")
    expect(item).to_be_visible()
    # the keyboard picks item 2: the change moves to it, in the link too
    with page.expect_response("**/api/perturb") as resp:
        item.focus()
        item.select_option("2")
    body = resp.value.request.post_data_json
    assert body["texts"] == BATCH and body["item"] == 2 and body["masks"]["causal"] is True
    assert "include" not in body and "layer" not in body and "sinks" not in body
    api = resp.value.json()
    names = [c["name"] for c in api["checks"]]
    assert "batch" in names and "padding_invariance" in names
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_contain_text(api["verdict"])
    expect(verdict).to_have_attribute("data-checks", ",".join(names))
    for c in api["checks"]:
        li = page.locator(f"#claims-panel li[data-check={c['name']}]")
        expect(li).to_contain_text(c["claim"])
        expect(li).to_have_attribute("data-holds", "true" if c["holds"] else str(c["holds"]).lower())
    expect(page.locator("#claims-panel li[data-check=batch]")).to_contain_text("✓ holds · batch:")
    expect(page.locator(".dc-what")).to_contain_text(f"item 2's position {api['position']}")
    items = page.get_by_test_id("perturb-items")
    expect(items).to_contain_text("item 2 (changed)")
    got = [float(v) for v in (items.get_attribute("data-items") or "").split(",")]
    assert got == pytest.approx(api["item_delta"], abs=1e-9) and got[2] > 0 and got[0] == got[1] == 0
    # the bars are item 2's deltas, hatched by its causal mask only: the batch check's list names items and
    # padding invariance's names positions compared with the item alone, neither a bar that must be 0
    bars = page.locator("[data-testid=perturb-chart] rect.bar").evaluate_all(BARS)
    final = sorted((b for b in bars if b["layer"] == "final"), key=lambda b: b["position"])
    assert [b["delta"] for b in final] == pytest.approx(api["final_delta"], abs=1e-6)
    causal = next(c for c in api["checks"] if c["name"] == "causal")
    for b in bars:
        if b["layer"] != "final":
            assert b["protected"] == (b["position"] in causal["protected_by_layer"][int(b["layer"])]), b
        assert not b["leak"], b
    assert "pitem=2" in page.url and "batch=" in page.url
    page.reload()
    wait_idle(page)
    expect(page.get_by_test_id("perturb-item")).to_have_value("2")
    expect(page.get_by_test_id("perturb-verdict")).to_contain_text(api["verdict"])


def test_outside_a_batch_the_perturb_body_and_link_are_as_before(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=a+b+c+d&causal=1&pitem=1")
    open_workspace(page, "test")
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    body = resp.value.request.post_data_json
    assert "texts" not in body and "item" not in body and body["text"] == "a b c d"
    expect(page.get_by_test_id("perturb-item")).to_be_hidden()
    names = [c["name"] for c in resp.value.json()["checks"]]
    assert "batch" not in names
    expect(page.get_by_test_id("perturb-items")).to_have_count(0)
    assert "pitem" not in page.url
