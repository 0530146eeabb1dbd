"""Take docs/screenshot.png (random, 4 heads) and docs/screenshot-textbook.png from a running attnlab.

.venv/bin/attnlab serve --port 8123 --models textbook,random,custom &
.venv/bin/python -m tests.browser.screenshot http://127.0.0.1:8123
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

DOCS = Path(__file__).resolve().parents[2] / "docs"
VIEWS = {
    "screenshot.png": "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&d_model=64&heads=4&seed=3"
    "&positions=1&causal=1&pad=9&block=8-1&focus=0.1&query=8",
    "screenshot-textbook.png": "?m=textbook&t=x1+x2+x3+x4+x5&causal=1&pad=4&query=3",
}


def main(base: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name, query in VIEWS.items():
            page.goto(f"{base}/{query}")
            page.wait_for_selector("[data-testid=head-heatmap]")
            page.wait_for_function("document.getElementById('views').getAttribute('aria-busy') === 'false'")
            page.wait_for_timeout(500)
            page.screenshot(path=str(DOCS / name))
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8123")
