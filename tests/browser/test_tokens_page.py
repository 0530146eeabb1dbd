"""Tokens people can read on the page (static/js/piece.js): a checkpoint's byte-level pieces as text, a leading space
and newlines as marks, a character split over pieces whole, right-to-left pieces isolated and in position order,
special tokens marked, in the chips and in the large head's axis labels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import wait_idle

pytestmark = pytest.mark.browser

TEXT = "The key 你好 opens\nשלום עולם done"


def test_a_checkpoints_tokens_read_as_text(
    page: Page, checkpoint_server: str, run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    answer = httpx.post(f"{checkpoint_server}/api/attention", json={"model": "mine", "text": TEXT}).json()
    labels = answer["tokens"]
    assert labels[0] == "<s>" and answer["config"]["special"][0] is True
    page.goto(f"{checkpoint_server}/?m=mine")
    wait_idle(page)
    page.get_by_test_id("sequence-input").fill(TEXT)  # typed: spaces, a newline, CJK and Hebrew
    body = run_and_wait(lambda: page.get_by_test_id("run-button").click())
    assert body["text"] == TEXT
    chips = page.get_by_test_id("token")
    expect(chips).to_have_count(len(labels))
    shown = chips.locator(".text").all_text_contents()
    joined = "".join(shown)
    assert "Ġ" not in joined and "Ċ" not in joined and "\ufffd" not in joined
    assert "你" in shown and "好" in shown and "↵" in shown
    assert "␣key" in shown  # the leading space as a mark
    marks = chips.nth(labels.index(" key")).locator(".piece-mark")
    expect(marks).to_have_text("␣")
    colours = chips.nth(labels.index(" key")).evaluate(
        "(b) => [b.querySelector('.piece-mark'), b.querySelector('.piece')].map((e) => getComputedStyle(e).color)"
    )
    assert colours[0] != colours[1]  # the mark is dim: another colour than the text
    # the special token is marked, in its style and its title
    first = chips.nth(0)
    expect(first).to_have_class("token special")
    expect(first).to_have_attribute("title", '"<s>" · special token\nClick to mark position 0 as padding')
    # each chip's text is isolated with its own direction; the chips stay in position order, Hebrew included
    isolation = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid=token] .piece')].map((p) =>
          [getComputedStyle(p).unicodeBidi, p.getAttribute('dir')])"""
    )
    assert set(map(tuple, isolation)) == {("isolate", "auto")}
    boxes = [chips.nth(i).bounding_box() for i in range(len(labels))]
    assert all(b is not None for b in boxes)
    for i in range(1, len(boxes)):
        a, b = boxes[i - 1], boxes[i]
        assert a is not None and b is not None
        assert b["x"] > a["x"] or b["y"] > a["y"] + a["height"] / 2, (i, labels[i - 1], labels[i])
    hebrew = next(i for i, t in enumerate(labels) if t == "ש")
    assert shown[hebrew] == "ש"
    # the large head's axis labels: the same text form, isolated, no raw byte pieces
    page.locator("#focus-plot .xtick text").first.wait_for()
    ticks = page.locator("#focus-plot .ytick text").all_text_contents()
    assert ticks[0] == "<s> 0"
    assert not any("Ġ" in t or "\ufffd" in t for t in ticks)
    rtl = [t for t in ticks if any("\u0590" <= ch <= "\u05ff" for ch in t)]
    assert rtl and all(t.startswith("\u2068") and "\u2069 " in t for t in rtl)
