"""The README's picture of the induction head forming (docs/screenshot-train.png), from a real run: an `attnlab
serve` of its own (its runs kept in a temporary directory), the Train workspace in headless Chromium, the
ready-made experiment "The induction head forms" started by its button and followed to its end, then the 2-layer
run's column (curves with the phase change marked, every head's map of the probe at the last snapshot) captured.

.venv/bin/python -m bench.train_picture          (a few minutes on 2 cores: two runs of 1000 steps, one after the other)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshot-train.png"
EXPERIMENT = "induction-head"


def main() -> int:
    with tempfile.TemporaryDirectory() as data, serve("textbook", ATTNLAB_DATA_DIR=data) as base:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{base}/?ws=train")
            page.locator(f"[data-testid=train-exp-{EXPERIMENT}]").click()
            claim = page.locator("[data-testid=train-claim]")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=train-claim]').dataset.held", timeout=900_000
            )
            print(claim.inner_text())  # noqa: T201
            column = page.locator("[data-testid=train-col-a]")
            column.scroll_into_view_if_needed()
            column.screenshot(path=str(OUT))
            browser.close()
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
