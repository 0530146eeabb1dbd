"""The chapter's mechanics on the page, against a real `attnlab serve`: decoding with a KV cache, the cost panel, the
audit export, Figure 21.5, the classic bugs marked WRONG, eligible-pair counts, next-word predictions and the
W_Q = W_K flag. Every number the page shows is compared with the API's own answer to the same request."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, focus_z, open_workspace, wait_idle
from tests.browser.test_experiments import tab_to
from tests.helpers import script_body

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]
RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
AUDIT_KEYS = {
    "d_model", "heads", "kv_heads", "d_k", "d_v", "projections", "scale", "softmax_axis", "masks", "all_masked",
    "dropout", "dtype", "device", "seq_len", "valid_tokens", "score_range", "entropy", "max_masked_weight",
    "max_row_sum_error", "cache_policy", "peak_bytes", "tokens_per_s", "sdpa_max_diff",
}  # fmt: skip


def data(page: Page, testid: str) -> dict[str, str]:
    return page.get_by_test_id(testid).evaluate("e => ({...e.dataset})")  # type: ignore[no-any-return]


def decode(page: Page) -> tuple[dict[str, Any], dict[str, Any]]:
    """Press "Decode step by step" (in the Mechanics workspace); return the body the page sent and the API's answer."""
    open_workspace(page, "mechanics")
    with page.expect_response("**/api/decode") as resp:
        page.get_by_test_id("decode-run").click()
    assert resp.value.status == 200, resp.value.text()
    expect(page.get_by_test_id("kv-cache")).to_be_visible()
    return resp.value.request.post_data_json, resp.value.json()


def test_decoding_the_induction_model_steps_through_the_cache(
    open_trained: Open, trained_server: str, page_log: PageLog
) -> None:
    page = open_trained("?m=induction&layer=1&focus=1.2")
    body, api = decode(page)
    # the page's run as one sequence: nothing that only /api/attention takes, and the same answer when asked again
    assert body["model"] == "induction" and body["masks"]["causal"] is True
    assert not {"include", "layer", "demo_bug", "texts", "source"} & set(body)
    again = httpx.post(f"{trained_server}/api/decode", json=body, timeout=60).json()
    assert again["steps"][3]["weights"] == api["steps"][3]["weights"]
    n = len(api["tokens"])
    assert n == 24 and api["layers"] == 2 and api["heads"] == 4
    step = page.get_by_test_id("decode-step")
    cache = page.get_by_test_id("kv-cache")
    per_token = api["cache"]["bytes_per_token"]
    assert per_token == 2 * 2 * 4 * 16 * 4  # 2 (K and V) x layers x kv_heads x d_head x float32
    for t in [0, 1, 2, 3]:
        if t:
            page.locator("#decode-next").click()
        expect(step).to_have_attribute("data-step", str(t))
        d = data(page, "decode-step")
        assert (d["layer"], d["head"], d["token"]) == ("1", "2", api["tokens"][t])
        row = json.loads(d["weights"])
        assert len(row) == t + 1
        assert row == pytest.approx(api["steps"][t]["weights"][1][2], abs=1e-6)
        c = data(page, "kv-cache")
        assert int(c["bytes"]) == (t + 1) * per_token == api["steps"][t]["cache_bytes"]
        assert int(c["length"]) == t + 1
        expect(cache).to_contain_text(f"= {t + 1} token{'s' if t else ''} × {per_token:,} bytes per token")
        assert page.locator(".kv-block[data-kind=K]").first.get_attribute("data-rows") == str(t + 1)
        nxt = api["steps"][t]["next_token"]
        expect(page.get_by_test_id("decode-next")).to_contain_text(f"“{nxt['token']}” (p = {nxt['p']:.3f})")
    expect(page.get_by_test_id("kv-formula")).to_have_text(api["cache"]["formula"])
    assert api["max_diff_vs_full"] < 1e-4
    expect(page.get_by_test_id("kv-match")).to_contain_text("matches the full pass")
    assert "dec=3" in page.url
    # the slider reaches the last step from the keyboard; on the repeat the model predicts the word that follows
    page.locator("#decode-slider").focus()
    page.keyboard.press("End")
    expect(step).to_have_attribute("data-step", str(n - 1))
    assert int(data(page, "kv-cache")["bytes"]) == n * per_token
    last = api["steps"][n - 2]["next_token"]["token"]
    assert last == api["tokens"][n - 1]  # the induction head at work: the repeat is predicted
    # another head: its mini strip opens it, and the step row follows
    page.locator(".dec-mini[data-layer='0'][data-head='1']").click()
    expect(step).to_have_attribute("data-layer", "0")
    expect(step).to_have_attribute("data-head", "1")
    row = json.loads(data(page, "decode-step")["weights"])
    assert row == pytest.approx(api["steps"][n - 1]["weights"][0][1], abs=1e-6)
    assert page_log.page_errors == []


