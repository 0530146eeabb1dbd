"""How the page gets its numbers: the arrays form (float16 when large, float32 when small), every layer at once so
that a layer switch draws from what the page holds, one forward and one `attnlab:drawn` mark per action, and
512 tokens of minilm end to end (issue 9, goals 1, 2 and 4)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.browser.conftest import PageLog, open_workspace
from tests.helpers import settle

pytestmark = pytest.mark.browser

MEDIA_TYPE = "application/vnd.attnlab.arrays"
STREAM = "application/vnd.attnlab.arrays-stream"
MARKS = "() => performance.getEntriesByName('attnlab:drawn').length"
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "it", "was", "warm"]  # one WordPiece each


def words(n: int, salt: str = "") -> str:
    """n single-WordPiece words (n + 2 minilm tokens with [CLS] and [SEP]); `salt` makes the text unseen by the
    server's run cache."""
    out = [WORDS[i % len(WORDS)] for i in range(n)]
    if salt:
        out[0] = salt
    return " ".join(out)


@dataclass
class Posts:
    """Every POST the page sent, in order: its path, Accept header and body."""

    seen: list[Request] = field(default_factory=list)

    def clear(self) -> None:
        self.seen.clear()

    def to(self, path: str) -> list[Request]:
        return [r for r in self.seen if r.url.split("?")[0].endswith(path)]

    def paths(self) -> list[str]:
        return ["/" + r.url.split("://", 1)[1].split("/", 1)[1] for r in self.seen]


def record_posts(page: Page) -> Posts:
    posts = Posts()
    page.on("request", lambda r: posts.seen.append(r) if r.method == "POST" else None)
    return posts


def marks(page: Page) -> int:
    return int(page.evaluate(MARKS))


def wait_marks(page: Page, n: int, timeout: float = 60_000) -> None:
    page.wait_for_function("(n) => performance.getEntriesByName('attnlab:drawn').length >= n", arg=n, timeout=timeout)


def forwards(base: str) -> float:
    """Forward passes the server ran: its run cache's misses (every forward is looked up there first)."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    found = re.search(r'^attnlab_run_cache_total\{result="miss"\} ([0-9.e+]+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def hover_weight(page: Page, card: int, q: int, k: int) -> tuple[dict[str, str], tuple[int, int], float]:
    """Hover cell (q, k) of the card-th head heatmap: the card's layer and head, the cell its tooltip names (at 512
    tokens a cell is less than a pixel wide, so it may be a neighbour), and the weight it shows."""
    fig = page.locator("[data-testid=head-heatmap]").nth(card)
    layout = json.loads(fig.get_attribute("data-layout") or "{}")
    fig.scroll_into_view_if_needed()
    box = fig.locator("canvas").bounding_box()
    assert box and layout
    c = layout["cell"]
    page.mouse.move(box["x"] + layout["left"] + c * (k + 0.5), box["y"] + layout["top"] + c * (q + 0.5))
    tip = page.locator("#tooltip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("weight")
    text = tip.inner_text()
    cell = re.search(r"query (\d+) .* key (\d+) ", text)
    weight = re.search(r"weight (-?[0-9.]+)", text)
    assert cell and weight, text
    place = {"layer": fig.get_attribute("data-layer") or "", "head": fig.get_attribute("data-head") or ""}
    return place, (int(cell.group(1)), int(cell.group(2))), float(weight.group(1))


def api_weights(base: str, body: dict[str, Any], layer: int) -> list[Any]:
    """One layer's weights as the JSON API gives them (float32), for the same body the page sent."""
    plain = {k: v for k, v in body.items() if k not in ("precision", "layer", "include", "first_layer")}
    got = httpx.post(f"{base}/api/attention", json={**plain, "layer": layer, "include": ["weights"]}, timeout=120)
    assert got.status_code == 200, got.text[:300]
    return [h["weights"] for h in got.json()["layers"][0]["heads"]]


# ---- the arrays form, and its precision --------------------------------------------------------------------------


