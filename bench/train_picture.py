"""The README's picture of the induction head forming (docs/screenshot-train.png), from a real run: an `attnlab
serve` of its own (its runs kept in a temporary directory), the Train workspace in headless Chromium, the
ready-made experiment "The induction head forms" started by its button and followed to its end, then the 2-layer
and 1-layer runs' columns side by side (every head's map of the probe at the last snapshot, the first curves with the
phase change marked) captured.

.venv/bin/python -m bench.train_picture          (a few minutes on 2 cores: two runs of 1000 steps, one after the other)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import FloatRect, sync_playwright

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshot-train.png"
EXPERIMENT = "induction-head"
HEIGHT = 760  # px of the columns kept
# the two columns' box on the page (not the viewport), for a full-page clip
BOX_JS = """() => {
  const r = document.querySelector('.train-columns').getBoundingClientRect();
  return { x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height };
}"""


def main() -> int:
    with (
        tempfile.TemporaryDirectory() as data,
        serve("textbook", ATTNLAB_DATA_DIR=data) as base,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{base}/?ws=train")
        page.locator(f"[data-testid=train-exp-{EXPERIMENT}]").click()
        claim = page.locator("[data-testid=train-claim]")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=train-claim]').dataset.held", timeout=900_000
        )
        print(claim.inner_text())
        # both columns' heads and their first rows of curves: the loss and induction score with the phase change
        box = page.evaluate(BOX_JS)
        clip: FloatRect = {"x": box["x"], "y": box["y"], "width": box["width"], "height": min(box["height"], HEIGHT)}
        page.screenshot(path=str(OUT), full_page=True, clip=clip)
        browser.close()
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