def test_decoding_is_refused_on_minilm_and_says_why(open_trained: Open, trained_server: str) -> None:
    page = open_trained("?m=minilm&t=the+cat+sat&causal=1&layer=0")
    open_workspace(page, "mechanics")
    with page.expect_response("**/api/decode") as resp:
        page.get_by_test_id("decode-run").click()
    assert resp.value.status == 422
    expect(page.locator("#decode-status")).to_have_text(resp.value.json()["error"]["message"])
    expect(page.locator("#decode-status")).to_contain_text("encoder")
    expect(page.get_by_test_id("decode-step")).to_be_hidden()
    expect(page.get_by_test_id("kv-cache")).to_be_hidden()
    # and the next-word row belongs to models that predict words: none for minilm
    expect(page.get_by_test_id("next-words")).to_be_hidden()


def test_grouped_kv_keeps_a_four_times_smaller_cache(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page(RANDOM + "&d_model=32&heads=8&kv_heads=2&causal=1")
    _, grouped = decode(page)
    assert grouped["kv_heads"] == 2 and grouped["heads"] == 8
    c = data(page, "kv-cache")
    assert int(c["bytesPerToken"]) == grouped["cache"]["bytes_per_token"] == 64
    expect(page.get_by_test_id("kv-cache")).to_contain_text("4× smaller")
    k_grouped = page.locator(".kv-block[data-kind=K] canvas").first.bounding_box()
    # all 8 K/V heads: the panel decodes again by itself
    with page.expect_response("**/api/decode") as resp:
        page.locator("#opt-kv_heads").fill("8")
        page.locator("#opt-kv_heads").dispatch_event("change")
    full = resp.value.json()
    assert resp.value.request.post_data_json["options"]["kv_heads"] == 8
    expect(page.get_by_test_id("kv-cache")).to_have_attribute("data-kv-heads", "8")
    assert int(data(page, "kv-cache")["bytesPerToken"]) == full["cache"]["bytes_per_token"] == 4 * 64
    k_full = page.locator(".kv-block[data-kind=K] canvas").first.bounding_box()
    assert k_grouped and k_full and k_full["width"] >= 3.5 * k_grouped["width"]  # the cache is drawn 4x wider
    # causal off: decoding needs it, and the server's reason shows in the panel
    with page.expect_response("**/api/decode") as resp:
        page.get_by_test_id("mask-causal").uncheck()
    assert resp.value.status == 422
    expect(page.locator("#decode-status")).to_have_text(resp.value.json()["error"]["message"])
    expect(page.get_by_test_id("kv-cache")).to_be_hidden()
    assert page_log.page_errors == []


def test_the_cost_panel_shows_the_apis_numbers_for_this_run(open_page: Callable[..., Page], live_server: str) -> None:
    page = open_page(RANDOM + "&d_model=32&heads=8&kv_heads=2")
    open_workspace(page, "mechanics")
    panel = page.get_by_test_id("cost-panel")
    table = page.locator("#cost-table")
    expect(table.locator("tr")).to_have_count(9)
    query = json.loads(table.get_attribute("data-query") or "{}")
    assert query == {
        "batch": 1, "heads": 8, "kv_heads": 2, "seq_len": 6, "d_model": 32, "layers": 1, "dtype": "float32",
        "measure": False,
    }  # fmt: skip
    api = httpx.post(f"{live_server}/api/cost", json=query, timeout=30).json()
    shown = dict(table.locator("tr").evaluate_all("els => els.map(e => [e.dataset.key, +e.dataset.value])"))
    for key, value in shown.items():
        want = api["flops"][key.split(".")[1]] if key.startswith("flops.") else api[key]
        assert value == want, key
    expect(page.locator("#cost-note")).to_have_text(api["note"])
    # the plot: both curves over the server's S values, this run's S and the limits marked
    page.wait_for_function("() => document.getElementById('cost-plot').dataset.drawn === '1'")
    plot = page.evaluate(
        """() => { const e = document.getElementById('cost-plot');
             return {x: e.data[0].x, y: e.data[0].y, kv: e.data[1].y, shapes: e.layout.shapes.map(s => [s.x0, s.y0]),
                     svg: e.querySelectorAll('.main-svg').length}; }"""
    )
    assert plot["x"] == [c["seq_len"] for c in api["curve"]] and plot["svg"] >= 1
    assert plot["y"] == [c["score_bytes"] for c in api["curve"]]
    assert plot["kv"] == [c["kv_cache_bytes"] for c in api["curve"]]
    xs = [x for x, _ in plot["shapes"]]
    assert 6 in xs and api["limits"]["max_tokens"] in xs
    assert api["limits"]["memory_bytes"] in [y for _, y in plot["shapes"]]

    # measured here: peak bytes, time, tokens/s and how the peak is measured
    with page.expect_response("**/api/cost") as resp:
        page.get_by_test_id("cost-measure").click()
    assert resp.value.request.post_data_json == {**query, "measure": True}
    measured = resp.value.json()["measured"]
    out = page.get_by_test_id("cost-measured")
    expect(out).to_contain_text(measured["method"])
    assert int(out.get_attribute("data-peak-bytes") or 0) == measured["peak_bytes"] > 0
    assert float(out.get_attribute("data-tokens-per-s") or 0) > 0

    # what if: 8192 tokens in bfloat16 is a new request; measuring it is over the server's limit, said in its words
    with page.expect_response("**/api/cost") as resp:
        page.locator("#cost-seq_len").fill("8192")
        page.locator("#cost-seq_len").press("Enter")
        page.locator("#cost-dtype").select_option("bfloat16")
    expect(out).to_be_empty()  # a measurement of another shape is gone
    page.wait_for_function("() => JSON.parse(document.getElementById('cost-table').dataset.query).dtype === 'bfloat16'")
    assert "cost=seq_len:8192,dtype:bfloat16" in unquote(page.url)
    with page.expect_response("**/api/cost") as resp:
        page.get_by_test_id("cost-measure").click()
    assert resp.value.status == 422
    expect(out).to_have_text(resp.value.json()["error"]["message"])
    expect(panel).to_contain_text("1024 -> 8192 is 64x")
    page.locator("#cost-reset").click()
    page.wait_for_function("() => JSON.parse(document.getElementById('cost-table').dataset.query).seq_len === 6")
    assert "cost=" not in page.url


def test_the_audit_export_downloads_the_record(open_page: Callable[..., Page], live_server: str) -> None:
    page = open_page(RANDOM + "&causal=1")
    open_workspace(page, "mechanics")
    with page.expect_download() as dl, page.expect_response("**/api/attention") as resp:
        page.get_by_test_id("audit-export").click()
    body = resp.value.request.post_data_json
    assert body["include"] == ["audit"] and body["masks"]["causal"] is True and body["text"] == "the cat sat on the mat"
    assert dl.value.suggested_filename == "attnlab-audit-random.json"
    with open(dl.value.path()) as f:
        audit = json.load(f)
    assert set(audit) >= AUDIT_KEYS
    assert audit["sdpa_max_diff"] < 1e-5
    assert [p["mask"] for p in audit["perturbation"]] == ["causal"] and audit["perturbation"][0]["holds"]
    summary = page.get_by_test_id("audit-summary")
    assert float(summary.get_attribute("data-sdpa-max-diff") or "nan") == audit["sdpa_max_diff"]
    assert int(summary.get_attribute("data-peak-bytes") or 0) == audit["peak_bytes"] > 0
    expect(summary.locator("li[data-key=sdpa_max_diff]")).to_contain_text("they agree")
    expect(summary.locator("li[data-key='perturbation.causal']")).to_contain_text(audit["perturbation"][0]["verdict"])
    # another run: the summary of the old one goes
    page.get_by_test_id("mask-causal").uncheck()
    expect(summary.locator("li")).to_have_count(0)


def test_the_scale_sweep_draws_figure_21_5_and_follows_the_variance(open_page: Callable[..., Page]) -> None:
    page = open_page()
    open_workspace(page, "mechanics")
    sweep = page.get_by_test_id("scale-sweep")
    with page.expect_response("**/api/scale-sweep") as resp:
        page.locator("#sweep-draw").click()
    assert resp.value.request.post_data_json["variance"] == 1
    api = resp.value.json()
    page.wait_for_function("() => document.getElementById('sweep-plot').dataset.variance === '1'")
    assert sweep.locator(".main-svg").count() >= 1
    traces = page.evaluate("document.getElementById('sweep-plot').data.map(t => ({name: t.name, x: t.x, y: t.y}))")
    by_name = {t["name"]: t for t in traces}
    dk = [w["d_k"] for w in api["widths"]]
    assert by_name["unscaled q·k"]["x"] == dk
    assert by_name["unscaled q·k"]["y"] == [w["std_unscaled"] for w in api["widths"]]
    assert by_name["scaled q·k / √d_k"]["y"] == [w["std_scaled"] for w in api["widths"]]
    assert page.evaluate("document.getElementById('sweep-plot').layout.xaxis.type") == "log"
    assert "sweep=1" in page.url

    with page.expect_response("**/api/scale-sweep") as resp:
        page.locator("#sweep-variance").fill("2")
        page.locator("#sweep-variance").press("Enter")
    assert resp.value.request.post_data_json["variance"] == 2
    page.wait_for_function("() => document.getElementById('sweep-plot').dataset.variance === '2'")
    expected = page.evaluate("document.getElementById('sweep-plot').data[2].y")
    assert expected == pytest.approx([2 * math.sqrt(d) for d in dk])
    expect(sweep).to_contain_text("Variance 2:")
    assert "sweep=2" in page.url


def test_a_classic_bug_is_marked_wrong_and_round_trips_through_the_url(
    open_page: Callable[..., Page], run_and_wait: Callable[[Callable[[], None]], dict[str, Any]], page: Page
) -> None:
    open_page("?m=textbook&causal=0")
    banner = page.get_by_test_id("demo-bug")
    expect(banner).to_be_hidden()  # never the default
    expect(page.get_by_test_id("bug-select")).to_have_value("")
    sums = page.get_by_test_id("sums")
    rows = json.loads(sums.get_attribute("data-row-sums") or "[]")
    assert rows == pytest.approx([1] * 5, abs=1e-5)  # the correct softmax: every row sums to 1

    body = run_and_wait(lambda: page.get_by_test_id("bug-select").select_option("softmax_over_queries"))
    assert body["demo_bug"] == "softmax_over_queries"
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("WRONG")
    expect(banner).to_contain_text("columns sum to 1 and rows do not")
    assert "bug=softmax_over_queries" in page.url
    cols = json.loads(sums.get_attribute("data-column-sums") or "[]")
    rows = json.loads(sums.get_attribute("data-row-sums") or "[]")
    assert cols == pytest.approx([1] * 5, abs=1e-5)
    assert max(abs(r - 1) for r in rows) > 0.01
    expect(sums.locator(".sums-line").first).to_contain_text("0 of 5 rows sum to 1")
    expect(sums.locator(".sums-line").last).to_contain_text("every column sums to 1")
    expect(page.locator("#focus-title")).to_have_text("Head 0, large")  # its "WRONG ON PURPOSE" comes from CSS
    # head types run the correct code: their request carries no bug (the panel says so)
    with page.expect_response("**/api/heads") as resp:
        page.get_by_test_id("mask-causal").check()
    assert "demo_bug" not in resp.value.request.post_data_json
    wait_idle(page)
    expect(banner).to_be_visible()

    link = page.url
    body = run_and_wait(lambda: page.get_by_test_id("bug-select").select_option(""))
    assert "demo_bug" not in body
    expect(banner).to_be_hidden()
    assert "bug=" not in page.url
    # the link taken while the bug was on opens it again (the same tab, a new document)
    page.goto(link)
    wait_idle(page)
    expect(page.get_by_test_id("demo-bug")).to_be_visible()
    expect(page.get_by_test_id("bug-select")).to_have_value("softmax_over_queries")


def test_a_flipped_mask_draws_the_weight_that_went_onto_masked_cells(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=textbook&bug=flipped_mask")  # causal + position 5 padding, read the wrong way round
    expect(page.get_by_test_id("demo-bug")).to_contain_text("True = blocked")
    card = page.get_by_test_id("head-heatmap").first
    assert card.get_attribute("data-masked-cells") == ""  # drawn coloured, so the leaked weight shows


def test_pair_counts_say_how_many_pairs_each_mask_leaves(
    open_page: Callable[..., Page], run_and_wait: Callable[[Callable[[], None]], dict[str, Any]], page: Page
) -> None:
    open_page(RANDOM + "&causal=1")
    counts = page.get_by_test_id("pair-counts")
    expect(counts.locator("li[data-mask=causal]")).to_have_text("causal: 21 of 36 pairs")
    expect(counts.locator("li[data-mask=eligible]")).to_contain_text("21 of 36 pairs eligible")
    run_and_wait(lambda: page.locator("#mask-window-on").check())  # a window of 3 on top
    window = sum(abs(q - k) < 3 for q in range(6) for k in range(6))
    both = sum(abs(q - k) < 3 and k <= q for q in range(6) for k in range(6))
    expect(counts.locator("li[data-mask=window]")).to_have_text(f"window: {window} of 36 pairs")
    expect(counts.locator("li[data-mask=eligible]")).to_contain_text(f"{both} of 36 pairs eligible")


def test_induction_predictions_sit_under_the_tokens(open_trained: Open, trained_server: str) -> None:
    page = open_trained("?m=induction")
    text = page.get_by_test_id("sequence-input").input_value()
    api = httpx.post(
        f"{trained_server}/api/attention", json={"model": "induction", "text": text, "include": []}, timeout=60
    ).json()
    words = page.get_by_test_id("next-words")
    expect(words).to_be_visible()
    shown = words.locator("li").evaluate_all("els => els.map(e => [e.dataset.predicted, +e.dataset.p])")
    assert [w for w, _ in shown] == [w["token"] for w in api["config"]["next_word"]]
    assert [p for _, p in shown] == pytest.approx([w["p"] for w in api["config"]["next_word"]], abs=1e-6)
    tokens = api["tokens"]
    want = [i for i, w in enumerate(api["config"]["next_word"][:-1]) if w["token"] == tokens[i + 1]]
    right = words.locator("li.right").evaluate_all("els => els.map(e => +e.dataset.position)")
    assert right == want
    assert len([i for i in want if i >= len(tokens) // 2]) >= len(tokens) // 2 - 3  # the repeat is predicted
    expect(words).to_contain_text(f"{len(right)} of {len(tokens) - 1}")


def test_a_head_with_w_q_equal_to_w_k_says_its_scores_are_symmetric(open_page: Callable[..., Page]) -> None:
    w = [[0.7, 0], [0.1, 0.6], [0.2, 0.4], [0.4, 0.1]]
    x = [[1, 0, 0.2, 0.1], [0.8, 0.2, 0.1, 0.3], [0.1, 0.9, 0.3, 0.2], [0.3, 0.4, 0.8, 0.2], [0.2, 0.1, 0.6, 0.9]]
    v = [[0.4, 0.1, 0.2], [0.2, 0.5, 0.1], [0.1, 0.3, 0.6], [0.5, 0.2, 0.2]]
    mx = quote(json.dumps({"x": x, "w_q": w, "w_k": w, "w_v": v}))
    page = open_page(f"?m=textbook&mx={mx}")
    card = page.get_by_test_id("head-heatmap").first
    expect(card.locator(".flag-symmetric")).to_have_text("W_Q = W_K: scores are symmetric")
    assert "symmetric" in (card.get_attribute("data-flags") or "")
    open_workspace(page, "inside")
    expect(page.locator("#stats tbody tr").first).to_contain_text("W_Q = W_K: scores are symmetric")
    page = open_page("?m=textbook")
    expect(page.get_by_test_id("head-heatmap").first.locator(".flag-symmetric")).to_have_count(0)


def test_cross_attention_draws_queries_against_the_sources_keys(
    open_page: Callable[..., Page], live_server: str, page_log: PageLog
) -> None:
    page = open_page("?m=random&t=the+cat+sat")
    page.locator("#more-inputs summary").click()
    page.get_by_test_id("source-input").fill("le chat est assis ici")
    with page.expect_response(lambda r: r.url.endswith("/api/attention") and "source" in (r.request.post_data or "")):
        page.get_by_test_id("source-input").press("Control+Enter")
    wait_idle(page)
    body = page_log.attention_requests()[-1]
    assert body["source"] == {"text": "le chat est assis ici"} and body["text"] == "the cat sat"
    assert body["masks"] == {"blocked": []}  # causal, window and padding belong to one sequence
    expect(page.get_by_test_id("mask-causal")).to_be_disabled()
    # mark the source's last position padding: no query attends to it
    with page.expect_response("**/api/attention") as resp:
        page.get_by_test_id("source-token").nth(4).click()
    wait_idle(page)
    body = resp.value.request.post_data_json
    assert body["source"]["padding"] == [True, True, True, True, False]
    api = httpx.post(f"{live_server}/api/attention", json=body, timeout=30).json()  # the page's came as arrays
    assert api["source_tokens"] == ["le", "chat", "est", "assis", "ici"] and len(api["tokens"]) == 3
    card = page.get_by_test_id("head-heatmap").first
    assert card.get_attribute("data-masked-cells") == "0-4,1-4,2-4"
    layout = json.loads(card.get_attribute("data-layout") or "{}")
    box = card.locator("canvas").bounding_box()
    assert box and box["width"] > box["height"]  # 3 rows, 5 columns: wider than tall
    assert layout["cell"] > 0
    want = api["layers"][0]["heads"][0]["weights"]
    z = focus_z(page)
    assert len(z) == 3 and all(len(row) == 5 for row in z)
    for q in range(3):
        assert z[q][4] is None
        assert z[q][:4] == pytest.approx(want[q][:4], abs=1e-6)
    keys = page.locator("#retrieval g.rd-key")
    expect(keys).to_have_count(5)
    expect(page.locator("#retrieval g.rd-key.rd-masked")).to_have_count(1)
    expect(page.locator("#eligibility thead th")).to_have_count(6)  # the corner and five source keys
    open_workspace(page, "inside")
    expect(page.locator("#flow-caption")).to_contain_text("K and V from the source (5)")
    open_workspace(page, "explore")
    assert "src=le+chat+est+assis+ici" in page.url and "spad=4" in page.url
    # the server names why: the source's padding, not just "masked"
    cell = page.locator("#eligibility button[data-q='0'][data-k='4']")
    expect(cell).to_have_attribute("aria-label", re.compile(r"masked by padding;"))
    assert page_log.page_errors == []


def test_a_batch_shows_each_item_through_the_same_views(
    open_trained: Open, trained_server: str, page_log: PageLog
) -> None:
    page = open_trained("?m=minilm&t=The+cat+sat&layer=0")
    texts = ["The animal was tired", "it ran", "The street was too wide to cross"]
    page.locator("#more-inputs summary").click()
    page.get_by_test_id("batch-input").fill("\n".join(texts))
    with page.expect_response(lambda r: r.url.endswith("/api/attention") and "texts" in (r.request.post_data or "")):
        page.get_by_test_id("run-button").click()
    wait_idle(page)
    body = page_log.attention_requests()[-1]
    assert body["texts"] == texts and "text" not in body and "padded" not in body["masks"]
    api = httpx.post(f"{trained_server}/api/attention", json=script_body(body), timeout=60).json()
    assert api["config"]["batch"] == 3
    tokens = page.get_by_test_id("token").locator(".text")
    expect(tokens).to_have_text(api["batch_tokens"][0])
    expect(page.get_by_test_id("batch-item").locator("option")).to_have_count(3)
    open_workspace(page, "inside")
    expect(page.locator("#flow-caption")).to_contain_text("3 × 12 × 9 × 9")
    open_workspace(page, "explore")

    asked = len(page_log.attention_requests())
    with page.expect_response("**/api/heads") as heads:
        page.get_by_test_id("batch-item").select_option("1")  # "it ran": four real tokens, five [PAD]
    assert heads.value.request.post_data_json["text"] == "it ran"  # head types run this item on its own
    expect(tokens).to_have_text(api["batch_tokens"][1])
    assert len(page_log.attention_requests()) == asked  # the item comes from the batch already here
    real = api["batch_padding"][1]
    masked = {f"{q}-{k}" for q in range(9) for k in range(9) if not real[k]}
    card = page.get_by_test_id("head-heatmap").first
    assert set((card.get_attribute("data-masked-cells") or "").split(",")) == masked
    want = api["layers"][0]["heads"][0]["weights"][1]
    z = focus_z(page)
    for q in range(9):
        for k in range(9):
            if real[k]:
                assert z[q][k] == pytest.approx(want[q][k], abs=1e-6)
            else:
                assert z[q][k] is None
    # each item's own reasons: key 8 is this item's padding (the server's B x S x S grids, cut to the item)
    cell = page.locator("#eligibility button[data-q='0'][data-k='8']")
    expect(cell).to_have_attribute("aria-label", re.compile(r"masked by padding;"))
    stats = api["layers"][0]["heads"][0]["stats"][1]
    open_workspace(page, "inside")
    row = page.locator("#stats tbody tr").first.locator("td").first
    expect(row).to_have_text(f"{stats['mean_entropy']:.3f}")
    assert "item=1" in page.url and "batch=" in page.url
    assert page_log.page_errors == []


def test_the_mechanics_panels_work_from_the_keyboard(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1")
    open_workspace(page, "mechanics")
    page.locator("[data-testid=ws-tab-mechanics]").focus()
    tab_to(page, "decode-run")
    with page.expect_response("**/api/decode"):
        page.keyboard.press("Enter")
    step = page.get_by_test_id("decode-step")
    expect(step).to_have_attribute("data-step", "0")
    page.keyboard.press("Tab")  # Prev is disabled on the first step: the next stop is Play, then Next
    assert page.evaluate("document.activeElement.id") == "decode-play"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "decode-next"
    page.keyboard.press("Enter")
    expect(step).to_have_attribute("data-step", "1")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "decode-slider"
    page.keyboard.press("ArrowRight")
    expect(step).to_have_attribute("data-step", "2")
    tab_to(page, "cost-measure")
    with page.expect_response("**/api/cost"):
        page.keyboard.press("Enter")
    expect(page.get_by_test_id("cost-measured")).to_contain_text("How peak memory is measured")
    tab_to(page, "audit-export")
    with page.expect_download():
        page.keyboard.press("Enter")
    expect(page.get_by_test_id("audit-summary").locator("li").first).to_contain_text("they agree")