def test_a_large_run_travels_as_float16_arrays_and_the_heatmap_shows_their_numbers(
    page: Page, page_log: PageLog, trained_server: str
) -> None:
    posts = record_posts(page)
    text = words(120)  # 122 tokens x 72 heads x 2 matrices: 2.1 M values, over the page's float16 threshold
    page.goto(f"{trained_server}/?m=minilm&t={text.replace(' ', '+')}")
    wait_marks(page, 1)
    (run,) = posts.to("/api/attention")
    body = run.post_data_json
    assert run.headers["accept"] == f"{STREAM}, {MEDIA_TYPE};q=0.9"  # streamed: the layer shown first
    assert body["precision"] == "float16"
    assert "layer" not in body and body["first_layer"] == 0  # every layer at once, layer 0 first
    resp = run.response()
    assert resp is not None and resp.headers["content-type"].startswith(MEDIA_TYPE)
    # a cell of layer 0's head 3, hovered, shows the weight the JSON API gives for it, to float16's precision
    card, cell, shown = hover_weight(page, 3, 9, 4)
    assert card == {"layer": "0", "head": "3"} and cell == (9, 4)
    exact = api_weights(trained_server, body, 0)[3][9][4]
    assert shown == pytest.approx(exact, abs=1e-3)
    assert page_log.page_errors == [] and page_log.console_errors == []


def test_a_small_run_stays_float32_and_exports_plain_exact_numbers(
    page: Page, page_log: PageLog, trained_server: str
) -> None:
    posts = record_posts(page)
    page.goto(f"{trained_server}/?m=textbook")
    wait_marks(page, 1)
    (run,) = posts.to("/api/attention")
    body = run.post_data_json
    assert run.headers["accept"] == MEDIA_TYPE
    assert body["precision"] == "float32"  # the worked example's numbers are checked by hand
    with page.expect_download() as got:
        page.locator("#export-json").click()
    data = json.loads(got.value.path().read_text())
    weights = data["response"]["layers"][0]["heads"][0]["weights"]
    assert isinstance(weights, list) and all(isinstance(row, list) for row in weights)  # not {"0": ...} objects
    exact = api_weights(trained_server, body, 0)[0]
    # float32 to the last digit (float16 would be off by about 1e-4)
    assert weights == [pytest.approx(row, rel=1e-6, abs=1e-7) for row in exact]
    _, cell, shown = hover_weight(page, 0, 2, 1)
    assert cell == (2, 1)
    assert shown == pytest.approx(exact[2][1], abs=5.1e-5)  # four decimals
    assert page_log.page_errors == []


# ---- one action, one forward, one mark ---------------------------------------------------------------------------


def test_one_action_runs_one_forward_and_draws_once(page: Page, page_log: PageLog, trained_server: str) -> None:
    # the head types measure induction on a seeded probe sequence, one forward that the run cache keeps from then on
    warm = httpx.post(f"{trained_server}/api/heads", json={"model": "minilm", "text": "warm"}, timeout=60)
    assert warm.status_code == 200
    posts = record_posts(page)
    before = forwards(trained_server)
    page.goto(f"{trained_server}/?m=minilm&t={words(14, 'transport').replace(' ', '+')}")
    wait_marks(page, 1)
    settle(page)
    expect(page.locator("#views")).to_have_attribute("aria-busy", "false")
    # the first draw: one attention run (every layer), the head types from the same forward, the cost asked once
    assert len(posts.to("/api/attention")) == 1, posts.paths()
    assert "layer" not in posts.to("/api/attention")[0].post_data_json
    assert len(posts.to("/api/cost")) == 1, posts.paths()
    open_workspace(page, "inside")  # the head types, drawn from the answer held
    expect(page.get_by_test_id("head-type-row").first).to_be_visible()
    open_workspace(page, "explore")
    assert len(posts.to("/api/attention")) == 1, posts.paths()
    assert forwards(trained_server) - before == 1
    assert marks(page) == 1

    # a layer switch draws from what the page holds: no request at all, no forward, one mark
    posts.clear()
    before = forwards(trained_server)
    page.locator("#layer-select").select_option("3")
    wait_marks(page, 2)
    settle(page)
    assert posts.paths() == []
    assert marks(page) == 2
    assert forwards(trained_server) == before
    cards = page.get_by_test_id("head-heatmap")
    expect(cards).to_have_count(12)
    assert set(cards.evaluate_all("els => els.map(e => e.dataset.layer)")) == {"3"}
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "3")

    # opening a head of another layer (the head-types table) is a switch too; it opens Explore, where the large head is
    open_workspace(page, "inside")
    row = page.locator("[data-testid=head-type-row]:not([data-layer='3'])").first
    layer, head = row.get_attribute("data-layer"), row.get_attribute("data-head")
    row.locator("button").click()
    wait_marks(page, 3)
    settle(page)
    expect(page.locator("#layer-select")).to_have_value(str(layer))
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", str(head))
    assert posts.paths() == [] and marks(page) == 3

    # a mask toggle: exactly one attention run and one forward (the head types reuse it), and one mark
    page.get_by_test_id("mask-causal").check()
    wait_marks(page, 4)
    settle(page)
    expect(page.locator("#views")).to_have_attribute("aria-busy", "false")
    runs = posts.to("/api/attention")
    assert len(runs) == 1 and runs[0].post_data_json["masks"]["causal"] is True, posts.paths()
    assert forwards(trained_server) - before == 1
    assert marks(page) == 4
    assert set(cards.evaluate_all("els => els.map(e => e.dataset.layer)")) == {layer}
    assert page_log.page_errors == [] and page_log.console_errors == []


