"""The flash / blockwise lesson and the cost panel's dense-against-blockwise points, against a real `attnlab serve`:
the lesson takes the open head's row through the online softmax a block at a time and ends on the server's dense
weights; the cost panel draws both passes' measured peaks at several lengths on the predicted S^2 line. Every number
is compared with the API's own answer."""

from __future__ import annotations

import math
from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, open_workspace

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat&causal=1"


def online(scores: list[float], block: int) -> list[tuple[float, float]]:
    """(m, l) after each block of the online softmax, in Python: the running maximum and the rescaled sum."""
    m, total, out = -math.inf, 0.0, []
    for k0 in range(0, len(scores), block):
        part = scores[k0 : k0 + block]
        new = max(m, *part)
        total = total * (math.exp(m - new) if m > -math.inf else 0.0) + sum(math.exp(s - new) for s in part)
        m = new
        out.append((m, total))
    return out


def weights_of(page: Page, testid: str) -> list[float]:
    return page.get_by_test_id(testid).evaluate("e => JSON.parse(e.dataset.weights)")  # type: ignore[no-any-return]


def test_the_lesson_steps_through_the_blocks_to_the_dense_weights(
    open_page: Callable[..., Page], live_server: str, page_log: PageLog
) -> None:
    page = open_page(RANDOM)
    open_workspace(page, "mechanics")
    lesson = page.get_by_test_id("blockwise-lesson")
    lesson.scroll_into_view_if_needed()
    expect(page.get_by_test_id("blockwise-next")).to_be_visible()
    body = {k: v for k, v in page_log.attention_requests()[-1].items() if k != "precision"}
    api = httpx.post(f"{live_server}/api/attention", json=body, timeout=30).json()
    layer, head, query = (int(lesson.get_attribute(f"data-{k}") or -1) for k in ("layer", "head", "query"))
    assert (layer, head, query) == (0, 0, 5)  # the random model's first head, the last query
    h = api["layers"][layer]["heads"][head]
    scores, dense = h["scores"][query], h["weights"][query]
    assert len(scores) == 6 and all(api["eligible"][query])  # the last row of a causal mask sees every key

    # B = 2: the row, three blocks, the weights
    assert lesson.get_attribute("data-steps") == "4" and lesson.get_attribute("data-step") == "0"
    expect(page.get_by_test_id("blockwise-prev")).to_be_disabled()
    want = online(scores, 2)
    for step in range(1, 4):
        page.get_by_test_id("blockwise-next").click()
        rows = page.locator("#blockwise-steps tr[data-m]")
        expect(rows).to_have_count(step)
        m, total = rows.nth(step - 1).evaluate("e => [+e.dataset.m, +e.dataset.l]")
        assert m == pytest.approx(want[step - 1][0], abs=1e-6) and total == pytest.approx(want[step - 1][1], rel=1e-6)
    rescale = float(page.locator("#blockwise-steps tr[data-m]").nth(1).get_attribute("data-rescale") or "nan")
    assert rescale == pytest.approx(math.exp(want[0][0] - want[1][0]), rel=1e-6)
    page.get_by_test_id("blockwise-next").click()
    assert lesson.get_attribute("data-step") == "4"
    expect(page.get_by_test_id("blockwise-next")).to_be_disabled()
    shown_dense, shown_online = weights_of(page, "blockwise-dense"), weights_of(page, "blockwise-online")
    assert shown_dense == pytest.approx(dense, abs=1e-7)  # the server's dense weights, as the server sent them
    assert shown_online == pytest.approx(dense, abs=1e-6)  # the blocks end on the same weights
    assert float(lesson.get_attribute("data-max-diff") or 1) < 1e-6
    expect(page.locator("#blockwise-diff")).to_contain_text("the same weights")

    # another B starts again from the row: 4 keys a block is two blocks
    page.get_by_test_id("blockwise-block").fill("4")
    page.get_by_test_id("blockwise-block").press("Enter")
    expect(lesson).to_have_attribute("data-steps", "3")
    assert lesson.get_attribute("data-step") == "0"
    page.get_by_test_id("blockwise-next").click()
    page.get_by_test_id("blockwise-prev").click()
    assert lesson.get_attribute("data-step") == "0"
    assert page_log.page_errors == []


