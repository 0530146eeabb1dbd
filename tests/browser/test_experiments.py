"""The page's claim tests, against a real `attnlab serve`: a perturbation proves causal masking on minilm, ablating
the induction model's layer-1 heads breaks its predictions of the repeat, a pinned run is compared head by head,
and all of it works from the keyboard."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
Open = Callable[[str], Page]

BARS = """els => els.map(e => ({
  layer: e.closest('svg').dataset.layer, position: +e.dataset.position, delta: +e.dataset.delta,
  height: +e.getAttribute('height'), protected: e.classList.contains('protected'), leak: e.classList.contains('leak'),
}))"""


def bars(page: Page) -> list[dict[str, Any]]:
    return page.locator("[data-testid=perturb-chart] rect.bar").evaluate_all(BARS)  # type: ignore[no-any-return]


def tab_to(page: Page, testid: str, limit: int = 250) -> None:
    """Press Tab until an element with this data-testid has the focus."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.testid") == testid:
            style = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
            assert style != "none", f"{testid} has the focus but no visible outline"
            return
    pytest.fail(f"{limit} presses of Tab never reached {testid}")


def test_one_perturbation_proves_causal_masking_on_minilm(
    open_trained: Open, trained_server: str, page_log: PageLog
) -> None:
    page = open_trained("?m=minilm&t=The+cat+sat+on+the+mat&causal=1&query=4")
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    assert tokens == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    open_workspace(page, "test")
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    body = resp.value.request.post_data_json
    assert body["position"] == 4 and body["change"] == {"kind": "direction", "norm": 1}  # the retrieval query
    assert body["masks"]["causal"] is True and "include" not in body and "layer" not in body
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_have_attribute("data-holds", "true")
    expect(verdict).to_have_attribute("data-checks", "causal")
    expect(verdict).to_contain_text("holds")
    expect(page.locator("#claims-panel li[data-check=causal]")).to_contain_text("✓ holds")

    drawn = bars(page)
    assert {b["layer"] for b in drawn} == {"0", "1", "2", "3", "4", "5", "final"}
    assert len(drawn) == 7 * len(tokens)
    for b in drawn:
        if b["position"] < 4:  # before the change: exactly 0 in every layer, drawn as protected, no bar
            assert b["delta"] == 0 and b["height"] == 0 and b["protected"] and not b["leak"], b
        else:
            assert not b["protected"], b
    assert all(b["delta"] > 0 for b in drawn if b["position"] == 4)
    assert any(b["delta"] > 0 and b["height"] > 0 for b in drawn if b["position"] > 4 and b["layer"] == "5")
    # the bars carry the API's own numbers
    api = httpx.post(f"{trained_server}/api/perturb", json=body, timeout=60).json()
    final = sorted((b for b in drawn if b["layer"] == "final"), key=lambda b: b["position"])
    assert [b["delta"] for b in final] == pytest.approx(api["final_delta"], abs=1e-6)
    assert "pert=q,direction,1" in unquote(page.url)

    # causal off: the panel runs again by itself, claims nothing about causal, and earlier positions move
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("mask-causal").uncheck()
    assert resp.value.request.post_data_json["masks"]["causal"] is False
    expect(verdict).to_have_attribute("data-checks", "")
    expect(verdict).not_to_contain_text("causal", ignore_case=True)
    expect(page.locator("#claims-panel li[data-check=causal]")).to_have_count(0)
    drawn = bars(page)
    assert not any(b["protected"] for b in drawn)
    assert any(b["delta"] > 0 for b in drawn if b["position"] < 4 and b["layer"] == "0")
    assert page_log.page_errors == []


