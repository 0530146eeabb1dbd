"""What bench/page.py and bench/mask_change.py measure in the page: the requests an action sends (Traffic), the
page's marks and resource timings (a first draw, a layer switch, and where their time went), and Chromium's sampling
JS profiler. The page makes `attnlab:visible` once the views in sight are painted and `attnlab:drawn` once every
view is (static/js/sight.js: a view below the fold draws after the paint)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from playwright.sync_api import Page, Request

MARK = "attnlab:drawn"  # every view drawn
SEEN_MARK = "attnlab:visible"  # every view in sight drawn and painted: bench/page.py's first draw and layer switch
LAYERS_MARK = "attnlab:layers"  # a streamed answer's other layers drawn too (after the first MARK)
LAYER_SELECT = "[data-testid=layer-select], #layer-select"
QUIET_S = 1.0  # the network quiet this long after a draw ends the action's request count


@dataclass
class Traffic:
    """What the page sent during one action: requests, in flight and finished, with their response bytes."""

    started: list[Request] = field(default_factory=list)
    done: set[int] = field(default_factory=set)
    last_event: float = 0.0

    def pending(self) -> int:
        return sum(1 for r in self.started if id(r) not in self.done)

    def summary(self) -> dict[str, Any]:
        posts: dict[str, int] = {}
        post_bytes = get_bytes = gets = unknown = 0
        types: set[str] = set()
        for r in self.started:
            try:
                size = r.sizes()["responseBodySize"]
            except Exception:  # an aborted request has no sizes, nor at times the worker's streamed one
                size = 0
                unknown += 1
            else:
                # every answer of the API's POSTs has a body: a size of 0 is Chromium not reporting one, as it does
                # at times for the worker's streamed answer (counted as 0 it made a 79 MB stream read "29.8 kB")
                resp = r.response() if r.method == "POST" and size == 0 else None
                if resp is not None and resp.status == 200:
                    unknown += 1
            path = r.url.split("://", 1)[-1].split("/", 1)[-1].split("?", 1)[0]
            if r.method == "POST":
                posts[f"/{path}"] = posts.get(f"/{path}", 0) + 1
                post_bytes += size
                if path.endswith("api/attention"):
                    resp = r.response()
                    types.add((resp.headers.get("content-type", "?") if resp else "?").split(";")[0])
            else:
                gets += 1
                get_bytes += size
        return {
            "posts": posts,
            "post_bytes": post_bytes,
            "gets": gets,
            "get_bytes": get_bytes,
            "types": types,
            "unknown": unknown,
        }


def watch(page: Page) -> Callable[[], Traffic]:
    """Record the page's requests; the returned function starts a fresh record and returns it."""
    box = [Traffic()]

    def on_request(r: Request) -> None:
        box[0].started.append(r)
        box[0].last_event = time.monotonic()

    def on_end(r: Request) -> None:
        box[0].done.add(id(r))
        box[0].last_event = time.monotonic()

    page.on("request", on_request)
    page.on("requestfinished", on_end)
    page.on("requestfailed", on_end)

    def fresh() -> Traffic:
        box[0] = Traffic(last_event=time.monotonic())
        return box[0]

    return fresh


def settle(page: Page, traffic: Traffic, cap_s: float = 30.0) -> None:
    """Wait until nothing is in flight and the network has been quiet for QUIET_S (at most cap_s)."""
    end = time.monotonic() + cap_s
    while time.monotonic() < end:
        if traffic.pending() == 0 and time.monotonic() - traffic.last_event >= QUIET_S:
            return
        page.wait_for_timeout(100)


MARKS_JS = "(name) => performance.getEntriesByName(name).map((e) => e.startTime)"


# The /api/attention answers that started at or after t0: [requestStart, responseStart, responseEnd] each, page time.
ANSWERS_JS = """(t0) => performance.getEntriesByType("resource")
  .filter((e) => e.name.endsWith("/api/attention") && e.startTime >= t0 && e.responseEnd > 0)
  .map((e) => [e.requestStart || e.startTime, e.responseStart, e.responseEnd])"""


@dataclass
class Phases:
    """Where one action's time went, in ms from the action (navigation start, or the switch)."""

    sent: float  # the /api/attention request sent
    first_byte: float  # its answer's first byte (the server's forward, serialisation, queueing)
    answered: float  # its answer's last byte
    drawn: float  # the `attnlab:visible` mark: the views in sight painted
    views: dict[str, float] = field(default_factory=dict)  # ms each view's render took between t0 and the mark
    layers: float | None = None  # a streamed answer: its other layers drawn too (`attnlab:layers`); then `sent` is
    # the run asked (`attnlab:asked`), `first_byte` its first layer in the page (`attnlab:head`), `answered` = layers
    every: float | None = None  # every view drawn (`attnlab:drawn`)


# Each view's render time between t0 and the mark (main.js measures every render as attnlab:view:NAME).
VIEWS_JS = """([t0, mark]) => {
  const out = {};
  for (const e of performance.getEntriesByType("measure")) {
    if (!e.name.startsWith("attnlab:view:") || e.startTime < t0 || e.startTime > mark) continue;
    const name = e.name.slice(13);
    out[name] = (out[name] || 0) + e.duration;
  }
  return out;
}"""


def phases(page: Page, t0: float, mark: float) -> Phases | None:
    answers: list[list[float]] = page.evaluate(ANSWERS_JS, t0)
    if not answers:
        return None
    sent, first, end = answers[-1]
    views: dict[str, float] = page.evaluate(VIEWS_JS, [t0, mark])
    return Phases(sent - t0, first - t0, end - t0, mark - t0, views)