def test_over_the_limit_one_layer_is_held_and_a_switch_asks_for_the_next(
    page: Page, page_log: PageLog, trained_server: str
) -> None:
    posts = record_posts(page)
    text = words(180)  # 182 tokens x 72 heads: over this server's 4,000,000 values at once; one layer fits
    page.goto(f"{trained_server}/?m=minilm&t={text.replace(' ', '+')}")
    wait_marks(page, 1)
    runs = [r.post_data_json for r in posts.to("/api/attention")]
    assert ["layer" in b for b in runs] == [False, True] and runs[-1]["layer"] == 0
    expect(page.get_by_test_id("error-banner")).to_be_hidden()
    # the page now knows: the same input asks for one layer straight away, and a switch asks for its layer
    posts.clear()
    page.locator("#layer-select").select_option("2")
    wait_marks(page, 2)
    assert [r.post_data_json.get("layer") for r in posts.to("/api/attention")] == [2]
    expect(page.get_by_test_id("head-heatmap").first).to_have_attribute("data-layer", "2")
    assert page_log.page_errors == []


# ---- 512 tokens --------------------------------------------------------------------------------------------------


# What the page tells its download worker (static/js/frames.js): each fetch's id and body, and each abort's id.
WORKER_MESSAGES = """
window.__toWorker = [];
const post = Worker.prototype.postMessage;
Worker.prototype.postMessage = function (msg, ...rest) {
  if (msg && msg.id != null) window.__toWorker.push({id: msg.id, abort: !!msg.abort, body: msg.init?.body ?? null});
  return post.call(this, msg, ...rest);
};
"""


@pytest.mark.slow
def test_512_tokens_draw_every_layer_switch_without_a_request_and_a_new_action_aborts_the_run_in_flight(
    page: Page, page_log: PageLog, full_length_server: str
) -> None:
    """One page of minilm at its 512 positions: every layer drawn, a layer switch drawn from what the page holds,
    then a new action that stops the download of the run still in flight."""
    text = words(510)
    tokens = httpx.post(
        f"{full_length_server}/api/attention", json={"model": "minilm", "text": text, "include": []}, timeout=60
    ).json()["tokens"]
    assert len(tokens) == 512
    page.add_init_script(WORKER_MESSAGES)
    posts = record_posts(page)
    page.goto(f"{full_length_server}/?m=minilm&t={text.replace(' ', '+')}")
    wait_marks(page, 1, timeout=180_000)
    (run,) = posts.to("/api/attention")
    assert "layer" not in run.post_data_json and run.post_data_json["precision"] == "float16"
    cards = page.get_by_test_id("head-heatmap")
    expect(cards).to_have_count(12)
    assert page.get_by_test_id("token").count() > 0
    card, (q, k), shown = hover_weight(page, 5, 300, 0)
    assert card == {"layer": "0", "head": "5"} and abs(q - 300) <= 3 and k <= 3
    assert shown == pytest.approx(api_weights(full_length_server, run.post_data_json, 0)[5][q][k], abs=1e-3)
    # a switch to the last layer: drawn from what the page holds, once every layer is in (the analyses are asked
    # then, reusing the forward: the first mark can come before they are); every layer in, the first run's stream
    # is not still coming when the mask changes below
    page.wait_for_function("() => performance.getEntriesByName('attnlab:layers').length > 0", timeout=180_000)
    settle(page)
    posts.clear()
    page.locator("#layer-select").select_option("5")
    wait_marks(page, 2, timeout=60_000)
    settle(page)
    assert posts.paths() == [] and marks(page) == 2
    assert set(cards.evaluate_all("els => els.map(e => e.dataset.layer)")) == {"5"}
    assert page_log.page_errors == [] and page_log.console_errors == []

    # a new action aborts the run in flight
    page.evaluate("() => { window.__toWorker.length = 0; }")
    posts.clear()
    # the causal run held at the network until the next action: in flight when it comes, however fast the server
    # answers (its run cache) or however late the page takes the action (a fresh-clone CI run once found it ended)
    held: list[Route] = []

    def hold_causal(route: Route) -> None:
        if (route.request.post_data_json or {}).get("masks", {}).get("causal"):
            held.append(route)
        else:
            route.continue_()

    page.route("**/api/attention", hold_causal)
    with page.expect_request("**/api/attention"):
        page.get_by_test_id("mask-causal").check()
    page.get_by_test_id("mask-causal").uncheck()
    wait_marks(page, 3, timeout=180_000)
    assert len(held) == 1
    # too late: the page has let it go, and Playwright may refuse a route whose request was cancelled
    with contextlib.suppress(Exception):
        held[0].continue_()
    settle(page)
    runs = [r.post_data_json["masks"]["causal"] for r in posts.to("/api/attention")]
    assert runs == [True, False]
    # the causal run's download was stopped (the worker told to abort it), the next one's was not
    sent = page.evaluate("() => window.__toWorker")
    asked = {m["id"]: json.loads(m["body"])["masks"]["causal"] for m in sent if not m["abort"]}
    assert sorted(asked.values()) == [False, True], sent
    assert [asked[m["id"]] for m in sent if m["abort"]] == [True], sent
    expect(page.get_by_test_id("mask-causal")).not_to_be_checked()
    assert marks(page) == 3
    assert page_log.page_errors == []


