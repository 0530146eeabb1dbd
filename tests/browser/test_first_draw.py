"""The page's first draw: plotly (4.8 MB of script) runs once the page's first run is answered and its views in
sight are drawn as far as they can be without it, and the views that plot with it hold the `attnlab:drawn` mark
until they have drawn."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.browser.conftest import PageLog, open_workspace, wait_idle
from tests.helpers import page_until, settle

pytestmark = pytest.mark.browser
# the tests about a first visit (nothing cached) are marked cold; the streamed download's progress and the stages of
# a run shown while the server computes are the same on any visit, and open in the session's warm tab

RANDOM = "?m=random&t=the+cat+sat+on+the+mat&causal=1"
STREAM = "application/vnd.attnlab.arrays-stream"

# When window.Plotly was set, and what was drawn when each `attnlab:drawn` mark was made.
WATCH = """
(() => {
  let plotly;
  Object.defineProperty(window, "Plotly", {
    configurable: true,
    get: () => plotly,
    set: (v) => { plotly = v; window.__plotlyAt ??= performance.now(); },
  });
  window.__atMarks = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.name !== "attnlab:drawn") continue;
      const focus = document.getElementById("focus-plot");
      window.__atMarks.push({ at: e.startTime, focus: !!(focus && focus.drawn && focus.data && focus.data.length),
        similarity: !!document.querySelector("#similarity .js-plotly-plot") });
    }
  }).observe({ type: "mark", buffered: true });
})();
"""

# When plotly's script element was put in the page (main.js askPlotly), page time.
SCRIPT_WATCH = """
new MutationObserver(() => {
  if (window.__plotlyAsked === undefined && document.querySelector("script[src*='plotly.min.js']")) {
    window.__plotlyAsked = performance.now();
  }
}).observe(document, { childList: true, subtree: true });
"""
# 160 positions: a large head of 160 x 160 cells, which the first paint sketches (focus.js SKETCH_CELLS: 128 x 128)
LONG = "?m=random&t=" + "+".join(f"w{i % 37}" for i in range(160))

SIMILARITY_DRAWN = "() => !!document.querySelector('#similarity .js-plotly-plot')"
ANSWERED = """() => performance.getEntriesByType('resource')
  .filter((e) => e.name.endsWith('/api/attention')).map((e) => e.responseEnd)"""
MODELS_ASKED = """() => performance.getEntriesByType('resource')
  .filter((e) => e.name.endsWith('/api/models')).map((e) => e.initiatorType)"""
ATTENTION_SENT = """() => performance.getEntriesByType('resource')
  .filter((e) => e.name.endsWith('/api/attention')).map((e) => e.startTime)"""


@pytest.mark.cold
def test_plotly_runs_after_the_first_request_and_the_mark_waits_for_its_views(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    page.add_init_script(WATCH)
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function("() => window.__atMarks.length > 0", timeout=20_000)
    sent = page.evaluate(ATTENTION_SENT)
    plotly_at = page.evaluate("() => window.__plotlyAt")
    marks = page.evaluate("() => window.__atMarks")
    assert sent and plotly_at is not None, (sent, plotly_at)
    assert sent[0] < plotly_at, f"plotly ran at {plotly_at:.0f} ms, before the first request at {sent[0]:.0f} ms"
    # the models list is asked as the HTML is read (its preload), not once the modules have run, and asked once
    assert page.evaluate(MODELS_ASKED) == ["link"], page.evaluate(MODELS_ASKED)
    # the first mark comes once the large head is drawn, not before; the similarity plot, in a workspace not shown,
    # is not drawn yet: its workspace opened, it is, from the answer held (no request, no second mark)
    assert marks[0]["at"] >= plotly_at and marks[0]["focus"] and not marks[0]["similarity"], marks
    asked = len(page_log.requests)
    open_workspace(page, "inside")
    page.wait_for_function(SIMILARITY_DRAWN, timeout=20_000)
    assert len(page_log.requests) == asked and len(page.evaluate("() => window.__atMarks")) == 1
    assert page_log.console_errors == [] and page_log.page_errors == []


@pytest.mark.parametrize(("query", "sketched"), [(RANDOM, False), (LONG, True)], ids=["6 tokens", "160 tokens"])
def test_plotly_is_asked_for_once_the_answer_is_in_and_after_the_paint_that_sketches_the_large_head(
    page: Page, page_log: PageLog, live_server: str, query: str, sketched: bool
) -> None:
    """Asked with the run, plotly's script ran beside the server's forward and the first layer's download. A small
    head has nothing to show but its plot: plotly is asked for as soon as the answer is in. A large head is sketched
    in the paint that `attnlab:visible` marks, and plotly asked for after it."""
    page.add_init_script(SCRIPT_WATCH)
    page.goto(f"{live_server}/{query}")
    page.wait_for_function("() => performance.getEntriesByName('attnlab:drawn').length > 0", timeout=20_000)
    asked = page.evaluate("() => window.__plotlyAsked")
    answered = page.evaluate(ANSWERED)
    visible = page.evaluate("() => performance.getEntriesByName('attnlab:visible')[0].startTime")
    assert asked is not None and answered, (asked, answered)
    assert asked >= answered[0], f"plotly asked for at {asked:.0f} ms, before the answer was in at {answered[0]:.0f}"
    if sketched:
        assert asked >= visible, f"plotly asked for at {asked:.0f} ms, before the first paint's mark at {visible:.0f}"
    else:
        assert asked <= visible, f"the first paint's mark at {visible:.0f} ms came before plotly, asked at {asked:.0f}"
    assert page.evaluate("() => !!document.getElementById('focus-plot')._fullLayout")
    assert page_log.console_errors == [] and page_log.page_errors == []


@pytest.mark.cold
def test_without_plotly_every_other_view_draws(page: Page, page_log: PageLog, live_server: str) -> None:
    def refuse(route: Route) -> None:
        route.abort()

    page.route("**/vendor/plotly.min.js", refuse)
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function("() => performance.getEntriesByName('attnlab:drawn').length > 0", timeout=20_000)
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    expect(page.get_by_test_id("retrieval-diagram")).to_be_visible()
    assert page.evaluate("() => typeof window.Plotly") == "undefined"
    assert any("plotly.min.js" in e for e in page_log.console_errors), page_log.console_errors
    assert page_log.page_errors == []


@pytest.mark.cold
def test_an_answer_that_comes_before_plotly_is_drawn_and_marked_once_plotly_is_here(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    held: list[Route] = []  # plotly's request, held until the answer is in, however long the forward takes
    page.add_init_script(WATCH)
    page.route("**/vendor/plotly.min.js", lambda route: held.append(route))
    with page.expect_response("**/api/attention", timeout=60_000) as answer:
        page.goto(f"{live_server}/{RANDOM}", wait_until="commit")  # "load" would wait for the held preload
    assert answer.value.ok
    # the page's own record of the answer's end: Playwright's Response.finished() did not return in 2 of 14 runs
    # here (on the code before this change too) while a route held another request
    page_until(page, lambda: bool(page.evaluate(ANSWERED)), "the answer is in")
    page_until(page, lambda: bool(held), "the page asked for plotly")
    # the views that need no plotly drawn; the large head waits for it, so the views still say they are busy
    page.wait_for_function("() => document.querySelectorAll('[data-testid=retrieval-diagram] *').length > 0")
    assert page.get_attribute("#views", "aria-busy") == "true"
    assert page.get_attribute("#sums", "data-row-sums") is None
    for route in held:
        route.continue_()
    page.unroute("**/vendor/plotly.min.js")  # and any request for it after these goes straight through
    # idle once the large head (and its sums) is drawn, not before
    wait_idle(page)
    assert len(json.loads(page.get_attribute("#sums", "data-row-sums") or "[]")) == 6
    page.wait_for_function("() => window.__atMarks.length > 0 && window.__plotlyAt !== undefined", timeout=20_000)
    answered = page.evaluate(ANSWERED)
    plotly_at = page.evaluate("() => window.__plotlyAt")
    marks = page.evaluate("() => window.__atMarks")
    assert answered and answered[0] < plotly_at, (answered, plotly_at)
    assert len(marks) == 1 and marks[0]["at"] >= plotly_at and marks[0]["focus"], marks
    expect(page.locator("#focus-plot")).to_have_attribute("data-head", "0")
    assert page.evaluate("() => document.getElementById('focus-plot').drawn.matrix.length") == 6
    open_workspace(page, "inside")  # the similarity plot, in a workspace of its own, from the answer held
    page.wait_for_function(SIMILARITY_DRAWN, timeout=20_000)
    assert page_log.console_errors == [] and page_log.page_errors == []


@pytest.mark.cold
def test_a_second_visit_takes_the_page_files_from_the_cache_without_asking(
    page: Page, page_log: PageLog, live_server: str
) -> None:
    # the files are named by their content (?v=): a browser that holds them asks nothing, not even for a 304
    for _ in range(2):
        page.goto(f"{live_server}/{RANDOM}")
        page.wait_for_function("() => performance.getEntriesByName('attnlab:drawn').length > 0", timeout=20_000)
    files = page.evaluate(
        """() => performance.getEntriesByType('resource')
          .filter((e) => e.name.includes('/static/'))
          .map((e) => [e.name.split('/static/')[1], e.transferSize])"""
    )
    assert len(files) > 20 and all("?v=" in name for name, _ in files), files
    assert [f for f in files if f[1] != 0] == [], "asked the server again"
    assert page_log.console_errors == [] and page_log.page_errors == []


def first_frame_bytes(base: str, body: dict[str, Any]) -> int:
    """The bytes of a streamed answer through its first frame (its 4-byte length and the frame)."""
    with httpx.stream("POST", f"{base}/api/attention", json=body, headers={"accept": STREAM}, timeout=60) as r:
        first = next(r.iter_raw(4))
    return 4 + int.from_bytes(first[:4], "little")


@contextmanager
def throttled(page: Page, download: int) -> Iterator[None]:
    """The tab's downloads at `download` bytes a second until the block ends, however it ends (the tab is the
    session's: the next test gets its full speed back)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    conditions = {"offline": False, "latency": 0, "uploadThroughput": -1}
    cdp.send("Network.emulateNetworkConditions", {**conditions, "downloadThroughput": download})
    try:
        yield
    finally:
        cdp.send("Network.emulateNetworkConditions", {**conditions, "downloadThroughput": -1})
        cdp.detach()


