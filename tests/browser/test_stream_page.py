"""The page's streamed run (issue 24, item 6): every layer in one request, the layer shown first and drawn as soon as
it is in (`attnlab:drawn`), the others after it (`attnlab:layers`), downloaded in a worker; a stream cut after its
first layer keeps that layer and says so; without a worker the page reads the stream itself."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, Request, Route, expect

from tests.browser.conftest import PageLog
from tests.helpers import settle

pytestmark = pytest.mark.browser

STREAM = "application/vnd.attnlab.arrays-stream"
TEXT = "the+animal+did+not+cross+the+street+because+it+was+too+tired"

# What the page showed at each of its marks: the layers it held and the overview's thumbnails.
WATCH = """
(() => {
  window.__marks = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.name !== "attnlab:drawn" && e.name !== "attnlab:layers") continue;
      window.__marks.push({ name: e.name, at: e.startTime,
        focusLayer: document.getElementById("focus-plot")?.dataset.layer ?? null,
        thumbs: document.querySelectorAll("#overview-panel canvas").length,
        busy: document.getElementById("views").getAttribute("aria-busy") });
    }
  }).observe({ type: "mark", buffered: true });
})();
"""


def attention_posts(page: Page) -> list[Request]:
    posts: list[Request] = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" and r.url.endswith("/api/attention") else None)
    return posts


def test_the_layer_shown_comes_first_and_every_layer_after_it(
    page: Page, page_log: PageLog, trained_server: str
) -> None:
    page.add_init_script(WATCH)
    posts = attention_posts(page)
    page.goto(f"{trained_server}/?m=minilm&t={TEXT}&layer=3")
    page.wait_for_function("() => window.__marks.some((m) => m.name === 'attnlab:layers')", timeout=60_000)
    settle(page)
    (post,) = posts
    assert post.headers["accept"].startswith(STREAM)
    body = post.post_data_json
    assert body["first_layer"] == 3 and "layer" not in body
    marks = page.evaluate("() => window.__marks")
    drawn = [m for m in marks if m["name"] == "attnlab:drawn"]
    layers = [m for m in marks if m["name"] == "attnlab:layers"]
    assert len(drawn) == 1 and len(layers) == 1, marks
    assert drawn[0]["at"] <= layers[0]["at"] and drawn[0]["focusLayer"] == "3"
    assert layers[0]["thumbs"] == 72 and layers[0]["busy"] == "false"  # every layer's 12 heads, nothing pending
    expect(page.locator("#views")).to_have_attribute("aria-busy", "false")
    # a switch draws from what the page holds
    page.locator("#layer-select").select_option("5")
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "5")
    settle(page)
    assert len(posts) == 1
    assert page_log.page_errors == [] and page_log.console_errors == []


def cut_after_head(answer: bytes) -> bytes:
    """The stream's bytes up to the end of its first frame (the head)."""
    size = int.from_bytes(answer[:4], "little")
    return answer[: 4 + size]


def test_a_stream_cut_after_its_first_layer_keeps_that_layer_and_says_so(
    page: Page, page_log: PageLog, trained_server: str
) -> None:
    cut: list[dict[str, Any]] = []

    def first_cut(route: Route) -> None:
        if cut:
            route.continue_()
            return
        real = route.fetch()
        cut.append(route.request.post_data_json)
        route.fulfill(status=200, headers={"content-type": STREAM}, body=cut_after_head(real.body()))

    page.route("**/api/attention", first_cut)
    page.goto(f"{trained_server}/?m=minilm&t={TEXT}&layer=2")
    notice = page.locator("#heads-notice")
    expect(notice).to_contain_text("did not arrive")
    expect(notice).to_contain_text("layer 2")
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "2")
    expect(page.locator("#views")).to_have_attribute("aria-busy", "false")
    assert page.get_by_test_id("error-banner").is_hidden()
    # another layer is not held: the switch asks again, that layer first
    with page.expect_request("**/api/attention") as again:
        page.locator("#layer-select").select_option("4")
    assert again.value.post_data_json["first_layer"] == 4
    page.wait_for_function("() => performance.getEntriesByName('attnlab:layers').length > 0", timeout=60_000)
    expect(page.locator("#focus-plot")).to_have_attribute("data-layer", "4")
    assert page_log.page_errors == []