# ---- the drawing helpers that make 512 tokens cheap, against the plain ways they replace -------------------------


def test_fast_drawing_helpers_give_what_the_plain_ones_gave(page: Page, live_server: str) -> None:
    page.goto(f"{live_server}/api/health")
    out = page.evaluate(
        """async () => {
          const focus = await import('/static/js/focuscells.js'), heatmap = await import('/static/js/heatmap.js');
          const colors = await import('/static/js/colors.js'), api = await import('/static/js/api.js');
          const S = 7, K = 9, rnd = (i) => Math.sin(i * 12.9898) * 0.5 + 0.5;
          const grid = (f) => Array.from({length: S}, (_, q) => Array.from({length: K}, (_, k) => f(q, k)));
          const matrix = (seed) => grid((q, k) => rnd(seed + q * K + k) * 2 - 0.5).map((row) => Float32Array.from(row));
          const eligible = grid((q, k) => k <= q + 1 && (q + k) % 5 !== 0);
          const causal = grid((q, k) => k > q + 1);
          const blocked = grid((q, k) => (q + k) % 5 === 0);
          const head = {scores: matrix(1), weights: matrix(2)};
          const tokens = Array.from({length: S}, (_, i) => `<t${i}>&`);
          const keyTokens = Array.from({length: K}, (_, i) => `k${i}`);
          const differ = (view) => {
            const lazy = focus.hoverTexts(view, head);
            let bad = 0;
            for (let q = 0; q < S; q++) {
              for (let k = 0; k < K; k++) if (lazy[q][k] !== focus.hoverText(view, head, q, k)) bad++;
            }
            return bad;
          };
          const plain = {tokens, keyTokens, eligible, reasons: null};
          const withReasons = {...plain, reasons: {causal, blocked}};
          const pixels = (scale) => {
            const a = new Uint8ClampedArray(S * K * 4), b = new Uint8ClampedArray(S * K * 4);
            heatmap.paintPixels(a, head.scores, eligible, scale, S, K);
            const mask = colors.hexToRgb(colors.MASK_FILL);
            for (let q = 0; q < S; q++) for (let k = 0; k < K; k++) {
              const t = colors.normalise(head.scores[q][k], scale);
              const rgb = eligible[q][k] ? colors.colorAt(scale.stops, t) : mask;
              b.set([...rgb, 255], (q * K + k) * 4);
            }
            return a.every((v, i) => v === b[i]);
          };
          return {
            hover: [differ(plain), differ(withReasons)],
            pixels: [pixels(colors.scaleFor('weights', 'viridis', 1)), pixels(colors.scaleFor('scores', '', 1.2))],
            path: focus.maskPath([[true, false, false, true], [false, true, true, false]]),
            json: JSON.stringify({m: [Float32Array.of(0.5, 0.25)], v: Uint8Array.of(1)}, api.plainArrays),
            precision: [api.precisionFor(25), api.precisionFor(2.2e6)],
          };
        }"""
    )
    assert out["hover"] == [0, 0]
    assert out["pixels"] == [True, True]
    # one rectangle per masked run: row 0 keys 1-2, row 1 keys 0 and 3
    xs = [x for x in out["path"]["x"] if x is not None]
    assert [xs[i : i + 5] for i in range(0, len(xs), 5)] == [
        [0.5, 2.5, 2.5, 0.5, 0.5],
        [-0.5, 0.5, 0.5, -0.5, -0.5],
        [2.5, 3.5, 3.5, 2.5, 2.5],
    ]
    assert json.loads(out["json"]) == {"m": [[0.5, 0.25]], "v": [1]}
    assert out["precision"] == ["float32", "float16"]


