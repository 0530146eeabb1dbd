"""A head with a learned sink (gpt_oss) on the page: each card draws the sink weight per query as one column right
of the keys, in the colours of the answer's numbers, says its mean in the caption and what it leaves the keys on
hover; a head without a sink (textbook's) draws no such column."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import open_workspace, wait_idle

pytestmark = pytest.mark.browser

# each sink cell's centre pixel on the card's canvas, and the colour the page's weights scale (default palette)
# gives each weight of the answer
SINK_CELLS_JS = """async ([id, weights]) => {
  const { colorAt, normalise, scaleFor } = await import('/static/js/colors.js');
  const fig = document.getElementById(id);
  const canvas = fig.querySelector('canvas');
  const L = JSON.parse(fig.dataset.layout);
  const r = canvas.width / canvas.getBoundingClientRect().width;
  const ctx = canvas.getContext('2d');
  const scale = scaleFor('weights', 'viridis', 0);
  return weights.map((w, q) => {
    const x = Math.floor((L.sinkX + L.cell / 2) * r);
    const y = Math.floor((L.top + q * L.cell + L.cell / 2) * r);
    const got = Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3));
    return [got, colorAt(scale.stops, normalise(w, scale)).map(Math.round)];
  });
}"""


# the large head's sink as plotly has it: the values drawn, the sink trace's x and the x of the "sink" tick
FOCUS_SINK_JS = """() => {
  const el = document.getElementById('focus-plot');
  const trace = el.data.find((t) => t.type === 'image' && t.z);
  const ax = el.layout.xaxis;
  const at = ax.ticktext.indexOf('sink');
  return {
    layer: el.dataset.layer, head: el.dataset.head, sink: el.drawn.sink ? Array.from(el.drawn.sink) : null,
    x0: trace ? trace.x0 : null, sinkTick: at >= 0 ? ax.tickvals[at] : null,
  };
}"""


def head_of(answer: dict[str, Any], layer: int, head: int) -> dict[str, Any]:
    shown = next(x for x in answer["layers"] if x["index"] == layer)
    return next(h for h in shown["heads"] if h["index"] == head)


def test_a_sink_head_draws_its_sink_column_and_a_textbook_head_none(page: Page, checkpoint_server: str) -> None:
    models = {m["name"]: m for m in httpx.get(f"{checkpoint_server}/api/models").json()["models"]}
    assert models["oss"]["sinks"] is True
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        page.goto(f"{checkpoint_server}/?m=oss")
    wait_idle(page)
    body: dict[str, Any] = sent.value.post_data_json or {}
    assert body.get("model") == "oss"
    # the page streams its answer a layer first; the same request as one JSON answer
    answer = httpx.post(f"{checkpoint_server}/api/attention", json={**body, "first_layer": None}).json()
    card = page.get_by_test_id("head-heatmap").first
    layer, index = int(card.get_attribute("data-layer") or ""), int(card.get_attribute("data-head") or "")
    head = head_of(answer, layer, index)
    sink = head["sink"]
    assert len(sink) == len(answer["tokens"]) and 0 < max(sink) < 1
    # the column holds the answer's numbers (float32 on the way), each cell in the scale's colour for its weight
    drawn = [float(v) for v in (card.get_attribute("data-sink") or "").split(",")]
    assert drawn == pytest.approx(sink, abs=1e-6)
    cells = page.evaluate(SINK_CELLS_JS, [card.get_attribute("id"), sink])
    for got, colour in cells:
        assert max(abs(a - b) for a, b in zip(got, colour, strict=True)) <= 2, (got, colour)
    expect(card.locator("figcaption .meta")).to_contain_text(f"learned sink w̄ {head['stats']['mean_sink_weight']:.2f}")
    # hovering query 1's sink cell says the weight and what the keys share
    layout = json.loads(card.get_attribute("data-layout") or "")
    box = card.locator("canvas").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + layout["sinkX"] + layout["cell"] / 2, box["y"] + layout["top"] + layout["cell"] * 1.5)
    w = sink[1]
    expect(page.locator("#tooltip")).to_contain_text(
        f"→ the head's sink: {w:.4f} (no value; the row's weights over the keys sum to 1 - {w:.4f} = {1 - w:.4f})"
    )
    # the stats table ends with each head's mean sink weight
    open_workspace(page, "inside")
    stats = page.locator("#stats")
    expect(stats.locator("thead th").last).to_have_text("Mean sink weight")
    label = page.locator("th", has_text=re.compile(rf"^(L{layer} )?H{index}$"))
    row = stats.locator("tbody tr").filter(has=label).first
    expect(row.locator("td").last).to_have_text(f"{head['stats']['mean_sink_weight']:.3f}")
    open_workspace(page, "explore")
    # the large head: the same column, half a cell right of the keys, ticked "sink"
    page.wait_for_selector("#focus-plot[data-ticks]:not([data-ticks=''])", state="attached")
    large = page.evaluate(FOCUS_SINK_JS)
    focused = head_of(answer, int(large["layer"]), int(large["head"]))
    assert large["sink"] == pytest.approx(focused["sink"], abs=1e-6)
    assert large["x0"] == len(answer["tokens"]) + 0.5 and large["sinkTick"] == len(answer["tokens"]) + 0.5
    # textbook's heads have no sink: no column, the layout of a plain map
    with page.expect_response(lambda r: r.url.endswith("/api/attention")):
        page.get_by_test_id("model-select").select_option("textbook")
    wait_idle(page)
    cards = page.get_by_test_id("head-heatmap")
    page.wait_for_selector("#focus-plot[data-ticks]:not([data-ticks=''])", state="attached")
    plain = page.evaluate(FOCUS_SINK_JS)
    assert (plain["sink"], plain["x0"], plain["sinkTick"]) == (None, None, None)
    open_workspace(page, "inside")
    expect(page.locator("#stats thead th").last).to_have_text("Health")
    for i in range(cards.count()):
        assert cards.nth(i).get_attribute("data-sink") is None
        assert "sinkX" not in json.loads(cards.nth(i).get_attribute("data-layout") or "")