def test_without_a_worker_the_page_reads_the_stream_itself(page: Page, page_log: PageLog, trained_server: str) -> None:
    page.add_init_script("Object.defineProperty(window, 'Worker', { value: undefined })")
    posts = attention_posts(page)
    page.goto(f"{trained_server}/?m=minilm&t={TEXT}")
    page.wait_for_function("() => performance.getEntriesByName('attnlab:layers').length > 0", timeout=60_000)
    assert posts[0].headers["accept"].startswith(STREAM)
    expect(page.locator("#overview-panel canvas")).to_have_count(72)
    assert page_log.page_errors == [] and page_log.console_errors == []


def test_the_frame_splitter_and_reader_give_the_same_answer_for_any_chunking(page: Page, trained_server: str) -> None:
    """The page's splitter (fetchworker.js) over a real streamed answer cut into chunks of 1, 3, 4093 bytes and
    whole: the same frames; assembled, the same answer as the arrays form, value for value."""
    page.goto(f"{trained_server}/api/health")
    out = page.evaluate(
        """async () => { const mod = (n) => import('/static/js/' + n);
        const worker = await mod("fetchworker.js"), frames = await mod("frames.js"), arrays = await mod("arrays.js");
        const ask = {model: "minilm", text: "the cat sat on the mat", include: ["weights", "stats"]};
        const post = (accept, body) => fetch("/api/attention", {method: "POST", body: JSON.stringify(body),
          headers: {"content-type": "application/json", accept}}).then((r) => r.arrayBuffer());
        const bytes = new Uint8Array(await post(frames.STREAM_MEDIA_TYPE, {...ask, first_layer: 2}));
        const split = (size) => {
          const s = worker.frameSplitter(), got = [];
          for (let at = 0; at < bytes.length; at += size) got.push(...s.push(bytes.subarray(at, at + size)));
          return {got, left: s.left()};
        };
        const whole = split(bytes.length);
        const same = (a, b) => a.length === b.length && a.every((buf, i) =>
          buf.byteLength === b[i].byteLength && new Uint8Array(buf).every((x, j) => x === new Uint8Array(b[i])[j]));
        const kinds = whole.got.map((b) => frames.readFrame(b)[0]);
        const [, head] = frames.readFrame(whole.got[0]);
        const answer = frames.assemble(head, whole.got.slice(1, -1).map((b) => frames.readFrame(b)[1]),
          frames.readFrame(whole.got.at(-1))[1]);
        const plain = arrays.readArrays(await post(arrays.MEDIA_TYPE, ask));
        const weights = (r) => r.layers.map((l) => l.heads.map((h) => Array.from(h.weights, (row) => Array.from(row))));
        const cut = worker.frameSplitter();
        cut.push(bytes.subarray(0, 10));
        return {
          kinds, sameChunked: [1, 3, 4093].map((n) => same(split(n).got, whole.got)), left: whole.left,
          headLayer: head.layers.map((l) => l.index), order: answer.layers.map((l) => l.index),
          equal: JSON.stringify(weights(answer)) === JSON.stringify(weights(plain)),
          stats: JSON.stringify(answer.layers.map((l) => l.heads.map((h) => h.stats))) ===
            JSON.stringify(plain.layers.map((l) => l.heads.map((h) => h.stats))),
          cutLeft: cut.left(),
        };
        }"""
    )
    assert out["kinds"] == ["head", "layer", "layer", "layer", "layer", "layer", "tail"]
    assert out["sameChunked"] == [True, True, True] and out["left"] == 0
    assert out["headLayer"] == [2] and out["order"] == [0, 1, 2, 3, 4, 5]
    assert out["equal"] and out["stats"]
    assert out["cutLeft"] == 10  # the 4 length bytes and 6 of the frame


# A store with a run of a 3-layer model in flight, the Layer menu at `shown`; `layer(i)` and `top` build its answer.
