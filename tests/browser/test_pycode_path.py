"""The path issue 23 ends on, on pycode, all on the page: corrupt one token, see which heads carry what it changed,
then check what the head that carries most attends to, and why (the QK terms of that score).

The text repeats a function, so the second "height" is predicted by induction. Corrupting the first "ight" (8)
into "idth" takes the cue away; scored by the logit difference "ight" minus "idth" at the second " he" (15), the
head grid of z patches then puts the card's induction head first (L4H7 recovers 0.27 of the difference on the
committed checkpoint, the rest spread over the other heads of layer 4), whose query at 15 attends to 8, the token
after the first " he", and whose score there comes most from the card's previous-token head (L3H7) on the key side.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from engine.models.pycode import DIRECTORY
from tests.browser.conftest import open_workspace, wait_idle
from tests.helpers import script_body
from wire.arrays import MEDIA_TYPE, read_arrays

pytestmark = pytest.mark.browser

TEXT = "def area(width, height):\n    return width * height\n\n\ndef area(width, height):\n    return width * height\n"
CORRUPT_AT, CORRUPT_TO = 8, "idth"  # the first "ight" of " he" "ight"
SCORED_AT = 15  # the second " he": the logit of "ight" (what induction predicts) minus "idth"
HEADS = json.loads((DIRECTORY / "attnlab.json").read_text())["heads"]
INDUCTION = tuple(int(i) for i in HEADS["induction"]["head"].split("."))  # (layer, head) as the card measured
PREVIOUS = "L{}H{}".format(*HEADS["previous_token"]["head"].split("."))


@pytest.fixture
def open_pycode(page: Page, typed_pycode_server: str) -> Callable[[str], Page]:
    def open_(query: str) -> Page:
        page.goto(f"{typed_pycode_server}/{query}")
        wait_idle(page)
        return page

    return open_


def test_corrupt_a_token_find_the_heads_that_carry_it_and_see_why_one_attends_where_it_does(
    open_pycode: Callable[[str], Page],
) -> None:
    page = open_pycode(f"?m=pycode&t={quote(TEXT)}")
    open_workspace(page, "test")  # activation patching
    # 1. corrupt one token, z grid: which heads carry the difference
    page.locator("#patch-position").select_option(str(CORRUPT_AT))
    page.get_by_test_id("patch-token").fill(CORRUPT_TO)
    page.locator("#patch-hook").select_option("z")
    page.get_by_test_id("patch-metric").select_option("logit_diff")
    page.get_by_test_id("patch-ld-position").select_option(str(SCORED_AT))
    page.get_by_test_id("patch-ld-correct").fill("ight")
    page.get_by_test_id("patch-ld-wrong").fill(CORRUPT_TO)
    with page.expect_response("**/api/patch") as resp:
        page.get_by_test_id("patch-run").click()
    assert resp.value.status == 200, resp.value.text()
    sent = resp.value.request.post_data_json
    assert sent["clean"]["tokens"][CORRUPT_AT] == "ight" and sent["corrupted"]["tokens"][CORRUPT_AT] == CORRUPT_TO
    assert sent["metric"] == {"kind": "logit_diff", "position": SCORED_AT, "correct": "ight", "wrong": CORRUPT_TO}
    grid = resp.value.json()
    recovered = np.array([[np.nan if v is None else v for v in row] for row in grid["recovered"]])
    best = np.unravel_index(np.nanargmax(recovered), recovered.shape)
    assert tuple(int(i) for i in best) == INDUCTION and recovered[INDUCTION] > 0.2  # the induction head carries most
    layer, index = INDUCTION
    plot = page.get_by_test_id("patch-grid")
    expect(plot).to_have_attribute("data-best", f"{layer}.{index}")
    # 2. open that cell: the clean, corrupted and patched maps of L3H3
    plot.focus()
    with page.expect_response("**/api/patch/run") as run:
        plot.press("Enter")
    assert run.value.status == 200, run.value.text()
    cell = page.get_by_test_id("patch-cell")
    expect(cell).to_have_attribute("data-cell", f"{layer}.{index}")
    expect(cell).to_have_attribute("data-head", str(index))
    expect(page.get_by_test_id("patch-map")).to_have_count(3)
    # 3. what the induction head attends to from the second " he", and why: the QK terms of that score
    with page.expect_request("**/api/attention") as att:
        page.goto(f"{page.url.split('?')[0]}?m=pycode&t={quote(TEXT)}&layer={layer}&focus={layer}.{index}&pair=15-8")
    wait_idle(page)
    sent = att.value.post_data_json
    assert sent["first_layer"] == layer  # the layer shown comes first
    # the page's answer, as a script reads it (the page's own came streamed, downloaded in its worker)
    got = page.request.post(att.value.url, data=script_body(sent), headers={"accept": MEDIA_TYPE})
    body = read_arrays(got.body())
    shown = next(one for one in body["layers"] if one["index"] == layer)
    head = next(h for h in shown["heads"] if h["index"] == index)
    row = np.asarray(head["weights"][15], dtype=np.float64)
    assert body["tokens"][15] == " he" and int(row.argmax()) == 8 and row[8] > 0.5  # induction: the token after " he"
    open_workspace(page, "inside")  # why this query matches this key
    with page.expect_response("**/api/qk-attribution") as qk:
        page.get_by_test_id("qk-explain").click()
    assert qk.value.status == 200, qk.value.text()
    terms = qk.value.json()
    assert (terms["layer"], terms["head"], terms["query"], terms["key"]) == (layer, index, 15, 8)
    assert abs(terms["total"] - terms["score"]) < 1e-3  # the terms add up to the score
    assert terms["terms"][0]["key_source"] == PREVIOUS  # the previous-token head wrote the key
    expect(page.locator("#qk-terms tr").nth(1)).to_contain_text(PREVIOUS)
    expect(page.locator("#qk-status")).to_contain_text(f"sum to {terms['total']:.2f}")


def test_hide_sinks_sets_a_rows_sum_and_the_row_sums_line_says_so_not_red(open_pycode: Callable[[str], Page]) -> None:
    # causal: the first query's only key is the first token, which Hide sinks (first) shows as 0
    page = open_pycode("?m=pycode&sinks=first")
    line = page.get_by_test_id("sums").locator(".sums-line").first
    expect(line).to_have_class("sums-line all-one")  # not red ("not-one")
    expect(line).to_have_attribute("data-expected", "1")
    rows = json.loads(page.get_by_test_id("sums").get_attribute("data-row-sums") or "[]")
    assert rows[0] == 0 and rows[1:] == pytest.approx([1] * (len(rows) - 1), abs=1e-3)
    said = f"{len(rows) - 1} of {len(rows)} rows sum to 1; 1 row has every key hidden by Hide sinks"
    expect(line).to_contain_text(said)
    expect(line).not_to_contain_text("largest |Σ − 1|")
    # not renormalised: every row that lost its first key sums to less than 1, as the option says, still not red
    page.goto(page.url + "&renorm=0")
    wait_idle(page)
    expect(line).to_have_attribute("data-expected", str(len(rows)))
    expect(line).to_have_class("sums-line all-one")
    n = len(rows) - 1
    expect(line).to_contain_text(f"0 of {len(rows)} rows sum to 1; 1 row has every key hidden by Hide sinks (Σ 0); ")
    expect(line).to_contain_text(f"{n} rows lost weight to the hidden keys, not renormalised (Σ < 1)")
