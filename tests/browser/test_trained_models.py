"""The trained models through the page, against a real `attnlab serve` with minilm and induction loaded:
72 heads of minilm on a person's own sentence, the head-types table, top heads for "it" -> "animal", and the
induction example."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, focus_z, masked_cells, open_workspace, wait_idle

pytestmark = pytest.mark.browser

SENTENCE = "The animal didn't cross the street because it was too tired"
MINILM_EXAMPLE = "MiniLM: which heads make “it” look at “animal”?"
INDUCTION_EXAMPLE = "Induction: 12 random words, twice — find the induction head"
Open = Callable[[str], Page]


@pytest.fixture(scope="module")
def models(trained_server: str) -> dict[str, dict[str, Any]]:
    body = httpx.get(f"{trained_server}/api/models", timeout=10).json()
    return {m["name"]: m for m in body["models"]}


def rows(page: Page) -> list[tuple[int, int]]:
    return [
        (int(r["layer"]), int(r["head"]))
        for r in page.get_by_test_id("head-type-row").evaluate_all(
            "els => els.map(e => ({layer: e.dataset.layer, head: e.dataset.head}))"
        )
    ]


def column(page: Page, key: str) -> list[float]:
    values = page.locator(f"[data-testid=head-type-row] td[data-col={key}]").evaluate_all(
        "els => els.map(e => Number(e.dataset.value))"
    )
    return [float(v) for v in values]


def choose_example(page: Page, label: str) -> None:
    value = page.locator("#example-select option", has_text=label).get_attribute("value")
    assert value, label
    page.locator("#example-select").select_option(value)


def test_minilm_on_a_typed_sentence_shows_72_heads_over_six_layers(
    open_trained: Open, page_log: PageLog, trained_server: str
) -> None:
    page = open_trained("")
    with page.expect_response("**/api/attention"):
        page.get_by_test_id("model-select").select_option("minilm")
    wait_idle(page)
    page.get_by_test_id("sequence-input").fill("Transformers attend to every wordpiece token")
    with page.expect_response("**/api/attention"):
        page.get_by_test_id("run-button").click()
    wait_idle(page)
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    expected = httpx.post(
        f"{trained_server}/api/attention",
        json={"model": "minilm", "text": "Transformers attend to every wordpiece token", "include": []},
        timeout=30,
    ).json()["tokens"]
    assert tokens == expected and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert any(t.startswith("##") for t in tokens), tokens  # wordpieces shown as the model splits them
    layer_options = page.locator("#layer-select option").all_inner_texts()
    assert layer_options == [f"layer {i}" for i in range(6)] + ["all layers"]
    expect(page.get_by_test_id("head-heatmap")).to_have_count(12)

    page.locator("#layer-select").select_option("all")
    wait_idle(page)
    pager = page.locator("#heads-pager")
    expect(pager).to_contain_text("Heads 1–24 of 72")
    seen: set[tuple[int, int]] = set()
    for page_no in range(3):
        if page_no:
            pager.get_by_role("button", name="Next →").click()
        expect(pager).to_contain_text(f"Heads {page_no * 24 + 1}–{page_no * 24 + 24} of 72")
        cards = page.get_by_test_id("head-heatmap")
        expect(cards).to_have_count(24)
        seen |= {
            (int(c["layer"]), int(c["head"]))
            for c in cards.evaluate_all("els => els.map(e => ({layer: e.dataset.layer, head: e.dataset.head}))")
        }
    assert seen == {(layer, head) for layer in range(6) for head in range(12)}
    assert "layer" not in page_log.attention_requests()[-1]

    # causal recomputes every layer on the real model
    with page.expect_response("**/api/attention") as resp:
        page.get_by_test_id("mask-causal").check()
    body = resp.value.request.post_data_json
    assert body is not None and body["masks"]["causal"] is True
    wait_idle(page)
    n = len(tokens)
    assert masked_cells(page) == {(q, k) for q in range(n) for k in range(n) if k > q}

    # padding a wordpiece recomputes attention, and the head types are scored again with that mask
    with page.expect_request("**/api/heads") as heads_req, page.expect_response("**/api/attention") as resp:
        page.get_by_test_id("token").nth(2).click()
    body = resp.value.request.post_data_json
    assert body is not None and body["masks"]["padded"] == [2]
    heads_body = heads_req.value.post_data_json
    assert heads_body is not None and heads_body["masks"]["padded"] == [2]
    wait_idle(page)
    assert {(q, 2) for q in range(n)} <= masked_cells(page)


def test_head_types_table_sorts_filters_and_opens_the_induction_head(open_trained: Open, trained_server: str) -> None:
    page = open_trained("")
    with page.expect_response("**/api/attention"):
        page.get_by_test_id("model-select").select_option("induction")
    wait_idle(page)
    expect(page.get_by_test_id("mask-causal")).to_be_checked()  # the model's default
    open_workspace(page, "inside")
    expect(page.get_by_test_id("head-type-row")).to_have_count(8)
    assert rows(page)[:4] == [(0, 0), (0, 1), (0, 2), (0, 3)]  # layer order until a column is sorted
    header = page.locator("#headtypes th", has=page.get_by_role("button", name="Induction"))
    expect(header).to_have_attribute("aria-sort", "none")
    header.get_by_role("button").click()
    expect(header).to_have_attribute("aria-sort", "descending")
    induction = column(page, "induction")
    assert induction == sorted(induction, reverse=True)
    first = rows(page)[0]
    assert first[0] == 1 and induction[0] > 0.5, (first, induction)
    assert "hsort=induction" in page.url

    # sorting is keyboard-operable too: Enter on the heading flips the order
    header.get_by_role("button").focus()
    page.keyboard.press("Enter")
    expect(header).to_have_attribute("aria-sort", "ascending")
    assert column(page, "induction") == sorted(induction)
    page.keyboard.press("Enter")
    expect(header).to_have_attribute("aria-sort", "descending")

    # filter: a score threshold, then a head name
    page.locator("#ht-score").select_option("induction")
    page.locator("#ht-min").fill("0.5")
    assert all(v >= 0.5 for v in column(page, "induction"))
    assert {layer for layer, _ in rows(page)} == {1}
    page.locator("#ht-score").select_option("")
    page.locator("#ht-find").fill("L0H1")
    expect(page.get_by_test_id("head-type-row")).to_have_count(1)
    page.locator("#ht-find").fill("")
    expect(page.get_by_test_id("head-type-row")).to_have_count(8)

    # pressing the top row opens that head: the layer menu moves to its layer, the head opens large
    page.get_by_test_id("head-type-row").first.click()
    expect(page.locator("#layer-select")).to_have_value(str(first[0]))
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", str(first[0]))
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", str(first[1]))
    expect(page.locator("#focus-title")).to_have_text(f"Layer {first[0]} · head {first[1]}, large")
    wait_idle(page)
    weights = httpx.post(
        f"{trained_server}/api/attention",
        json={
            "model": "induction",
            "text": page.get_by_test_id("sequence-input").input_value(),
            "masks": {"causal": True},
            "layer": first[0],
            "include": ["weights"],
        },
        timeout=30,
    ).json()["layers"][0]["heads"][first[1]]["weights"]
    z = focus_z(page)
    assert z[-1][0] == pytest.approx(weights[-1][0], abs=1e-6)  # the opened head's own numbers
    expect(page.locator(f"[data-testid=head-heatmap][data-head='{first[1]}']")).to_have_attribute(
        "aria-pressed", "true"
    )
    assert f"focus={first[0]}.{first[1]}" in page.url

    # the quick button opens the best previous-token head, in layer 0
    open_workspace(page, "inside")
    best = page.locator("#headtypes-best button[data-best=previous_token]")
    best.click()
    expect(page.locator("#layer-select")).to_have_value("0")
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "0")
    open_workspace(page, "inside")
    expect(page.locator("#headtypes tbody tr.current")).to_have_count(1)
    current = page.locator("#headtypes tbody tr.current")
    assert float(current.locator("td[data-col=previous_token]").get_attribute("data-value") or 0) > 0.5


def test_minilm_head_types_cover_all_72_heads_on_the_typed_text(open_trained: Open) -> None:
    page = open_trained("?m=minilm&t=the+cat+sat+on+the+mat")
    open_workspace(page, "inside")
    expect(page.get_by_test_id("head-type-row")).to_have_count(72)
    assert set(rows(page)) == {(layer, head) for layer in range(6) for head in range(12)}
    expect(page.locator("#headtypes-measured")).to_contain_text("your text (8 tokens")
    page.locator("#ht-find").fill("L3")
    expect(page.get_by_test_id("head-type-row")).to_have_count(12)


def test_minilm_example_ranks_the_heads_that_link_it_to_animal(open_trained: Open, trained_server: str) -> None:
    page = open_trained("")
    choose_example(page, MINILM_EXAMPLE)
    items = page.get_by_test_id("top-heads").locator("button")
    expect(items).to_have_count(10)
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    it, animal = tokens.index("it"), tokens.index("animal")
    expect(page.locator("#pair-query")).to_have_value(str(it))
    expect(page.locator("#pair-key")).to_have_value(str(animal))
    shown = items.evaluate_all(
        "els => els.map(e => ({layer: +e.dataset.layer, head: +e.dataset.head, weight: +e.dataset.weight}))"
    )
    full = httpx.post(
        f"{trained_server}/api/attention",
        json={"model": "minilm", "text": SENTENCE, "include": ["weights"]},
        timeout=30,
    ).json()
    assert full["tokens"] == tokens
    every = sorted(
        ((h["weights"][it][animal], layer["index"], h["index"]) for layer in full["layers"] for h in layer["heads"]),
        reverse=True,
    )
    top = shown[0]
    assert top["weight"] == pytest.approx(full["layers"][top["layer"]]["heads"][top["head"]]["weights"][it][animal])
    assert top["weight"] == pytest.approx(every[0][0])
    assert [s["weight"] for s in shown] == pytest.approx([w for w, _, _ in every[:10]], abs=1e-6)
    # the example opens the head that links them most, with "it" as the query
    expect(page.locator("#layer-select")).to_have_value(str(top["layer"]))
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", str(top["layer"]))
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", str(top["head"]))
    wait_idle(page)
    z = focus_z(page)
    assert z[it][animal] == pytest.approx(top["weight"], abs=1e-6)
    expect(page.get_by_test_id("retrieval-diagram")).to_have_attribute("data-query", str(it))
    assert f"pair={it}-{animal}" in page.url

    # pressing a key in the retrieval diagram ranks the heads for that pair instead
    street = tokens.index("street")
    page.locator(f"#retrieval g.rd-key[data-key='{street}']").click()
    expect(page.locator("#pair-key")).to_have_value(str(street))
    expect(page.get_by_test_id("top-heads")).to_have_count(1)
    page.wait_for_function(
        f"() => document.querySelector('[data-testid=top-heads]') && "
        f"document.querySelector('.th-status').textContent.includes('key {street}')"
    )
    # and a head in the list opens it
    second = page.get_by_test_id("top-heads").locator("button").nth(1)
    layer, head = second.get_attribute("data-layer"), second.get_attribute("data-head")
    second.click()
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", layer or "")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", head or "")


def test_the_pair_pickers_hold_every_position_once_reached_for(open_trained: Open) -> None:
    """A position picker of top heads holds "choose…" and its position until it is focused or pressed, then every
    position, its choice kept; the keyboard and a press then choose among them all."""
    page = open_trained("")
    choose_example(page, MINILM_EXAMPLE)
    expect(page.get_by_test_id("top-heads").locator("button")).to_have_count(10)
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    it, animal = tokens.index("it"), tokens.index("animal")
    options = "(s) => document.querySelector(s).options.length"
    expect(page.locator("#pair-query")).to_have_value(str(it))
    assert page.evaluate(options, "#pair-query") == 2  # "choose…" and the position chosen, nothing else drawn
    page.locator("#pair-query").focus()
    assert page.evaluate(options, "#pair-query") == len(tokens) + 1
    expect(page.locator("#pair-query")).to_have_value(str(it))
    page.keyboard.press("ArrowUp")  # the position before it, among all of them
    expect(page).to_have_url(re.compile(rf"pair={it - 1}-{animal}"))
    expect(page.locator("#pair-query")).to_have_value(str(it - 1))
    # the key's picker, drawn again with the new pair's ranking, fills on a press as on a focus (pressed once that
    # ranking is in: the view's next draw makes new pickers)
    page.wait_for_function(
        "(q) => { const t = document.querySelector('.th-status').textContent;"
        " return t.includes(`query ${q} `) && t.includes('highest first'); }",
        arg=it - 1,
    )
    page.locator("#pair-key").dispatch_event("pointerdown")
    assert page.evaluate(options, "#pair-key") == len(tokens) + 1
    page.locator("#pair-key").select_option(str(animal + 1))
    expect(page).to_have_url(re.compile(rf"pair={it - 1}-{animal + 1}"))


def test_induction_example_repeats_words_from_the_vocabulary(
    open_trained: Open, models: dict[str, dict[str, Any]]
) -> None:
    page = open_trained("")
    choose_example(page, INDUCTION_EXAMPLE)
    expect(page.get_by_test_id("model-select")).to_have_value("induction")
    expect(page.locator("[data-workspace=inside]")).to_be_visible()  # opened at its answer, the head-types table
    open_workspace(page, "explore")  # the tokens
    expect(page.get_by_test_id("token")).to_have_count(24)
    tokens = page.get_by_test_id("token").locator(".text").all_text_contents()
    vocab = set(models["induction"]["vocab"])
    assert set(tokens) <= vocab
    assert tokens[:12] == tokens[12:] and len(set(tokens[:12])) == 12
    expect(page.get_by_test_id("mask-causal")).to_be_checked()
    # sorted by induction, with a layer-1 head on top, and the pair's top heads listed
    open_workspace(page, "inside")
    expect(page.get_by_test_id("head-type-row")).to_have_count(8)
    assert rows(page)[0][0] == 1
    open_workspace(page, "explore")
    expect(page.get_by_test_id("top-heads").locator("button")).to_have_count(8)
    assert page.get_by_test_id("top-heads").locator("button").first.get_attribute("data-layer") == "1"
    # the same example twice gives the same words, so a link reproduces it
    link = page.url
    choose_example(page, INDUCTION_EXAMPLE)
    wait_idle(page)
    open_workspace(page, "explore")
    assert page.get_by_test_id("token").locator(".text").all_text_contents() == tokens
    assert "t=" + "+".join(tokens) in link


def test_all_layers_over_the_result_limit_fall_back_to_one_layer(open_trained: Open, page_log: PageLog) -> None:
    words = "+".join(["the", "cat", "sat", "on", "a", "warm", "mat"] * 26)  # 182 wordpieces x 72 heads: too many
    page = open_trained(f"?m=minilm&t={words}&layer=all")
    notice = page.locator("#heads-notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("more than the server sends in one response")
    expect(notice).to_contain_text("layer 0")
    expect(page.get_by_test_id("error-banner")).to_be_hidden()
    expect(page.locator("#layer-select")).to_have_value("0")
    expect(page.get_by_test_id("head-heatmap")).to_have_count(12)
    assert page_log.attention_requests()[-1]["layer"] == 0
    assert page_log.page_errors == []


def test_a_bare_link_opens_with_the_models_default_masks(open_trained: Open, page_log: PageLog) -> None:
    page = open_trained("?m=induction&t=dog+cat+dog+cat")
    expect(page.get_by_test_id("mask-causal")).to_be_checked()
    assert page_log.attention_requests()[-1]["masks"]["causal"] is True
    # a link that turns causal off says so, and keeps it off
    page = open_trained("?m=induction&t=dog+cat+dog+cat&causal=0")
    expect(page.get_by_test_id("mask-causal")).not_to_be_checked()
    assert page_log.attention_requests()[-1]["masks"]["causal"] is False


def test_the_head_types_probe_is_chosen_on_the_page_and_each_length_is_shown(open_trained: Open) -> None:
    page = open_trained("?m=induction&t=dog+cat+dog+cat")
    open_workspace(page, "inside")
    l1h3 = page.locator("[data-testid=head-type-row][data-layer='1'][data-head='3'] td[data-col=induction]")
    expect(l1h3).to_have_attribute("title", re.compile(r"^by segment length: 17 0\.\d{3} · 24 0\.\d{3} · 31 0\.\d{3}"))
    by_length = json.loads(l1h3.get_attribute("data-by-length") or "{}")
    assert float(l1h3.get_attribute("data-value") or 0) == min(by_length.values())
    expect(page.locator("#headtypes-measured")).to_contain_text("3 probes, one per segment length L (17, 24, 31)")
    best = page.locator("#headtypes-best button[data-best=induction]")
    expect(best).to_contain_text(f"L1 H3 · {min(by_length.values()):.3f}")  # the best by the lowest
    # one length and another seed: the request carries them, and the table shows that probe's scores
    page.get_by_test_id("ht-seed").fill("4")
    with page.expect_response(lambda r: r.url.endswith("/api/heads") and r.request.method == "POST") as resp:
        page.get_by_test_id("ht-seed").press("Enter")
    assert resp.value.request.post_data_json["probe"] == {"seed": 4}
    page.get_by_test_id("ht-lengths").fill("20")
    with page.expect_response(lambda r: r.url.endswith("/api/heads") and r.request.method == "POST") as resp:
        page.get_by_test_id("ht-lengths").press("Enter")
    assert resp.value.request.post_data_json["probe"] == {"segment_lengths": [20], "seed": 4}
    body = resp.value.json()
    assert body["probe"] == {"segment_lengths": [20], "repeats": 2, "seed": 4}
    got = next(r for r in body["heads"] if (r["layer"], r["head"]) == (1, 3))
    assert got["induction"] != min(by_length.values())
    expect(l1h3.locator(".ht-val")).to_have_text(f"{got['induction']:.3f}")
    expect(l1h3).to_have_attribute("title", f"segment length 20 {got['induction']:.3f}")
    assert "hlens=20" in page.url and "hseed=4" in page.url
    page.reload()
    expect(page.get_by_test_id("ht-lengths")).to_have_value("20")
    expect(l1h3.locator(".ht-val")).to_have_text(f"{got['induction']:.3f}")