def test_ablating_every_layer_1_head_breaks_the_induction_models_predictions(
    open_trained: Open, trained_server: str
) -> None:
    page = open_trained("?m=induction&layer=1")
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    half = len(tokens) // 2
    assert tokens[:half] == tokens[half:], tokens  # the default example: words, then the same words again
    cards = page.get_by_test_id("head-heatmap")
    expect(cards).to_have_count(4)
    ablate = page.get_by_test_id("head-ablate")
    expect(ablate).to_have_count(4)
    for i in range(4):
        assert ablate.nth(i).get_attribute("data-layer") == "1"
        ablate.nth(i).click()
        expect(ablate.nth(i)).to_have_attribute("aria-pressed", "true")
    assert "focus=" not in page.url  # pressing ablate never opened a head
    assert "abl=1.0.zero,1.1.zero,1.2.zero,1.3.zero" in unquote(page.url)

    open_workspace(page, "test")  # the interventions' answer, drawn from the answer held
    result = page.get_by_test_id("intervention-result")
    expect(result).to_have_attribute("data-ablated", "4")
    loss_before = float(result.get_attribute("data-loss-before") or "nan")
    loss_after = float(result.get_attribute("data-loss-after") or "nan")
    assert loss_after > loss_before + 1.0, (loss_before, loss_after)
    expect(result).to_contain_text(f"{loss_before:.3f} → {loss_after:.3f} nats")

    rows = page.locator("[data-testid=intervention-predictions] tbody tr").evaluate_all(
        """els => els.map(e => ({position: +e.dataset.position, changed: e.dataset.changed === 'true',
                                 flipped: e.classList.contains('flipped'), before: e.dataset.before,
                                 after: e.dataset.after}))"""
    )
    assert [r["position"] for r in rows] == list(range(len(tokens)))
    repeat = [r for r in rows if half <= r["position"] < len(tokens) - 1]  # predicting the repeated half
    right_before = [r for r in repeat if r["before"] == tokens[r["position"] + 1]]
    assert len(right_before) >= len(repeat) - 3, repeat  # the intact model predicts the repeat...
    broken = [r for r in right_before if r["changed"] and r["after"] != tokens[r["position"] + 1]]
    assert len(broken) >= len(right_before) - 2, repeat  # ...and without its layer-1 heads it does not
    assert all(r["flipped"] == r["changed"] for r in rows)
    assert {r["position"] for r in rows if r["changed"]} == {
        int(p) for p in (result.get_attribute("data-flipped") or "").split(",") if p
    }

    # the panel shows the API's numbers for the same body
    text = page.get_by_test_id("sequence-input").input_value()
    ablations = [{"layer": 1, "head": h, "mode": "zero"} for h in range(4)]
    api = httpx.post(
        f"{trained_server}/api/intervene",
        json={"model": "induction", "text": text, "masks": {"causal": True}, "ablate": ablations, "include": []},
        timeout=60,
    ).json()
    assert (loss_before, loss_after) == pytest.approx((api["loss_before"], api["loss_after"]), abs=1e-6)
    # before and after of each ablated head, and the change per layer
    expect(result.locator(".iv-pair.affected")).to_have_count(4)
    expect(page.locator("[data-testid=intervention-chart]")).to_have_count(3)  # layers 0, 1 and the logits

    page.locator("#iv-clear").click()
    expect(result).to_have_count(0)
    open_workspace(page, "explore")
    for i in range(4):
        expect(ablate.nth(i)).to_have_attribute("aria-pressed", "false")
    assert "abl=" not in page.url