def test_float16_bit_patterns_draw_what_their_widened_values_draw(page: Page, live_server: str) -> None:
    """heatmap.paintPixels and blockmax.blockMax take a float16 answer's bit patterns (arrays.halfRows) as they are:
    the same pixels and block maxima as the widened values give, for every one of the 65536 patterns."""
    page.goto(f"{live_server}/api/health")
    out = page.evaluate(
        """async () => {
          const heatmap = await import('/static/js/heatmap.js'), B = await import('/static/js/blockmax.js');
          const colors = await import('/static/js/colors.js'), arrays = await import('/static/js/arrays.js');
          // every pattern once, as 256 rows of 256 (negatives, -0, infinities and NaNs included), one cell in 7 masked
          const every = Array.from({length: 256}, (_, q) => Uint16Array.from({length: 256}, (_, k) => q * 256 + k));
          const eligible = every.map((row, q) => Array.from(row, (_, k) => (q * 256 + k) % 7 !== 3));
          const widened = (rows) => rows.map((row) => arrays.widenHalf(row));
          const pixels = (scale) => {
            const a = new Uint8ClampedArray(256 * 256 * 4), b = new Uint8ClampedArray(256 * 256 * 4);
            heatmap.paintPixels(a, every, eligible, scale, 256, 256);
            heatmap.paintPixels(b, widened(every), eligible, scale, 256, 256);
            return a.every((v, i) => v === b[i]);
          };
          // weights' patterns (0 to 1) on a 37 x 29 matrix, one block wholly masked; then one negative value
          const rnd = (i) => Math.floor((Math.sin(i * 12.9898) * 0.5 + 0.5) * 0x3c00);
          const weights = Array.from({length: 37}, (_, q) => Uint16Array.from({length: 29}, (_, k) => rnd(q * 29 + k)));
          const ok = weights.map((row, q) => Array.from(row, (_, k) => !(q < 5 && k < 4) && (q + k) % 3 !== 0));
          const same = (a, b) => a.rows === b.rows && a.cols === b.cols &&
            a.values.every((v, i) => Object.is(v, b.values[i]));
          const blocks = (w, e) => same(B.blockMax(w, e, 8), B.blockMax(widened(w), e, 8));
          const negative = weights.map((row) => row.slice());
          negative[3][2] = 0xbc00; // -1
          // rows back to back in one buffer, as the arrays form's are, an even number of keys: two patterns a word
          const joined = (rows, K) => {
            const flat = new Uint16Array(rows.length * K);
            rows.forEach((row, q) => flat.set(row.subarray(0, K), q * K));
            return rows.map((_, q) => flat.subarray(q * K, (q + 1) * K));
          };
          const even = joined(weights, 28);
          const okEven = ok.map((row) => row.slice(0, 28));
          const inf = joined(weights, 28);
          inf[20][7] = 0x7e00; // a NaN
          return {
            pixels: [pixels(colors.scaleFor('weights', 'viridis', 1)), pixels(colors.scaleFor('scores', '', 1.2))],
            blocks: [blocks(weights, ok), blocks(weights, null), blocks(negative, ok), blocks(every, eligible),
                     blocks(even, okEven), blocks(even, null), blocks(joined(negative, 28), null), blocks(inf, null),
                     blocks(joined(every, 256), eligible), blocks(joined(every, 256), null)],
            masked: Number.isNaN(B.blockMax(weights, ok, 8).values[0]),
          };
        }"""
    )
    assert out == {"pixels": [True, True], "blocks": [True] * 10, "masked": True}