# where a plotly figure's parts lie, top to bottom, in px: the x tick labels' lowest edge, the x-axis title's top and
# bottom, the legend's top and bottom
PLOT_PARTS = """(id) => {
  const el = document.getElementById(id), box = (e) => e.getBoundingClientRect();
  const ticks = [...el.querySelectorAll('.xtick text')].filter((t) => t.textContent).map((t) => box(t).bottom);
  const title = box(el.querySelector('.g-xtitle text')), legend = box(el.querySelector('.legend'));
  return {ticks: Math.max(...ticks), title: [title.top, title.bottom], legend: [legend.top, legend.bottom]};
}"""


def test_the_cost_panel_draws_both_passes_at_several_lengths(
    open_page: Callable[..., Page], live_server: str, page_log: PageLog
) -> None:
    page = open_page(RANDOM)
    open_workspace(page, "mechanics")
    box = page.get_by_test_id("cost-lengths")
    box.scroll_into_view_if_needed()
    expect(box).to_have_value("256, 512, 1024, 2048, 4096")  # the default, inside this server's limits
    out = page.get_by_test_id("cost-lengths-out")

    # unreadable lengths are said at the box and not sent
    box.fill("128, many")
    page.get_by_test_id("cost-lengths-measure").click()
    expect(page.locator("#cost-lengths-error")).to_contain_text("got “128, many”")
    expect(box).to_have_attribute("aria-invalid", "true")

    box.fill("128, 256, 512, 1024")
    with page.expect_response("**/api/cost") as resp:
        page.get_by_test_id("cost-lengths-measure").click()
    assert resp.value.status == 200, resp.value.text()
    sent = resp.value.request.post_data_json
    assert sent["measure_lengths"] == [128, 256, 512, 1024] and sent["heads"] == 4 and sent["measure"] is False
    points = resp.value.json()["lengths"]["points"]
    expect(out).to_have_attribute("data-points", "4")
    expect(page.locator("#cost-lengths-error")).to_be_hidden()
    shown = out.locator("tr[data-seq-len]").evaluate_all(
        "els => els.map(e => [+e.dataset.seqLen, +e.dataset.dense, +e.dataset.blockwise, +e.dataset.diff])"
    )
    assert shown == [
        [p["seq_len"], p["dense_peak_bytes"], p["blockwise_peak_bytes"], p["max_abs_diff"]] for p in points
    ]
    assert all(p["max_abs_diff"] < 1e-5 for p in points)

    # the plot: the predicted S^2 line and both passes' measured peaks at every length, over the panel's curves
    page.wait_for_function("() => document.getElementById('cost-plot').dataset.measuredLengths === '4'")
    plot = page.evaluate(
        "() => document.getElementById('cost-plot').data.map(t => ({name: t.name, x: t.x, y: t.y, mode: t.mode}))"
    )
    by_name = {t["name"]: t for t in plot}
    xs = [128, 256, 512, 1024]
    assert by_name["predicted: one layer's scores, H·S²·bytes"]["y"] == [p["predicted_score_bytes"] for p in points]
    assert by_name["measured peak, dense"]["x"] == xs and by_name["measured peak, blockwise"]["x"] == xs
    assert by_name["measured peak, dense"]["y"] == [p["dense_peak_bytes"] for p in points]
    assert by_name["measured peak, blockwise"]["y"] == [p["blockwise_peak_bytes"] for p in points]
    assert by_name["measured peak, dense"]["mode"] == "markers" and len(plot) == 6
    # its six legend entries wrap into rows under the axis title, which stays under the tick labels, wide or narrow
    for width in (1280, 700, 520):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_function(
            "(w) => Math.abs(document.querySelector('#cost-plot .main-svg').getBoundingClientRect().width "
            "- document.getElementById('cost-plot').getBoundingClientRect().width) < 2 && innerWidth === w",
            arg=width,
        )
        boxes = page.evaluate(PLOT_PARTS, "cost-plot")
        assert boxes["ticks"] < boxes["title"][0] < boxes["title"][1] <= boxes["legend"][0] + 1, (width, boxes)

    # a length past the server's limit: its refusal, in its words, naming the field
    box.fill("200000")
    with page.expect_response("**/api/cost") as resp:
        page.get_by_test_id("cost-lengths-measure").click()
    assert resp.value.status == 422
    error = resp.value.json()["error"]
    assert error["field"] == "measure_lengths"
    expect(out).to_have_text(error["message"])
    page.wait_for_function("() => document.getElementById('cost-plot').dataset.measuredLengths === '0'")
    assert page_log.page_errors == []