def test_a_weight_edit_from_the_large_head_reaches_the_api(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1&focus=0.2")
    # pressing a key in the retrieval diagram picks the pair; the edit form under the large head follows it
    page.locator("#retrieval g.rd-key[data-key='2']").click()
    expect(page.locator("#edit-query")).to_have_value("5")
    expect(page.locator("#edit-key")).to_have_value("2")
    expect(page.locator("#edit-head")).to_have_text("H2")
    page.locator("#edit-weight").fill("0.9")
    with page.expect_response("**/api/intervene") as resp:
        page.locator("#edit-add").click()
    assert resp.value.request.post_data_json["edit"] == [{"layer": 0, "head": 2, "query": 5, "key": 2, "weight": 0.9}]
    after = resp.value.json()["after"]["layers"][0]["heads"][2]["weights"]
    assert after[5][2] == pytest.approx(0.9, abs=1e-6) and sum(after[5]) == pytest.approx(1, abs=1e-5)
    open_workspace(page, "test")
    result = page.get_by_test_id("intervention-result")
    expect(result).to_have_attribute("data-edited", "1")
    expect(result.locator(".iv-pair.affected[data-head='2']")).to_contain_text("edited")
    assert "edit=0.2.5.2@0.9" in unquote(page.url)
    open_workspace(page, "explore")
    # a weight outside [0, 1] is refused in the form, before any request
    page.locator("#edit-weight").fill("1.5")
    page.locator("#edit-add").click()
    expect(page.locator("#edit-weight")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#edit-error")).to_contain_text("from 0 to 1")
    assert "edit=0.2.5.2@0.9" in unquote(page.url)  # the edit in force is unchanged
    # an edit onto a masked key: the server's 422 in the panel, in its words, and no stale result
    page.locator("#edit-query").select_option("1")
    page.locator("#edit-key").select_option("4")
    page.locator("#edit-weight").fill("0.5")
    with page.expect_response("**/api/intervene") as resp:
        page.locator("#edit-add").click()
    assert resp.value.status == 422
    open_workspace(page, "test")
    status = page.locator("#intervene-status")
    expect(status).to_have_text(resp.value.json()["error"]["message"])
    expect(status).to_have_class("muted small bad")
    expect(result).to_have_count(0)
    page.get_by_role("button", name="Remove: H2 1→4 = 0.5").click()
    expect(result).to_have_attribute("data-edited", "1")


def test_compare_draws_b_minus_a_per_head_and_explains_a_length_change(
    open_page: Callable[..., Page], live_server: str, page_log: PageLog
) -> None:
    page = open_page(RANDOM)
    open_workspace(page, "test")
    diffs = page.get_by_test_id("compare-diff")
    expect(diffs).to_have_count(0)
    with page.expect_response("**/api/compare"):
        page.locator("#pin-a").click()
    expect(diffs).to_have_count(4)
    assert diffs.evaluate_all("els => els.map(e => +e.dataset.maxAbs)") == [0, 0, 0, 0]  # A against itself

    with page.expect_response("**/api/compare") as resp:
        page.get_by_test_id("mask-causal").check()
    body = resp.value.request.post_data_json
    assert body["a"]["masks"]["causal"] is False and body["b"]["masks"]["causal"] is True
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=compare-diff]')].some(e => +e.dataset.maxAbs > 0)"
    )
    expect(diffs).to_have_count(4)
    maxes = diffs.evaluate_all("els => els.map(e => +e.dataset.maxAbs)")

    def weights(causal: bool) -> list[list[list[float]]]:
        req = {"model": "random", "text": "the cat sat on the mat", "masks": {"causal": causal}, "include": ["weights"]}
        r = httpx.post(f"{live_server}/api/attention", json=req, timeout=30).json()
        return [h["weights"] for h in r["layers"][0]["heads"]]

    wa, wb = weights(False), weights(True)
    diff = [[[wb[h][q][k] - wa[h][q][k] for k in range(6)] for q in range(6)] for h in range(4)]
    assert maxes == pytest.approx([max(abs(v) for row in d for v in row) for d in diff], abs=1e-6)
    assert min(maxes) > 0

    # diverging colours: where B attends more the cell is red, where A attends more it is blue
    d0 = diff[0]
    cells = [(q, k) for q in range(6) for k in range(6)]
    up = max(cells, key=lambda c: d0[c[0]][c[1]])
    down = min(cells, key=lambda c: d0[c[0]][c[1]])
    rgb = diffs.first.evaluate(
        """(fig, cells) => {
          const ctx = fig.querySelector('canvas').getContext('2d');
          const r = window.devicePixelRatio || 1;
          const {left, top, cell} = JSON.parse(fig.dataset.layout);
          return cells.map(([q, k]) => Array.from(
            ctx.getImageData((left + (k + 0.5) * cell) * r, (top + (q + 0.5) * cell) * r, 1, 1).data).slice(0, 3));
        }""",
        [list(up), list(down)],
    )
    assert rgb[0][0] > rgb[0][2] + 60, rgb  # red
    assert rgb[1][2] > rgb[1][0] + 60, rgb  # blue
    largest = page.get_by_test_id("compare-largest").locator("tbody tr")
    expect(largest).to_have_count(10)
    top = largest.first.locator("td").last.text_content() or ""
    assert abs(float(top)) == pytest.approx(max(maxes), abs=1e-4)

    # a sequence of another length cannot be compared: the server's 422 in the panel, not a crash
    page.get_by_test_id("sequence-input").fill("the cat sat")
    with page.expect_response("**/api/compare") as resp:
        page.get_by_test_id("run-button").click()
    assert resp.value.status == 422
    message = resp.value.json()["error"]["message"]
    error = page.get_by_test_id("compare-error")
    expect(error).to_be_visible()
    expect(error).to_have_text(message)
    expect(diffs).to_have_count(0)
    expect(page.get_by_test_id("error-banner")).to_be_hidden()  # the run itself was fine
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    assert "pin=" in page.url
    # a redraw does not send the refused request again
    asked = sum(u.endswith("/api/compare") for u in page_log.requests)
    page.locator("input[name=view][value=scores]").check()
    open_workspace(page, "explore")
    expect(page.get_by_test_id("head-heatmap").first).to_have_attribute("data-view", "scores")
    open_workspace(page, "test")
    expect(error).to_have_text(message)
    assert sum(u.endswith("/api/compare") for u in page_log.requests) == asked

    page.locator("#unpin").click()
    expect(error).to_have_count(0)
    assert "pin=" not in page.url
    assert page_log.page_errors == []