# The busy indicator's states as they change: [bar value (-1 while hidden), bar max, label], one entry per change.
SEEN_JS = """() => {
  const busy = document.getElementById('busy');
  const seen = (window.__busySeen = []);
  const read = () => {
    const b = busy.querySelector('[data-role=progress]');
    const now = [b.hidden ? -1 : b.value, b.max, busy.querySelector('[data-role=label]').textContent];
    const last = seen[seen.length - 1];
    if (!last || last.some((v, i) => v !== now[i])) seen.push(now);
  };
  new MutationObserver(read).observe(busy, { subtree: true, childList: true, characterData: true, attributes: true });
}"""


def test_a_slow_download_shows_how_much_has_come(page: Page, page_log: PageLog, trained_server: str) -> None:
    """A streamed run on a slow connection: the layer shown's frame, of its exact size (its length comes first),
    then the other layers, of about as much again each, each phase with a bar that moves."""
    words = " ".join(["the", "cat", "sat", "on", "a", "mat"] * 21)  # 126 words: minilm's 6 layers at 128 tokens
    page.goto(f"{trained_server}/?m=minilm&t={words.replace(' ', '+')}")
    page.wait_for_function("() => performance.getEntriesByName('attnlab:drawn').length > 0", timeout=60_000)
    with throttled(page, 1_500_000):  # about 5.6 MB of float16 arrays at 1.5 MB/s
        pill = page.get_by_test_id("busy-indicator").locator("[data-role=pill]")
        label = pill.locator("[data-role=label]")
        page.get_by_test_id("sequence-input").fill(words.replace("mat", "rug"))
        # every state the indicator passes through, recorded by the page itself as it changes: read from Python in a
        # loop, a phase shorter than one round trip on a loaded machine could pass unseen
        page.evaluate(SEEN_JS)
        with page.expect_request("**/api/attention") as sent:
            page.get_by_test_id("run-button").click()
        head = first_frame_bytes(trained_server, sent.value.post_data_json)
        expect(label).to_have_text(re.compile(r"^Receiving [\d.]+ of [\d.]+ (kB|MB)…$"), timeout=30_000)
        expect(pill).to_be_hidden(timeout=30_000)
    seen = [tuple(x) for x in page.evaluate("() => window.__busySeen")]
    head_phase = [re.fullmatch(r"Receiving [\d.]+ of [\d.]+ (kB|MB)…", x[2]) is not None for x in seen]
    assert any(head_phase), seen
    seen = seen[head_phase.index(True) :]  # from this run's first frame (the page's first run may still be finishing)
    first = [x for x in seen if re.fullmatch(r"Receiving [\d.]+ of [\d.]+ (kB|MB)…", x[2])]
    rest = [x for x in seen if x[2].startswith("Receiving the other 5 layers: ")]
    assert first and len(rest) >= 3, seen  # it moved while we watched
    # the layer shown's frame, its size as its length says: as the server's for the same body (the run cache held
    # the whole pass when the test asked, so the head's config and timings run a few bytes longer there)
    frame = first[0][1]
    assert all(total == frame for _, total, _ in first) and abs(frame - head) < 1000, (head, first)
    size = f"{frame / 1e6:.1f} MB" if frame >= 1e6 else f"{frame / 1e3:.0f} kB"
    assert first[-1][2].endswith(f" of {size}…"), (first[-1], size)
    values = [v for v, _, _ in rest]
    assert values == sorted(values) and values[-1] > values[0] > 0, rest
    assert all(total == 6 * frame for _, total, _ in rest), (frame, rest)  # about a frame's worth for each layer
    assert re.fullmatch(rf"Receiving the other 5 layers: [\d.]+ of about {6 * frame / 1e6:.1f} MB…", rest[-1][2])
    assert page_log.console_errors == [] and page_log.page_errors == []


