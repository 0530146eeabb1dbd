"""The decode panel generates tokens after the text (POST /api/decode `generate`): greedy or sampled from a seed,
each new token shown with its attention row by the panel's own step view, from the keyboard, kept in the link."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Response, expect

from tests.browser.conftest import PageLog, open_workspace

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]
PROMPT = "red+ball+king+river+frog+clock+red+ball"


def data(page: Page, testid: str) -> dict[str, str]:
    return page.get_by_test_id(testid).evaluate("e => ({...e.dataset})")  # type: ignore[no-any-return]


def generating(resp: Response) -> bool:
    """The answer to a decode request that generates: the panel also asks /api/decode without `generate` when it
    opens (the step view's own run), and that answer may come after the press."""
    return resp.url.endswith("/api/decode") and "generate" in json.loads(resp.request.post_data or "{}")


def submit(page: Page, press: Callable[[], None]) -> tuple[dict[str, Any], dict[str, Any]]:
    with page.expect_response(generating) as resp:
        press()
    assert resp.value.status == 200, resp.value.text()
    return resp.value.request.post_data_json, resp.value.json()


def test_generating_from_the_keyboard_shows_each_new_tokens_row(
    open_trained: Open, trained_server: str, page_log: PageLog
) -> None:
    page = open_trained(f"?m=induction&t={PROMPT}&layer=1&focus=1.2&dec=last")
    form = page.get_by_test_id("decode-generate")
    expect(form).to_be_visible()  # induction predicts tokens
    tokens = page.get_by_test_id("gen-tokens")
    tokens.fill("4")
    body, api = submit(page, lambda: tokens.press("Enter"))
    assert body["generate"] == {"tokens": 4, "sampling": "greedy"}
    generated = [g["token"] for g in api["generated"]]
    assert generated == ["king", "river", "frog", "clock"]  # the induction head carries the repeat on
    chips = page.get_by_test_id("decode-generated").locator("button")
    expect(chips).to_have_text([f"{g['position']}{g['token']}" for g in api["generated"]])
    # the newest token is shown: its row over every position so far, for the head the page has open
    step = page.get_by_test_id("decode-step")
    expect(step).to_have_attribute("data-generated", "1")
    last = api["generated"][-1]
    d = data(page, "decode-step")
    assert (d["step"], d["token"]) == (str(last["position"]), "clock")
    assert json.loads(d["weights"]) == pytest.approx(last["weights"][1][2], abs=1e-6)
    expect(page.get_by_test_id("kv-cache")).to_have_attribute("data-length", str(last["position"] + 1))
    assert "gen=4" in page.url
    # a chip opens its token's step; the step controls reach the generated steps from the keyboard too
    chips.nth(1).click()
    expect(step).to_have_attribute("data-step", str(api["generated"][1]["position"]))
    page.locator("#decode-slider").focus()
    page.keyboard.press("ArrowRight")
    expect(step).to_have_attribute("data-step", str(api["generated"][2]["position"]))
    # sampled from a seed: the link says so and the same body gives the same tokens
    page.get_by_test_id("gen-sampling").select_option("sample")
    page.get_by_test_id("gen-seed").fill("7")
    body, api = submit(page, lambda: page.get_by_test_id("gen-seed").press("Enter"))
    assert body["generate"] == {"tokens": 4, "sampling": "sample", "seed": 7}
    assert "gen=4s7" in page.url
    again = httpx.post(f"{trained_server}/api/decode", json=body, timeout=60).json()
    assert [g["id"] for g in again["generated"]] == [g["id"] for g in api["generated"]]
    expect(chips).to_have_text([f"{g['position']}{g['token']}" for g in api["generated"]])
    # the link opens the same generation
    url = page.url
    with page.expect_response("**/api/decode") as resp:
        page.goto(url)
    assert resp.value.request.post_data_json["generate"] == body["generate"]
    expect(page.get_by_test_id("decode-generated").locator("button")).to_have_count(4)
    assert not page_log.page_errors and not page_log.console_errors


def test_generation_is_not_offered_for_an_encoder(open_trained: Open) -> None:
    page = open_trained("?m=minilm&t=the+cat+sat")
    open_workspace(page, "mechanics")  # shown, the decoding panel offers no generation
    expect(page.get_by_test_id("decode-run")).to_be_visible()
    expect(page.get_by_test_id("decode-generate")).to_be_hidden()
