"""The page a person opens at /: it runs offline, draws one heatmap per head, and every toggle recomputes."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import PageLog, focus_z, masked_cells, open_workspace, wait_idle

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
Action = Callable[[Callable[[], None]], dict[str, Any]]
# What the page's store holds of a run: the runs wanted so far, the heads option and the words run.
STORE_JS = """async () => {
  const { pageState } = await import('/static/js/main.js');
  const s = pageState();
  return { want: s.run.want, heads: s.ui.options.heads, text: s.ui.text };
}"""


def upper_triangle(n: int) -> set[tuple[int, int]]:
    return {(q, k) for q in range(n) for k in range(n) if k > q}


def test_page_loads_offline_without_console_errors(open_page: Callable[..., Page], page_log: PageLog) -> None:
    page = open_page()
    expect(page.get_by_test_id("model-select")).to_have_value("textbook")
    options = page.get_by_test_id("model-select").locator("option").all_inner_texts()
    assert any(o.startswith("textbook") for o in options) and any(o.startswith("random") for o in options)
    expect(page.get_by_test_id("token")).to_have_count(5)
    expect(page.get_by_test_id("retrieval-diagram")).to_be_visible()
    expect(page.get_by_test_id("error-banner")).to_be_hidden()
    assert page.evaluate("typeof window.Plotly") == "object"
    assert "/vendor/plotly.min.js" in " ".join(page_log.requests)
    assert page_log.external() == []
    assert page_log.console_errors == []
    assert page_log.page_errors == []


def test_textbook_defaults_are_causal_with_position_5_padding(open_page: Callable[..., Page]) -> None:
    page = open_page()
    expect(page.get_by_test_id("mask-causal")).to_be_checked()
    expect(page.get_by_test_id("token").nth(4)).to_have_attribute("aria-pressed", "true")
    assert masked_cells(page) == upper_triangle(5) | {(q, 4) for q in range(5)}


def test_typing_a_sequence_and_running_draws_one_heatmap_per_head(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page()
    body = run_and_wait(lambda: page.get_by_test_id("model-select").select_option("random"))
    assert body["model"] == "random"
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    page.locator("#opt-heads").fill("8")
    body = run_and_wait(lambda: page.locator("#opt-heads").dispatch_event("change"))
    assert body["options"]["heads"] == 8
    page.get_by_test_id("sequence-input").fill("one two three four five six seven")
    body = run_and_wait(lambda: page.get_by_test_id("run-button").click())
    assert body["text"] == "one two three four five six seven"
    expect(page.get_by_test_id("head-heatmap")).to_have_count(8)
    expect(page.get_by_test_id("token")).to_have_text(["0one", "1two", "2three", "3four", "4five", "5six", "6seven"])
    assert page.locator("[data-testid=head-heatmap] canvas").count() == 8
    # the model in use chosen again (its change event fires all the same): no run wanted, the heads and words kept;
    # the store answers the change event before select_option returns
    before = page.evaluate(STORE_JS)
    page.get_by_test_id("model-select").select_option("random")
    assert page.evaluate(STORE_JS) == before == {"want": before["want"], "heads": 8, "text": body["text"]}


def test_causal_toggle_sends_a_causal_request_and_masks_the_upper_triangle(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page(RANDOM)
    n = 6
    expect(page.get_by_test_id("mask-causal")).not_to_be_checked()
    assert all(masked_cells(page, i) == set() for i in range(4))
    body = run_and_wait(lambda: page.get_by_test_id("mask-causal").check())
    assert body["masks"]["causal"] is True
    for i in range(4):
        assert masked_cells(page, i) == upper_triangle(n)
    # the large head's plotly z is null exactly on the masked cells: drawn as masked, not as a number
    z = focus_z(page)
    assert {(q, k) for q in range(n) for k in range(n) if z[q][k] is None} == upper_triangle(n)
    assert all(z[q][k] is not None for q in range(n) for k in range(q + 1))
    expect(page.locator("#change-summary")).to_contain_text("15 cells became masked")
    body = run_and_wait(lambda: page.get_by_test_id("mask-causal").uncheck())
    assert body["masks"]["causal"] is False
    assert masked_cells(page) == set()


def test_masked_cells_are_painted_as_hatch_not_scale_colours(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1")
    pixels = page.evaluate(
        """() => {
          const fig = document.querySelector('[data-testid=head-heatmap]');
          const ctx = fig.querySelector('canvas').getContext('2d');
          const r = window.devicePixelRatio || 1;
          const {left, top, cell} = JSON.parse(fig.dataset.layout);
          const cellPixels = (q, k) => {
            const side = (cell - 2) * r;
            const d = ctx.getImageData((left + k * cell + 1) * r, (top + q * cell + 1) * r, side, side);
            const out = [];
            for (let i = 0; i < d.data.length; i += 4) out.push([d.data[i], d.data[i + 1], d.data[i + 2]]);
            return out;
          };
          return {masked: cellPixels(0, 5), eligible: cellPixels(5, 0)};
        }"""
    )
    grey = [p for p in pixels["masked"] if max(p) - min(p) <= 2]
    assert len(grey) == len(pixels["masked"]), "a masked cell holds a non-grey pixel"
    shades = {p[0] for p in grey}
    assert 58 in shades and max(shades) > 150, shades  # the dark ground and the light hatch lines
    assert all(max(p) - min(p) > 20 for p in pixels["eligible"]), "an eligible cell is drawn grey"


def test_clicking_a_token_marks_it_padding_and_back(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page(RANDOM)
    token = page.get_by_test_id("token").nth(2)
    body = run_and_wait(lambda: token.click())
    assert body["masks"]["padded"] == [2] and "padding" not in body["masks"]
    token = page.get_by_test_id("token").nth(2)
    expect(token).to_have_attribute("aria-pressed", "true")
    expect(token).to_have_class(re.compile(r"\bpadded\b"))
    assert masked_cells(page) == {(q, 2) for q in range(6)}
    body = run_and_wait(lambda: page.get_by_test_id("token").nth(2).click())
    assert "padded" not in body["masks"]
    expect(page.get_by_test_id("token").nth(2)).to_have_attribute("aria-pressed", "false")
    assert masked_cells(page) == set()


def test_a_token_toggles_padding_from_the_keyboard(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page(RANDOM)
    page.get_by_test_id("token").nth(1).focus()
    body = run_and_wait(lambda: page.keyboard.press("Enter"))
    assert body["masks"]["padded"] == [1]
    focused = page.evaluate("document.activeElement.dataset.index")
    assert focused == "1"
    body = run_and_wait(lambda: page.keyboard.press("Space"))
    assert "padded" not in body["masks"]


def test_an_eligibility_cell_blocks_and_unblocks_that_pair(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page(RANDOM)
    cell = page.locator("#eligibility tbody tr").nth(3).locator("button").nth(1)
    body = run_and_wait(lambda: cell.click())
    assert body["masks"]["blocked"] == [[3, 1]]
    assert masked_cells(page) == {(3, 1)}
    expect(page.locator("#blocked-count")).to_have_text("1 cell blocked")
    body = run_and_wait(lambda: page.locator("#eligibility tbody tr").nth(3).locator("button").nth(1).click())
    assert body["masks"]["blocked"] == []


def test_window_scale_and_policy_reach_the_request(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page(RANDOM)
    body = run_and_wait(lambda: page.locator("#mask-window-on").check())
    assert body["masks"]["window"] == 3
    page.locator("#mask-window").fill("2")
    body = run_and_wait(lambda: page.locator("#mask-window").dispatch_event("change"))
    assert body["masks"]["window"] == 2
    assert masked_cells(page) == {(q, k) for q in range(6) for k in range(6) if abs(q - k) >= 2}
    body = run_and_wait(lambda: page.locator("#scale").uncheck())
    assert body["scale"] is False
    body = run_and_wait(lambda: page.locator("#all-masked").select_option("zero"))
    assert body["all_masked"] == "zero"


def test_a_permalink_restores_the_same_view(
    open_page: Callable[..., Page], run_and_wait: Action, page: Page, live_server: str
) -> None:
    open_page(RANDOM)
    run_and_wait(lambda: page.get_by_test_id("mask-causal").check())
    run_and_wait(lambda: page.get_by_test_id("token").nth(4).click())
    last = run_and_wait(lambda: page.locator("#eligibility tbody tr").nth(5).locator("button").nth(0).click())
    page.locator("input[name=view][value=scores]").check()
    page.locator("[data-testid=head-heatmap]").nth(2).click()
    page.locator("#retrieval g[data-query='3']").click()
    link = page.url
    before = {
        "masked": masked_cells(page),
        "views": page.locator("[data-testid=head-heatmap]").evaluate_all("els => els.map(e => e.dataset.view)"),
        "focus": page.locator("#focus-plot").get_attribute("data-head"),
        "query": page.get_by_test_id("retrieval-diagram").get_attribute("data-query"),
        "z": focus_z(page),
    }
    assert before["views"] == ["scores"] * 4 and before["focus"] == "2" and before["query"] == "3"

    # the link opened again (the same tab, a new document: nothing of the page above is left)
    bodies: list[dict[str, Any]] = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/api/attention") else None)
    page.goto(link)
    wait_idle(page)
    assert bodies[-1]["masks"] == last["masks"]
    assert bodies[-1]["text"] == "the cat sat on the mat"
    expect(page.get_by_test_id("mask-causal")).to_be_checked()
    expect(page.get_by_test_id("token").nth(4)).to_have_attribute("aria-pressed", "true")
    after = {
        "masked": masked_cells(page),
        "views": page.locator("[data-testid=head-heatmap]").evaluate_all("els => els.map(e => e.dataset.view)"),
        "focus": page.locator("#focus-plot").get_attribute("data-head"),
        "query": page.get_by_test_id("retrieval-diagram").get_attribute("data-query"),
        "z": focus_z(page),
    }
    assert after == before


@pytest.mark.parametrize(
    "mx", ['{"x":[],"w_q":[],"w_k":[],"w_v":[]}', '{"x":[[]],"w_q":[[1]],"w_k":[[1]],"w_v":[[1]]}']
)
def test_a_link_with_empty_matrices_opens_the_chapters_numbers(
    open_page: Callable[..., Page], page_log: PageLog, mx: str
) -> None:
    # a mangled link still opens a page: matrices with no rows (or an empty row) are ignored, not a blank page
    page = open_page(f"?m=textbook&mx={quote(mx)}")
    expect(page.get_by_test_id("token")).to_have_count(5)
    expect(page.get_by_test_id("head-heatmap")).to_have_count(1)
    expect(page.get_by_test_id("error-banner")).to_be_hidden()
    assert "mx=" not in page.url
    assert page_log.page_errors == []


def test_token_markup_is_shown_as_text_and_runs_nothing(
    open_page: Callable[..., Page], page_log: PageLog, run_and_wait: Action
) -> None:
    page = open_page(RANDOM)
    evil = (
        "<img src=x onerror=window.__pwned=1> <svg/onload=window.__pwned=2> "
        "<script>window.__pwned=3</script> <b>bold</b> &amp;"
    )
    page.get_by_test_id("sequence-input").fill(evil)
    drawn = page.evaluate("() => performance.getEntriesByName('attnlab:drawn').length")
    run_and_wait(lambda: page.get_by_test_id("run-button").click())
    # every view of the new result is painted: whatever markup could have run has had its chance
    page.wait_for_function(
        "(n) => performance.getEntriesByName('attnlab:drawn').length > n && document.readyState === 'complete'",
        arg=drawn,
    )
    texts = page.get_by_test_id("token").locator(".text").all_text_contents()
    assert " ".join(texts) == evil
    assert texts[3] == "<svg/onload=window.__pwned=2>"
    assert page.locator("#tokens img, #tokens svg, #tokens script, #tokens b").count() == 0
    assert page.locator("img").count() == 0
    assert page.locator("[onload], [onerror]").count() == 0
    assert page.locator("script:not([src]):not([type=importmap])").count() == 0  # the import map is data, not code
    # the tooltip, the retrieval diagram and the plotly axis all carry the token as text
    svg_text = page.get_by_test_id("retrieval-diagram").text_content() or ""
    assert "<svg/onload" in svg_text
    ticks = page.locator("#focus-plot .xtick text").all_text_contents()
    assert any(t.startswith("<svg/onload") for t in ticks), ticks
    assert any(t.startswith("<b>bold</b>") for t in ticks), ticks
    assert page.evaluate("window.__pwned") is None
    assert page_log.dialogs == []
    assert page_log.page_errors == []


def test_an_api_error_shows_the_banner_in_plain_words(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page(RANDOM)
    page.locator("#opt-heads").fill("7")
    run_and_wait(lambda: page.locator("#opt-heads").dispatch_event("change"))
    banner = page.get_by_test_id("error-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("width must divide by heads")
    expect(banner).to_have_attribute("role", "alert")
    expect(page.locator("#opt-heads")).to_have_value("7")  # kept, marked: the views are rolled back
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    page.locator("#opt-heads").fill("2")
    run_and_wait(lambda: page.locator("#opt-heads").dispatch_event("change"))
    expect(banner).to_be_hidden()


def test_a_row_with_no_eligible_key_explains_the_policy_and_rolls_back(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page()  # textbook: causal, so padding position 0 leaves query 0 with no key
    good = page.url
    run_and_wait(lambda: page.get_by_test_id("token").nth(0).click())
    banner = page.get_by_test_id("error-banner")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("no eligible key")
    expect(banner).to_contain_text("All-masked rows")
    # the failed toggle is undone: the chip, the link and the views are the last run that worked
    expect(page.get_by_test_id("token").nth(0)).to_have_attribute("aria-pressed", "false")
    assert page.url == good
    expect(page.locator("#change-summary")).to_have_text("")  # told once, where the person acted
    body = run_and_wait(lambda: page.locator("#all-masked").select_option("zero"))
    assert body["all_masked"] == "zero"
    expect(banner).to_be_hidden()
    body = run_and_wait(lambda: page.get_by_test_id("token").nth(0).click())
    assert body["masks"]["padded"] == [0, 4]
    open_workspace(page, "inside")  # the per-head stats
    expect(page.locator("#stats tbody td").nth(7)).to_have_text("0")


def test_hovering_a_cell_shows_query_key_score_and_weight(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    fig = page.locator("[data-testid=head-heatmap]").nth(1)
    layout = fig.get_attribute("data-layout")
    assert layout
    box = fig.locator("canvas").bounding_box()
    assert box
    g = json.loads(layout)
    # the token chips before any hover: a hover moves their "lit" class, it never draws them again
    page.evaluate("() => { window.chipsBeforeHover = [...document.querySelectorAll('[data-testid=token]')]; }")
    page.mouse.move(box["x"] + g["left"] + g["cell"] * 1.5, box["y"] + g["top"] + g["cell"] * 3.5)
    tip = page.locator("#tooltip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("head 1")
    expect(tip).to_contain_text("query 3 “on” → key 1 “cat”")
    expect(tip).to_contain_text("score")
    expect(tip).to_contain_text("weight")
    lit_js = "els => els.filter(e => e.classList.contains('lit')).map(e => e.dataset.index)"
    assert page.get_by_test_id("token").evaluate_all(lit_js) == ["1", "3"]
    # another cell, query 4 "the" -> key 2 "sat": the light moves to those two chips, the same elements as before
    page.mouse.move(box["x"] + g["left"] + g["cell"] * 2.5, box["y"] + g["top"] + g["cell"] * 4.5)
    expect(tip).to_contain_text("query 4 “the” → key 2 “sat”")
    expect(page.get_by_test_id("token").nth(4)).to_have_class(re.compile(r"\blit\b"))
    assert page.get_by_test_id("token").evaluate_all(lit_js) == ["2", "4"]
    kept = page.evaluate(
        """() => {
          const now = [...document.querySelectorAll('[data-testid=token]')];
          const before = window.chipsBeforeHover;
          return [before.length, now.length, before.filter((c, i) => c === now[i] && c.isConnected).length];
        }"""
    )
    assert kept == [6, 6, 6], kept  # [chips before, chips now, chips that are the very elements of before]


def test_hovering_a_token_lights_its_row_and_column_in_every_head(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    page.get_by_test_id("token").nth(2).hover()
    for i in range(4):
        expect(page.get_by_test_id("head-heatmap").nth(i)).to_have_attribute("data-highlight", "2,2")
    page.mouse.move(5, 5)
    for i in range(4):
        expect(page.get_by_test_id("head-heatmap").nth(i)).to_have_attribute("data-highlight", "")
    # a chip keeps the focus through a whole draw of the chips without scrolling the page to it: the page has
    # brought an answer further down into sight by then (a draw of the tokens waits for the paint while they are
    # out of sight, and used to pull the page back up to the focused chip)
    kept = page.evaluate(
        """async () => {
          const { pageState } = await import('/static/js/main.js');
          const tokens = await import('/static/js/tokens.js');
          const root = document.querySelector('[data-view="tokens"]');
          root.querySelector('[data-index="2"]').focus();
          window.scrollTo(0, document.documentElement.scrollHeight);
          const y = window.scrollY;
          const s = pageState();
          const before = [...root.querySelectorAll('[data-testid=token]')];
          tokens.render(root, { ...s, tokensOpen: !s.tokensOpen }, () => {}); // another chips list: a whole draw
          const now = [...root.querySelectorAll('[data-testid=token]')];
          const same = now.length === before.length && now.every((c, i) => c === before[i]);
          return { y, after: window.scrollY, focused: document.activeElement.dataset.index ?? null, same };
        }"""
    )
    assert kept["y"] > 0 and kept["after"] == kept["y"] and kept["focused"] == "2", kept
    # ... and the whole draw keeps the chips themselves (a click pressed on one before it still lands after it)
    assert kept["same"], kept


def test_clicking_a_head_opens_it_large(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    page.locator("[data-testid=head-heatmap]").nth(3).focus()
    page.keyboard.press("Enter")
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "3")
    expect(page.locator("#focus-title")).to_have_text("Head 3, large")
    expect(page.locator("[data-testid=head-heatmap]").nth(3)).to_have_attribute("aria-pressed", "true")
    assert "focus=0.3" in page.url


# Each pixel of the large head's image against the colour its value takes on the scale (MASK_FILL when masked).
IMAGE_PIXELS_JS = """async () => {
  const C = await import('/static/js/colors.js');
  const el = document.getElementById('focus-plot');
  const img = new Image();
  img.src = el.data[0].source;
  await img.decode();
  const canvas = Object.assign(document.createElement('canvas'), { width: img.width, height: img.height });
  const ctx = canvas.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const px = ctx.getImageData(0, 0, img.width, img.height).data;
  const { matrix, eligible, scale } = el.drawn;
  let worst = 0;
  const colours = new Set();
  for (let q = 0; q < matrix.length; q++) {
    for (let k = 0; k < matrix[q].length; k++) {
      const want = eligible[q][k] ? C.colorAt(scale.stops, C.normalise(matrix[q][k], scale)) : C.hexToRgb(C.MASK_FILL);
      const o = (q * img.width + k) * 4;
      for (let c = 0; c < 3; c++) worst = Math.max(worst, Math.abs(px[o + c] - want[c]));
      colours.add(`${px[o]},${px[o + 1]},${px[o + 2]}`);
    }
  }
  return { type: el.data[0].type, w: img.width, h: img.height, rows: matrix.length, worst, colours: colours.size };
}"""


def test_the_large_head_is_an_image_of_its_values_with_hover_and_click(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1")
    warnings: list[str] = []
    page.on("console", lambda m: warnings.append(m.text) if m.type in ("warning", "error", "trace") else None)
    for view in ("weights", "scores"):
        page.locator(f"input[name=view][value={view}]").check()
        expect(page.locator("[data-testid=head-heatmap]").first).to_have_attribute("data-view", view)
        wait_idle(page)
        got = page.evaluate(IMAGE_PIXELS_JS)
        # one pixel a cell, each the scale's colour of the drawn value (at most 1 off in a channel: rounding)
        assert (got["type"], got["w"], got["h"], got["rows"]) == ("image", 6, 6, 6), got
        assert got["worst"] <= 1 and got["colours"] > 6, got
    # the pointer over cell (query 4, key 2) shows that cell's numbers; over a masked cell, why it is masked
    page.locator("#focus-plot").scroll_into_view_if_needed()
    box = page.locator("#focus-plot .nsewdrag").first.bounding_box()
    assert box is not None
    cell = box["width"] / 6

    def at(q: int, k: int) -> tuple[float, float]:
        return box["x"] + (k + 0.5) * cell, box["y"] + (q + 0.5) * box["height"] / 6

    page.mouse.move(*at(4, 2))
    hover = page.locator("#focus-plot .hoverlayer .hovertext")
    expect(hover).to_contain_text("Query 4")
    expect(hover).to_contain_text("key 2")
    expect(hover).to_contain_text("eligible")
    page.mouse.move(*at(1, 4))
    expect(hover).to_contain_text("masked (causal)")
    assert warnings == [], warnings  # plotly's image hover would warn on every move (see focus.js)
    # a click blocks that cell and runs again (plotly clicks the cell it last hovered)
    page.mouse.move(*at(4, 2))
    expect(hover).to_contain_text("key 2")
    page.mouse.click(*at(4, 2))
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "0")
    expect(page).to_have_url(re.compile(r"block=4-2"))
    page.wait_for_function("() => !document.getElementById('focus-plot').drawn.eligible[4][2]")
    assert focus_z(page)[4][2] is None and got["rows"] == 6
    # a few tokens: each eligible cell carries its value as text
    page = open_page("?m=textbook&causal=1")
    z = focus_z(page)
    notes = page.evaluate("() => document.getElementById('focus-plot').layout.annotations.map(a => [a.y, a.x, a.text])")
    want = [[q, k, f"{v:.2f}"] for q, row in enumerate(z) for k, v in enumerate(row) if v is not None]
    assert sorted(notes) == sorted(want)
    assert len(notes) == 15


def test_retrieval_diagram_blocks_masked_keys_and_follows_arrow_keys(
    open_page: Callable[..., Page], run_and_wait: Action
) -> None:
    page = open_page(RANDOM + "&causal=1&query=2")
    svg = page.get_by_test_id("retrieval-diagram")
    expect(svg).to_have_attribute("data-query", "2")
    assert svg.locator(".rd-line").count() == 6
    assert svg.locator(".rd-line.rd-blocked").count() == 3
    widths = svg.locator(".rd-line:not(.rd-blocked)").evaluate_all(
        "els => els.map(e => +e.getAttribute('stroke-width'))"
    )
    assert len(widths) == 3 and all(w > 0 for w in widths)
    svg.focus()
    page.keyboard.press("ArrowDown")
    expect(svg).to_have_attribute("data-query", "3")
    assert svg.locator(".rd-line.rd-blocked").count() == 2


def test_scores_view_keeps_masked_cells_masked(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM + "&causal=1")
    page.locator("input[name=view][value=scores]").check()
    expect(page.locator("[data-testid=head-heatmap]").first).to_have_attribute("data-view", "scores")
    z = focus_z(page)
    assert all(z[q][k] is None for q, k in upper_triangle(6))
    assert all(abs(v) < 1e6 for row in z for v in row if v is not None)
    expect(page.locator("#legend")).to_contain_text("score")


def test_textbook_numbers_are_editable(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page()
    page.locator("#textbook-matrices summary").click()
    cell = page.get_by_label("W_Q row 1 column 1")
    cell.fill("2")
    body = run_and_wait(lambda: cell.dispatch_event("change"))
    assert body["weights"]["w_q"][0][0] == 2
    assert body["x"][0] == [1.0, 0.0, 0.2, 0.1]
    assert "mx=" in page.url


def test_export_downloads_png_and_json(open_page: Callable[..., Page]) -> None:
    page = open_page(RANDOM)
    with page.expect_download() as png:
        page.locator("#export-png").click()
    path = png.value.path()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with page.expect_download() as js:
        page.locator("#export-json").click()
    data = json.loads(js.value.path().read_text())
    assert data["response"]["tokens"] == ["the", "cat", "sat", "on", "the", "mat"]
    assert data["request"]["model"] == "random"
    assert "m=random" in data["link"]
    with page.expect_download() as npz:
        page.locator("#export-npz").click()
    with zipfile.ZipFile(npz.value.path()) as z:
        assert "layers.0.heads.3.weights.npy" in z.namelist()


def test_controls_are_reachable_by_keyboard_with_visible_focus(open_page: Callable[..., Page]) -> None:
    page = open_page()
    seen: list[str] = []
    for _ in range(60):
        page.keyboard.press("Tab")
        info = page.evaluate(
            """() => { const e = document.activeElement; const s = getComputedStyle(e);
                 return {id: e.id || e.dataset.testid || e.tagName,
                         outline: s.outlineStyle, width: s.outlineWidth}; }"""
        )
        seen.append(info["id"])
        if info["id"] in ("model-select", "mask-causal", "run-button", "token"):
            assert info["outline"] != "none" and info["width"] != "0px", info
    for wanted in ("model-select", "sequence-input", "run-button", "mask-causal", "token", "retrieval"):
        assert wanted in seen, (wanted, seen)


def test_an_example_sets_model_text_and_options(open_page: Callable[..., Page], run_and_wait: Action) -> None:
    page = open_page()
    example = page.locator("#example-select option", has_text="8 heads").get_attribute("value")
    assert example
    body = run_and_wait(lambda: page.locator("#example-select").select_option(example))
    assert body["model"] == "random" and body["options"]["heads"] == 8
    expect(page.get_by_test_id("head-heatmap")).to_have_count(8)
    expect(page.get_by_test_id("model-select")).to_have_value("random")
    body = run_and_wait(lambda: page.locator("#opt-positions").check())
    assert body["options"]["positions"] is True
    assert "positions=1" in page.url