def test_while_the_server_computes_the_page_shows_its_stage(page: Page, page_log: PageLog, live_server: str) -> None:
    # the server's side is tests/test_progress.py; here the stages are scripted so that each is seen for certain
    page.goto(f"{live_server}/{RANDOM}")
    page.wait_for_function("() => performance.getEntriesByName('attnlab:drawn').length > 0", timeout=20_000)
    held: list[Route] = []
    asked: list[str] = []
    # (stage, done, total, ahead): behind two other requests, then next in line, then computing, then writing; every
    # poll answered with the stage the test is at, moved on once the page shows it (however slowly the page polls)
    now: list[tuple[str, int, int, int | None]] = [("queued", 0, 0, 2)]

    def progress(route: Route) -> None:
        url = urlsplit(route.request.url)
        run = url.path.rsplit("/", 1)[1]
        asked.append(f"{run}?{url.query}")  # the ask waits on the server for a run not yet in
        stage, done, total, ahead = now[-1]
        body = {"run": run, "stage": stage, "done": done, "total": total, "ahead": ahead, "elapsed_ms": 1.0}
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route("**/api/progress/*", progress)
    page.route("**/api/attention", lambda route: held.append(route))
    pill = page.get_by_test_id("busy-indicator").locator("[data-role=pill]")
    label = pill.locator("[data-role=label]")
    bar = pill.locator("[data-role=progress]")
    page.get_by_test_id("sequence-input").fill("the cat sat on the mat again")
    page.get_by_test_id("run-button").click()
    expect(label).to_have_text("Waiting for the server (2 requests ahead of yours)…", timeout=10_000)
    now.append(("queued", 0, 0, 0))
    expect(label).to_have_text("Waiting for the server (yours is next)…", timeout=10_000)
    now.append(("layers", 2, 6, None))
    expect(label).to_have_text("Computing layer 3 of 6…", timeout=10_000)
    assert bar.evaluate("(b) => [b.value, b.max]") == [2, 6]
    now.append(("writing", 6, 6, None))
    expect(label).to_have_text("Writing the answer…", timeout=10_000)
    assert held, "the run never asked"
    name = held[0].request.headers.get("x-attnlab-run")
    assert name and re.fullmatch(r"page-[0-9a-f]{24}", name) and set(asked) == {f"{name}?wait_ms=5000"}, (name, asked)
    for route in held:
        route.continue_()
    page.unroute("**/api/attention")
    expect(pill).to_be_hidden(timeout=20_000)
    polled = len(asked)
    settle(page)
    assert len(asked) == polled, "still asking after the answer"
    assert page_log.console_errors == [] and page_log.page_errors == []