def test_a_pinned_run_survives_the_link(open_page: Callable[..., Page], page: Page) -> None:
    open_page(RANDOM)
    open_workspace(page, "test")
    with page.expect_response("**/api/compare"):
        page.locator("#pin-a").click()
    pinned = json.loads(unquote(page.url.split("pin=")[1].split("&")[0]).replace("+", " "))
    assert pinned["text"] == "the cat sat on the mat" and "include" not in pinned
    # the link opened again (the same tab, a new document), its own settings changed: the pinned run keeps its own
    with page.expect_response("**/api/compare") as resp:
        page.goto(page.url.replace("causal=0", "causal=1"))
    wait_idle(page)
    assert resp.value.request.post_data_json["a"]["masks"]["causal"] is False
    expect(page.get_by_test_id("compare-diff")).to_have_count(4)


def test_perturb_and_ablate_work_from_the_keyboard(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1")
    tab_to(page, "head-ablate")
    first = page.get_by_test_id("head-ablate").first
    with page.expect_response("**/api/intervene"):
        page.keyboard.press("Enter")
    expect(first).to_have_attribute("aria-pressed", "true")
    assert page.evaluate("document.activeElement.dataset.testid") == "head-ablate"  # the focus stays put
    assert "focus=" not in page.url  # and the card did not open
    open_workspace(page, "test")  # its answer, in the workspace of the interventions
    expect(page.get_by_test_id("intervention-result")).to_be_visible()
    open_workspace(page, "explore")
    first.focus()
    page.keyboard.press("Space")
    expect(first).to_have_attribute("aria-pressed", "false")
    open_workspace(page, "test")
    expect(page.get_by_test_id("intervention-result")).to_have_count(0)

    page.locator("[data-testid=ws-tab-test]").focus()
    tab_to(page, "perturb-run")
    with page.expect_response("**/api/perturb"):
        page.keyboard.press("Enter")
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_have_attribute("data-holds", "true")
    expect(verdict).to_have_attribute("data-position", "5")


def test_stats_and_cards_show_head_health(open_page: Callable[..., Page], live_server: str) -> None:
    page = open_page()  # textbook
    open_workspace(page, "inside")
    stats = httpx.post(f"{live_server}/api/attention", json={"model": "textbook", "include": ["stats"]}, timeout=30)
    st = stats.json()["layers"][0]["heads"][0]["stats"]
    headers = page.locator("#stats thead th").all_inner_texts()
    assert "Masked share" in headers and "Weight on masked keys" in headers and "Masked mass" not in headers
    cells = dict(zip(headers, page.locator("#stats tbody tr").first.locator("th, td").all_inner_texts(), strict=True))
    share = sum(st["masked_share"]) / len(st["masked_share"])
    assert float(cells["Masked share"]) == pytest.approx(share, abs=1e-3)
    assert cells["Weight on masked keys"] == "0.000"
    assert f"QK rank {st['qk_rank']}/{st['qk_rank_max']}" in cells["Health"]
    assert page.evaluate("performance.getEntriesByName('attnlab:drawn').length") >= 1
    flags = page.get_by_test_id("head-heatmap").first.get_attribute("data-flags") or ""
    assert ("uniform" in flags.split(",")) == st["dead"]
    assert ("nearly uniform" in cells["Health"]) == st["dead"]


# The claim under each classic bug the `bug` key takes, on the induction model's causal example: the claim runs the
# code the view shows, so it finds the leak; without a bug the same claim holds. A flipped mask leaves the last query
# no key at all (its only key, itself, reads as blocked): the page runs it with all_masked=zero, as its error offers.
@pytest.mark.parametrize(
    ("bug", "extra"),
    [(None, ""), ("softmax_over_queries", ""), ("flipped_mask", "&all_masked=zero"), ("norm_over_sequence", "")],
)
def test_the_claim_runs_the_views_classic_bug(open_trained: Open, page: Page, bug: str | None, extra: str) -> None:
    query = f"?m=induction&causal=1&pert=q,direction,1{extra}" + (f"&bug={bug}" if bug else "")
    with page.expect_response("**/api/perturb") as resp:
        open_trained(query)
    body = resp.value.request.post_data_json
    assert body.get("demo_bug") == bug
    answer = resp.value.json()
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_have_attribute("data-checks", "causal")
    if bug is None:
        expect(verdict).to_have_attribute("data-holds", "true")
        expect(verdict).to_contain_text("holds")
        expect(page.get_by_test_id("correct-code")).to_have_count(0)
        return
    assert answer["demo_bug"]["name"] == bug
    expect(verdict).to_have_attribute("data-holds", "false")
    expect(verdict).not_to_contain_text("holds")
    expect(page.locator("#claims-panel li[data-check=causal]")).to_contain_text("✗ leak")
    # the panels whose analysis takes no bug say they run the correct code; the claim's does not
    open_workspace(page, "inside")
    expect(page.locator("#headtypes-panel [data-testid=correct-code]")).to_contain_text("Runs the correct code")
    open_workspace(page, "test")
    expect(page.locator("#claims-panel [data-testid=correct-code]")).to_have_count(0)
