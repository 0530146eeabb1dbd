"""A 6-layer x 12-head model (the size of minilm) through the page: layer choice, 72 heads paged, padding by
server-side tokens. The API answers are stubbed in the browser so this runs with the quick models only; every stub
answer is checked against the server's own response models first, so the stub cannot drift from the API."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from server.schemas.attention import AttentionRequest, AttentionResult
from server.schemas.models import ModelsResponse
from tests.browser.conftest import PageLog, masked_cells, open_workspace, wait_idle

pytestmark = pytest.mark.browser

LAYERS, HEADS = 6, 12
TOKENS = ["[CLS]", "the", "quick", "fox", "jumps", "##ed", "[SEP]"]


def fake_models() -> dict[str, Any]:
    entry = {
        "name": "deep",
        "description": "a stub with minilm's shape",
        "family": "bert",
        "n_layers": LAYERS,
        "n_heads": HEADS,
        "n_kv_heads": HEADS,
        "vocab_size": None,
        "max_positions": 512,
        "reference": None,
        "layers": LAYERS,
        "heads": HEADS,
        "kv_heads": HEADS,
        "d_model": 384,
        "d_head": 32,
        "d_v": 32,
        "max_tokens": 512,
        "tokenizer": "wordpiece",
        "default_text": "the quick fox jumped",
        "default_masks": None,
        "options": {},
        "capabilities": {"decode": False, "batches": True, "cross_attention": False, "predicts_tokens": False},
        "reads": ["text", "tokens"],
        "vocab": None,
    }
    return {"models": [entry]}


def fake_attention(req: dict[str, Any]) -> dict[str, Any]:
    s = len(TOKENS)
    m = req.get("masks") or {}
    padded = set(m.get("padded") or [])
    pad = [k not in padded for k in range(s)]
    eligible = [[pad[k] and not (m.get("causal") and k > q) for k in range(s)] for q in range(s)]
    reasons = {"padding": [[not pad[k] for k in range(s)] for _ in range(s)]} if padded else {}
    if m.get("causal"):
        reasons["causal"] = [[k > q for k in range(s)] for q in range(s)]
    rng = random.Random(7)
    layers = []
    wanted = [req["layer"]] if req.get("layer") is not None else list(range(LAYERS))
    for li in wanted:
        heads = []
        for h in range(HEADS):
            scores = [[rng.uniform(-3, 3) for _ in range(s)] for _ in range(s)]
            weights = []
            for q in range(s):
                e = [math.exp(scores[q][k]) if eligible[q][k] else 0.0 for k in range(s)]
                weights.append([v / sum(e) for v in e])
            stats = {
                "entropy": [1.0] * s,
                "mean_entropy": 1.0,
                "masked_share": [0.0] * s,
                "masked_weight": [0.0] * s,
                "max_masked_weight": 0.0,
                "max_row_sum_error": 0.0,
                "zero_rows": [],
                "score_min": -3.0,
                "score_max": 3.0,
                "eligible_score_min": -3.0,
                "eligible_score_max": 3.0,
                "mean_distance": 1.0,
                "kl_from_uniform": 0.5,
                "dead": False,
                "identical_to": [],
                "qk_rank": 32,
                "qk_rank_max": 32,
                "qk_symmetric": False,
                "sink_mass": 0.1,
            }
            heads.append({"index": h, "kv_group": h, "scores": scores, "weights": weights, "stats": stats})
        layers.append({"index": li, "heads": heads, "head_similarity": [[1.0] * HEADS for _ in range(HEADS)]})
    config = {
        "n_layers": LAYERS,
        "n_heads": HEADS,
        "n_kv_heads": HEADS,
        "d_model": 384,
        "d_head": 32,
        "d_v": 32,
        "d_out": 384,
        "has_w_o": True,
        "scale_factor": 1 / math.sqrt(32),
        "scale": True,
        "device": "cpu",
        "dtype": "float32",
        "seq_len": s,
    }
    return {
        "model": "deep",
        "tokens": TOKENS,
        "config": config,
        "masks": {
            "causal": bool(m.get("causal")),
            "padding": pad if padded else None,
            "window": None,
            "blocked": [],
        },
        "all_masked": "error",
        "eligible": eligible,
        "reasons": reasons,
        "layers": layers,
        "shapes": {},
        "timings_ms": {"attention": 1.0},
    }


@pytest.fixture
def deep_page(page: Page, page_log: PageLog, live_server: str) -> Callable[[str], Page]:
    def models(route: Route) -> None:
        body = ModelsResponse.model_validate(fake_models()).model_dump(mode="json")
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    def attention(route: Route) -> None:
        req = route.request.post_data_json
        AttentionRequest.model_validate(req)  # the page sends what the server takes
        body = AttentionResult.model_validate(fake_attention(req)).model_dump(mode="json")
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route("**/api/models", models)
    page.route("**/api/attention", attention)

    def open_(query: str = "") -> Page:
        page.goto(f"{live_server}/{query}")
        wait_idle(page)
        return page

    return open_


def test_a_deep_model_shows_one_layer_of_heads_and_a_layer_selector(
    deep_page: Callable[[str], Page], page_log: PageLog
) -> None:
    page = deep_page("")
    expect(page.get_by_test_id("head-heatmap")).to_have_count(HEADS)
    options = page.locator("#layer-select option").all_inner_texts()
    assert options == [f"layer {i}" for i in range(LAYERS)] + ["all layers"]
    assert "layer" not in page_log.attention_requests()[-1]  # every layer at once, one shown
    asked = len(page_log.attention_requests())
    page.locator("#layer-select").select_option("3")
    page.wait_for_function("() => document.querySelector('[data-testid=head-heatmap]').dataset.layer === '3'")
    wait_idle(page)
    assert len(page_log.attention_requests()) == asked  # drawn from the layers the page holds
    open_workspace(page, "inside")
    assert len(page_log.attention_requests()) == asked  # the flow too, from the answer held
    expect(page.locator("#flow .flow-ellipsis")).to_contain_text("7 more heads")


def test_all_72_heads_are_paged(deep_page: Callable[[str], Page], page_log: PageLog) -> None:
    page = deep_page("?m=deep&t=the+quick+fox+jumped&layer=all")
    assert "layer" not in page_log.attention_requests()[-1]
    expect(page.get_by_test_id("head-heatmap")).to_have_count(24)
    pager = page.locator("#heads-pager")
    expect(pager).to_contain_text("Heads 1–24 of 72")
    pager.get_by_role("button", name="Next →").click()
    expect(pager).to_contain_text("Heads 25–48 of 72")
    first = page.get_by_test_id("head-heatmap").first
    expect(first).to_have_attribute("data-layer", "2")
    expect(first).to_have_attribute("data-head", "0")
    assert "page=1" in page.url
    open_workspace(page, "inside")
    expect(page.locator("#stats tbody tr")).to_have_count(72)


def test_padding_uses_the_servers_tokens(deep_page: Callable[[str], Page], page_log: PageLog) -> None:
    page = deep_page("")
    expect(page.get_by_test_id("token")).to_have_count(len(TOKENS))
    with page.expect_response("**/api/attention"):
        page.get_by_test_id("token").nth(5).click()
    wait_idle(page)
    assert page_log.attention_requests()[-1]["masks"]["padded"] == [5]
    assert masked_cells(page) == {(q, 5) for q in range(len(TOKENS))}


def test_a_permalink_with_padding_sends_positions_without_a_probe(
    deep_page: Callable[[str], Page], page_log: PageLog
) -> None:
    page = deep_page("?m=deep&t=the+quick+fox+jumped&pad=6")
    assert [b for b in page_log.api_bodies if b.get("include") == []] == []  # no request only to count tokens
    assert len(page_log.api_bodies) == 1
    assert page_log.attention_requests()[-1]["masks"]["padded"] == [6]
    expect(page.get_by_test_id("token").nth(6)).to_have_attribute("aria-pressed", "true")
    # the grid's reason for the padded column is the result's own
    expect(page.locator("#eligibility button[data-q='0'][data-k='6']")).to_have_text("P")


def test_the_stub_is_checked_against_the_servers_schema() -> None:
    # a negative control: the validation the stub goes through refuses an answer without a field the page reads
    from pydantic import ValidationError

    broken = fake_attention({"masks": {}})
    del broken["tokens"]  # `eligible` may be null now (an answer without grids), so the tokens every view reads
    with pytest.raises(ValidationError):
        AttentionResult.model_validate(broken)
