"""The page offers what GET /api/models says each model reads and can do: a model's capabilities, reads, options
and defaults changed in the served list change the controls, with no model name written into the page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"


def served_as(page: Page, change: Callable[[dict[str, Any]], None]) -> None:
    """Serve /api/models to the page as the server answers it, with `change` applied to each entry."""

    def handle(route: Route) -> None:
        response = route.fetch()
        body = response.json()
        for entry in body["models"]:
            change(entry)
        route.fulfill(response=response, body=json.dumps(body))

    page.route("**/api/models", handle)


def flip(name: str, **capabilities: bool) -> Callable[[dict[str, Any]], None]:
    def change(entry: dict[str, Any]) -> None:
        if entry["name"] == name:
            entry["capabilities"] = {**entry["capabilities"], **capabilities}

    return change


def test_the_batch_and_source_boxes_follow_the_served_capabilities(open_page: Callable[..., Page], page: Page) -> None:
    open_page(RANDOM)
    batch, source = page.get_by_test_id("batch-input"), page.get_by_test_id("source-input")
    expect(batch).to_have_attribute("aria-disabled", "false")
    expect(source).to_have_attribute("aria-disabled", "false")

    served_as(page, flip("random", batches=False, cross_attention=False))
    open_page(RANDOM)
    expect(batch).to_have_attribute("aria-disabled", "true")
    expect(source).to_have_attribute("aria-disabled", "true")
    # the message names the models whose entries say they can, from the served list: none batches here
    expect(page.locator("#batch-help")).to_have_text("A batch runs on no model.")
    expect(page.locator("#source-help")).to_contain_text("on textbook here")
    # and a batch typed in anyway goes out as one sequence
    page.locator("#more-inputs summary").click()
    batch.fill("a b\nc d e", force=True)  # aria-disabled: the box still takes text
    with page.expect_request("**/api/attention") as sent:
        page.get_by_test_id("run-button").click()
    body = sent.value.post_data_json or {}
    assert "texts" not in body and body["text"] == "the cat sat on the mat"


def test_a_model_that_batches_is_offered_a_batch(open_page: Callable[..., Page], page: Page) -> None:
    served_as(page, flip("textbook", batches=True))
    open_page("?m=textbook")
    expect(page.get_by_test_id("batch-input")).to_have_attribute("aria-disabled", "false")
    expect(page.locator("#batch-help")).not_to_contain_text("A batch runs on")


def test_the_option_fields_and_number_editors_follow_reads_and_defaults(
    open_page: Callable[..., Page], page: Page
) -> None:
    open_page(RANDOM + "&heads=2")
    expect(page.locator("#random-options")).to_be_visible()
    expect(page.locator("#opt-heads")).to_have_value("2")
    open_page("?m=textbook")
    expect(page.locator("#textbook-matrices")).to_be_visible()

    def no_options_no_numbers(entry: dict[str, Any]) -> None:
        entry["reads"] = [f for f in entry["reads"] if f != "options"]
        entry["defaults"] = {}

    served_as(page, no_options_no_numbers)
    open_page(RANDOM + "&heads=2")
    expect(page.locator("#random-options")).to_be_hidden()
    with page.expect_request("**/api/attention") as sent:
        page.get_by_test_id("run-button").click()
    assert "options" not in (sent.value.post_data_json or {})  # a model that reads no options is sent none
    open_page("?m=textbook")
    expect(page.locator("#textbook-matrices")).to_be_hidden()
