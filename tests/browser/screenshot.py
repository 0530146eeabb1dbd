"""Take the screenshots of the README and the guide (docs/*.png) from a running attnlab (minilm and induction
loaded for the last one).

.venv/bin/attnlab serve --port 8123 --models textbook,random,custom,minilm,induction &
.venv/bin/python -m tests.browser.screenshot http://127.0.0.1:8123
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from tests.helpers import CHROMIUM, CHROMIUM_ARGS

DOCS = Path(__file__).resolve().parents[2] / "docs"
VIEWS = {
    "screenshot.png": "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&d_model=64&heads=4&seed=3"
    "&positions=1&causal=1&pad=9&block=8-1&focus=0.1&query=8",
    "screenshot-textbook.png": "?m=textbook&t=x1+x2+x3+x4+x5&causal=1&pad=4&query=3",
}
# minilm on "it ... animal": the head-types table, the top heads for it -> animal, and the best of them large
MINILM = (
    "?m=minilm&t=The+animal+didn%27t+cross+the+street+because+it+was+too+tired"
    "&layer=5&focus=5.11&query=10&pair=10-2&hsort=previous_token"
)


def settle(page: Page) -> None:
    """Wait until every view of the result is painted and no run or panel is in flight."""
    page.wait_for_selector("[data-testid=head-heatmap]")
    page.wait_for_function(
        "() => performance.getEntriesByName('attnlab:drawn').length > 0"
        " && document.getElementById('views').getAttribute('aria-busy') === 'false'"
        " && !document.querySelector('#headtypes-panel[data-state=loading]')"
    )
    page.mouse.move(0, 0)


def minilm(page: Page, base: str) -> None:
    page.goto(f"{base}/{MINILM}")
    settle(page)
    page.wait_for_selector("#headtypes-panel[data-state=ready]")
    page.wait_for_selector("[data-testid=top-heads]")
    page.evaluate("document.querySelector('.ht-scroll').scrollTop = 0")
    top = page.locator("#views > .two").first.bounding_box()
    bottom = page.locator("#views > .two-types").bounding_box()
    views = page.locator("#views").bounding_box()
    assert top and bottom and views
    y0 = top["y"] - 6
    height = bottom["y"] + bottom["height"] - y0
    clip = {"x": views["x"] - 6, "y": y0, "width": views["width"] + 12, "height": height}
    page.screenshot(path=str(DOCS / "screenshot-minilm.png"), clip=clip, full_page=True)


# a phone (390 px: the controls in their drawer, the views stacked) and the dark theme
PHONE = "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&heads=4&seed=3&causal=1&pad=9&focus=0.1&query=8"
DARK = "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&heads=4&seed=3&causal=1&view=scores&focus=0.2&query=8"


REPEAT = "+".join(["red", "ball", "king", "river", "frog", "clock", "seed", "moon", "hat", "rain", "snow", "duck"] * 2)
# the experiment and mechanics panels, each cut out of the page once its answer is drawn
PANELS = {
    "screenshot-claim.png": (
        "?m=minilm&t=The+animal+didn%27t+cross+the+street+because+it+was+too+tired&causal=1&layer=0&pert=10,shift,1",
        "#claims-panel",
        "#perturb-verdict:not([hidden])",
    ),
    "screenshot-interventions.png": (
        f"?m=induction&t={REPEAT}&layer=1&abl=1.0.zero,1.1.zero,1.2.zero,1.3.zero",
        "#intervene-panel",
        "[data-testid=intervention-result]",
    ),
    "screenshot-decode.png": (f"?m=induction&t={REPEAT}&dec=19", "#decode-panel", "#kv-cache:not([hidden])"),
}


def panels(page: Page, base: str) -> None:
    for name, (query, panel, ready) in PANELS.items():
        page.goto(f"{base}/{query}")
        settle(page)
        page.wait_for_selector(ready, timeout=60_000)
        page.locator(panel).screenshot(path=str(DOCS / name))


def main(base: str) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name, query in VIEWS.items():
            page.goto(f"{base}/{query}")
            settle(page)
            page.screenshot(path=str(DOCS / name))
        minilm(page, base)
        panels(page, base)
        phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=1)
        phone.goto(f"{base}/{PHONE}")
        settle(phone)
        phone.screenshot(path=str(DOCS / "screenshot-phone.png"))
        dark = browser.new_page(viewport={"width": 1400, "height": 900}, color_scheme="dark")
        dark.goto(f"{base}/{DARK}")
        settle(dark)
        dark.screenshot(path=str(DOCS / "screenshot-dark.png"))
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8123")
