"""The README's picture of the Vision workspace (docs/screenshot-vision.png), from a real run: an `attnlab serve` of
its own with the trained `digits` model, the Vision workspace in headless Chromium, a shipped digit shown and one
of its patches clicked, so that the image shows its attention as veils and every head of the last layer sits below
it as a thumbnail, then each patch patched in from a second digit, layer by layer; the workspace's panel captured.

.venv/bin/python -m bench.vision_picture          (a few seconds)
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import FloatRect, sync_playwright

from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshot-vision.png"
DIGIT = 3
PATCH = 7  # p(1,2): on the digit's stroke
OTHER = 8  # the second digit patched from
# the panel's box on the page (not the viewport), for a full-page clip
BOX_JS = """() => {
  const r = document.querySelector('section[data-view=vision]').getBoundingClientRect();
  return { x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height };
}"""


def main() -> int:
    with serve("textbook,digits") as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(f"{base}/?ws=vision")
        page.wait_for_selector("[data-testid=vision-image] [data-token]")
        page.locator("[data-testid=vision-digit]").fill(str(DIGIT))
        page.locator("[data-testid=vision-digit-go]").click()
        page.wait_for_function(
            "(name) => document.querySelector('[data-testid=vision-status]').textContent.includes(name)",
            arg=f"digit-{DIGIT}:",
        )
        page.locator(f"[data-testid=vision-image] [data-token='{PATCH}']").click()
        print(page.locator("[data-testid=vision-readout]").inner_text())
        page.locator("[data-testid=vision-corrupt]").fill(str(OTHER))
        page.locator("[data-testid=vision-patch]").click()
        page.wait_for_selector("[data-testid=vision-patching] figure")
        print(page.locator("[data-testid=vision-patch-line]").inner_text())
        box = page.evaluate(BOX_JS)
        clip: FloatRect = {"x": box["x"], "y": box["y"], "width": box["width"], "height": box["height"]}
        page.screenshot(path=str(OUT), full_page=True, clip=clip)
        browser.close()
    print(f"wrote {OUT} ({OUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
