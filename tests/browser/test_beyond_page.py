"""Beyond the heatmap on the page: activation patching, the moved view, ablation effects and a score explained."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace
from tests.helpers import script_body

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]


REPEAT = "red+ball+king+river+frog+red+ball+king"


def test_corrupting_a_token_from_the_form_draws_the_residual_grid(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}&layer=1")
    open_workspace(page, "test")
    form = page.get_by_test_id("patch-form")
    expect(form).to_be_visible()
    page.locator("#patch-position").select_option("2")
    page.get_by_test_id("patch-token").fill("moon")
    page.locator("#patch-hook").select_option("resid_pre")
    with page.expect_response("**/api/patch") as resp:
        page.get_by_test_id("patch-run").click()
    assert resp.value.status == 200, resp.value.text()
    sent = resp.value.request.post_data_json
    assert sent["clean"]["tokens"][2] == "king" and sent["corrupted"]["tokens"][2] == "moon"
    assert sent["metric"] == {"kind": "loss"} and "text" not in sent["clean"]
    grid = page.get_by_test_id("patch-grid")
    expect(grid).to_have_attribute("data-drawn", "1")
    recovered = json.loads(grid.get_attribute("data-recovered") or "[]")
    assert recovered[0][2] == 1.0 and recovered[0][0] == 0.0  # layer 0's input at the changed position: exactly 1
    expect(grid).to_have_attribute("data-best", "0.2")
    changed = page.get_by_test_id("patch-body").locator(".chip.changed")
    expect(changed).to_have_text(["king", "moon"])
    expect(page.get_by_test_id("patch-body").locator("p strong")).to_have_text(["clean: ", "corrupted: "])
    assert "patch=2.resid_pre.moon" in page.url


def test_patching_scores_by_the_logit_difference_chosen_and_prints_each_cells_value(
    open_trained: Open, trained_server: str
) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    open_workspace(page, "test")
    page.locator("#patch-position").select_option("2")
    page.get_by_test_id("patch-token").fill("moon")
    page.locator("#patch-hook").select_option("z")
    page.get_by_test_id("patch-metric").select_option("logit_diff")
    page.get_by_test_id("patch-ld-position").select_option("7")  # the second "king": "river" comes next
    page.get_by_test_id("patch-ld-correct").fill("river")
    page.get_by_test_id("patch-ld-wrong").fill("frog")
    with page.expect_response("**/api/patch") as resp:
        page.get_by_test_id("patch-run").click()
    assert resp.value.status == 200, resp.value.text()
    sent = resp.value.request.post_data_json
    assert sent["metric"] == {"kind": "logit_diff", "position": 7, "correct": "river", "wrong": "frog"}
    api = page.request.post(f"{trained_server}/api/patch", data=sent).json()
    grid = page.get_by_test_id("patch-grid")
    expect(grid).to_have_attribute("data-drawn", "1")
    expect(grid).to_have_attribute("data-metric", "logit_diff")
    # every cell prints its logit difference with that head patched, as the API measured it (two decimals)
    printed = grid.locator("text").all_text_contents()
    wanted = [f"{v:.2f}" for row in api["metric_grid"] for v in row]
    assert sorted(t for t in printed if t in wanted) == sorted(wanted), (printed, wanted)
    summary = page.locator("#patch-summary")
    clean = f"{api['clean_metric']:.3f}"
    expect(summary).to_contain_text(f"Clean logit difference at position 7 “king” (“river” − “frog”) {clean}")
    assert "patch=2.z.moon%2Cld%2C7%2Criver%2Cfrog" in page.url
    # the link brings the metric back: opened as a new visit (from a blank page, so that nothing of the form is
    # restored as a reload would)
    link = page.url
    page.goto("about:blank")
    with page.expect_response("**/api/patch") as again:
        page.goto(link)
    assert again.value.request.post_data_json["metric"] == sent["metric"]
    expect(page.get_by_test_id("patch-metric")).to_have_value("logit_diff")
    expect(page.get_by_test_id("patch-ld-correct")).to_have_value("river")


def test_the_head_grid_opens_from_the_link_and_draws_what_the_server_measured(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    with page.expect_response("**/api/patch") as resp:
        page.goto(page.url + "&patch=2.z.moon")
    assert resp.value.status == 200, resp.value.text()
    api = resp.value.json()
    grid = page.get_by_test_id("patch-grid")
    expect(grid).to_have_attribute("data-drawn", "1")
    expect(grid).to_have_attribute("data-hook", "z")
    recovered = json.loads(grid.get_attribute("data-recovered") or "[]")
    assert recovered == api["recovered"] and len(recovered) == 2 and len(recovered[0]) == 4  # layers x heads
    cells = [(v, f"{layer}.{h}") for layer, row in enumerate(recovered) for h, v in enumerate(row) if v is not None]
    best = max(cells, key=lambda t: t[0])  # the share recovered, signed: a cell below 0 takes the output away
    expect(grid).to_have_attribute("data-best", best[1])
    layer, head = best[1].split(".")
    summary = page.locator("#patch-summary")
    expect(summary).to_contain_text(f"Most recovered by one cell: L{layer} H{head} ({best[0]:.3f})")
    worst = min(cells, key=lambda t: t[0])
    expect(grid).to_have_attribute("data-most-negative", worst[1] if worst[0] < 0 else "")
    expect(summary).to_contain_text("10 forward passes in one request")
    expect(summary).to_contain_text(f"Clean next-token loss {api['clean_metric']:.3f}")


def test_the_moved_view_draws_each_keys_value_norm_and_is_kept_in_the_link(open_trained: Open) -> None:
    """Display · Moved asks /api/attention for value_norms and draws weight x |v W_O| in the large head: what each
    key gives the query, beside where it looks."""
    from tests.browser.conftest import focus_z, wait_idle

    page = open_trained(f"?m=induction&t={REPEAT}&layer=1&focus=1.2")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.locator("input[name=view][value=moved]").check()
    body = resp.value.request.post_data_json
    assert "value_norms" in body["include"]
    wait_idle(page)
    # the page reads the streamed arrays form; ask for JSON
    api = page.request.post(resp.value.url, data=script_body(body)).json()
    head = next(h for h in next(la for la in api["layers"] if la["index"] == 1)["heads"] if h["index"] == 2)
    drawn = focus_z(page)
    want = head["value_norms"]
    assert len(drawn) == len(want)
    for q, row in enumerate(drawn):
        for k, v in enumerate(row):
            if v is not None:
                assert v == pytest.approx(want[q][k], rel=1e-3, abs=1e-6)
    assert any(v is not None and v > 1.0 for row in drawn for v in row)  # norms, not weights in [0, 1]
    expect(page.locator(".legend-name").first).to_contain_text("moved")
    assert "view=moved" in page.url


def test_ablating_each_head_fills_the_head_types_column_with_the_servers_effects(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    open_workspace(page, "inside")
    with page.expect_response("**/api/heads") as resp:
        page.get_by_test_id("ht-ablate").check()
    assert resp.value.request.post_data_json["include"] == ["ablation_effect"]
    api = resp.value.json()
    table = page.get_by_test_id("head-types")
    header = table.locator("th", has=page.get_by_role("button", name="Ablation effect"))
    expect(header).to_be_visible()
    top = max(api["heads"], key=lambda h: h["ablation_effect"])
    expect(table).to_contain_text(f"{top['ablation_effect']:.3f}")
    rho = api["ablation_rank_correlation"]["previous_token"]
    expect(page.locator("#headtypes-measured")).to_contain_text(
        f"previous-token {'' if rho >= 0 else '−'}{abs(rho):.2f}"
    )
    assert "habl=1" in page.url


def test_explaining_a_score_lists_its_largest_terms_from_the_server(open_trained: Open) -> None:
    """The induction head L1H2 at 'king' (7) -> 'river' (3): the table's first term is the query's embedding
    against L0H1 on the key side, as /api/qk-attribution answers; the terms sum to the score."""
    page = open_trained(f"?m=induction&t={REPEAT}&layer=1&focus=1.2&pair=7-3")
    open_workspace(page, "inside")
    with page.expect_response("**/api/qk-attribution") as resp:
        page.get_by_test_id("qk-explain").click()
    assert resp.value.status == 200, resp.value.text()
    sent = resp.value.request.post_data_json
    assert (sent["layer"], sent["head"], sent["query"], sent["key"]) == (1, 2, 7, 3)
    api = resp.value.json()
    rows = page.locator("#qk-terms tr")
    expect(rows.nth(1)).to_contain_text("embedding")
    expect(rows.nth(1)).to_contain_text("L0H1")
    assert rows.count() == 1 + 6
    body = page.get_by_test_id("qk-body")
    expect(body).to_have_attribute("data-score", str(api["score"]))
    expect(page.locator("#qk-status")).to_contain_text(f"sum to {api['total']:.2f}")


def test_test_a_claim_can_move_only_a_value_vector(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    open_workspace(page, "test")
    page.locator("#perturb-kind").select_option("value")
    page.locator("#perturb-position").select_option("3")
    with page.expect_response("**/api/perturb") as resp:
        page.get_by_test_id("perturb-run").click()
    assert resp.value.request.post_data_json["change"] == {"kind": "value", "norm": 1}
    assert resp.value.status == 200, resp.value.text()
    verdict = page.get_by_test_id("perturb-verdict")
    expect(verdict).to_contain_text("Causal masking holds")
    assert "pert=3%2Cvalue%2C1" in page.url or "pert=3,value,1" in page.url