# Every layer held: the streamed answer's `attnlab:layers` mark, or a page that asked in one piece (no stream) idle.
HELD_JS = f"""() => performance.getEntriesByName('{LAYERS_MARK}').length > 0 ||
  document.getElementById('views').getAttribute('aria-busy') === 'false'"""


def first_draw(page: Page, url: str, give_up_s: float) -> tuple[float | None, Phases | None]:
    """ms from navigation start to the first `attnlab:visible` mark (None when it gave up), and its phases (read
    once every view is drawn and every layer held: a streamed answer's resource timing is there only once its last
    byte is)."""
    page.goto(url, wait_until="commit")
    try:
        for mark in (SEEN_MARK, MARK):
            page.wait_for_function(
                f"() => performance.getEntriesByName('{mark}').length > 0", timeout=give_up_s * 1000, polling=20
            )
        page.wait_for_function(HELD_JS, timeout=give_up_s * 1000, polling=20)
    except Exception:  # playwright's TimeoutError: recorded as a MISS
        return None, None
    seen: list[float] = page.evaluate(MARKS_JS, SEEN_MARK)
    every: list[float] = page.evaluate(MARKS_JS, MARK)
    ph = streamed_phases(page, seen[0]) or phases(page, 0.0, seen[0])
    if ph:
        ph.every = every[0]
    return seen[0], ph


# A streamed answer is downloaded in the page's worker, whose requests are not in the page's resource timing: its
# phases come from the page's own marks (attnlab:asked, attnlab:head) instead.
STREAM_MARKS_JS = """() => ['attnlab:asked', 'attnlab:head', 'attnlab:layers']
  .map((n) => performance.getEntriesByName(n)[0]?.startTime ?? null)"""


def streamed_phases(page: Page, mark: float) -> Phases | None:
    asked, head, layers = page.evaluate(STREAM_MARKS_JS)
    if asked is None or head is None or layers is None:
        return None
    views: dict[str, float] = page.evaluate(VIEWS_JS, [0.0, mark])
    return Phases(asked, head, layers, mark, views, layers)


SWITCH_JS = """(sel) => {
  const s = document.querySelector(sel);
  const values = [...s.options].map((o) => o.value).filter((v) => v !== "all");
  const next = values[(values.indexOf(s.value) + 1) % values.length];
  s.value = next;
  const t0 = performance.now();
  s.dispatchEvent(new Event("change", { bubbles: true }));
  return [t0, next];
}"""

# The draw that follows the switch (its mark `name`): after the last /api/attention answer that started after t0,
# when there was one.
DRAWN_AFTER_JS = """([t0, sawPost, name]) => {
  const answers = performance.getEntriesByType("resource")
    .filter((e) => e.name.endsWith("/api/attention") && e.startTime >= t0 && e.responseEnd > 0)
    .map((e) => e.responseEnd);
  if (sawPost && !answers.length) return null;
  const after = answers.length ? Math.max(...answers) : t0;
  const m = performance.getEntriesByName(name).map((e) => e.startTime).find((t) => t >= after);
  return m === undefined ? null : [m, answers.length ? after : null];
}"""


@dataclass
class Switch:
    ms: float | None  # to the views in sight painted with the new layer's data (`attnlab:visible`); None: gave up
    early_mark_ms: float | None  # the first mark after the switch, which may come before the new data
    phases: Phases | None  # when it sent a POST /api/attention
    views: dict[str, float] = field(default_factory=dict)  # ms each view's render took, switch to mark
    every_ms: float | None = None  # to every view drawn (`attnlab:drawn`)


def layer_switch(page: Page, traffic: Traffic, give_up_s: float) -> Switch:
    t0, _ = page.evaluate(SWITCH_JS, LAYER_SELECT)
    # the page debounces (80 ms) before it asks: give a POST the time to start before deciding there is none
    page.wait_for_timeout(300)
    saw_post = any(r.method == "POST" and r.url.endswith("/api/attention") for r in traffic.started)
    end = time.monotonic() + give_up_s
    found = every = None
    while time.monotonic() < end:
        found = found or page.evaluate(DRAWN_AFTER_JS, [t0, saw_post, SEEN_MARK])
        every = every or page.evaluate(DRAWN_AFTER_JS, [t0, saw_post, MARK])
        if found and every:
            break
        page.wait_for_timeout(20)
    marks: list[float] = page.evaluate(MARKS_JS, SEEN_MARK)
    early = next((m - t0 for m in marks if m >= t0), None)
    if not found:
        return Switch(None, early, None)
    mark, _ = found
    views = page.evaluate(VIEWS_JS, [t0, mark])
    return Switch(mark - t0, early, phases(page, t0, mark), views, None if every is None else every[0] - t0)


def profiled(page: Page, action: Callable[[], object], top: int = 8) -> list[tuple[float, str]]:
    """Run `action` under Chromium's sampling JS profiler (CDP); the functions with the most self time, in ms.

    "(program)" is the renderer's own work outside JS (style, layout, paint, parsing), "(garbage collector)" GC.
    """
    cdp = page.context.new_cdp_session(page)
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 500})
    cdp.send("Profiler.start")
    try:
        action()
    finally:
        prof = cdp.send("Profiler.stop")["profile"]
        cdp.detach()
    nodes = {n["id"]: n["callFrame"] for n in prof["nodes"]}
    self_us: dict[str, float] = {}
    for node, dt in zip(prof["samples"], prof["timeDeltas"], strict=False):
        f = nodes[node]
        where = f["url"].rsplit("/", 1)[-1]
        line = f["lineNumber"] + 1
        name = f"{f['functionName'] or '(anonymous)'}" + (f" {where}:{line}" if where else "")
        self_us[name] = self_us.get(name, 0.0) + dt
    ranked = sorted(self_us.items(), key=lambda kv: -kv[1])
    return [(us / 1000, name) for name, us in ranked if name != "(idle)"][:top]
