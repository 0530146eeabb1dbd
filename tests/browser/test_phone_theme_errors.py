"""The page at length and on touch (issue 20): the controls drawer on a phone, the charts in the dark theme, a failed
run told once where the person acted, and fields that keep what was typed when it is refused."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import wait_idle

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
CHARTS = "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&heads=4&seed=3&causal=1&dec=2&pert=3,direction,1"
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def phone(browser: Browser, live_server: str) -> Iterator[Callable[[str], Page]]:
    """A phone: 390 px wide, touch, a mobile viewport; opens attnlab at `query` and waits for the heads."""
    contexts: list[BrowserContext] = []

    def open_(query: str = RANDOM) -> Page:
        ctx = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True, device_scale_factor=2)
        contexts.append(ctx)
        page = ctx.new_page()
        page.goto(f"{live_server}/{query}")
        wait_idle(page)
        return page

    yield open_
    for ctx in contexts:
        ctx.close()


def tap(page: Page, selector: str) -> None:
    box = page.locator(selector).bounding_box()
    assert box, selector
    page.touchscreen.tap(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def hit(page: Page, x: float, y: float) -> str:
    """What a finger at (x, y) lands on: the element there, as '#id' or its tag and class."""
    return str(
        page.evaluate(
            """([x, y]) => { const e = document.elementFromPoint(x, y);
                 return e ? (e.id ? '#' + e.id : e.tagName.toLowerCase() + '.' + e.className) : ''; }""",
            [x, y],
        )
    )


def drawer_open(page: Page) -> bool:
    return bool(page.evaluate("() => getComputedStyle(document.getElementById('controls')).visibility === 'visible'"))


def open_drawer(page: Page) -> None:
    tap(page, "#controls-toggle")
    expect(page.locator("#controls-toggle")).to_have_attribute("aria-expanded", "true")
    expect(page.get_by_test_id("run-button")).to_be_visible()
    settled(page)


def settled(page: Page) -> None:
    """Wait until the drawer's slide (a CSS transition) has ended: a tap lands where the person sees the button."""
    page.wait_for_function("() => document.getAnimations().length === 0")


# ---- the charts in the dark theme ----


def rgb(css: str) -> tuple[float, ...]:
    css = css.strip()
    if css.startswith("#"):
        h = css[1:]
        if len(h) == 3:
            h = "".join(c * 2 for c in h)
        return tuple(int(h[i : i + 2], 16) for i in (0, 2, 4))
    return tuple(float(v) for v in re.findall(r"[\d.]+", css)[:3])


def luminance(css: str | list[int]) -> float:
    r, g, b = rgb(css) if isinstance(css, str) else css[:3]
    lin = [(c / 255 / 12.92) if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


CHART_COLOURS = """() => {
  const fill = (el) => getComputedStyle(el).fill;
  const panel = getComputedStyle(document.querySelector('#claims-panel')).backgroundColor;
  const px = (canvas, fx, fy) => {
    const ctx = canvas.getContext('2d');
    return Array.from(ctx.getImageData(Math.floor(canvas.width * fx), Math.floor(canvas.height * fy), 1, 1).data);
  };
  const cost = document.querySelector('#cost-panel .js-plotly-plot');
  return {
    panel,
    labels: [...document.querySelectorAll('.delta-chart .dc-label')].map(fill),
    ticks: [...document.querySelectorAll('.delta-chart .dc-tick')].map(fill),
    hatch: [...document.querySelectorAll('.dc-defs pattern rect')].map(fill),
    future: [...document.querySelectorAll('.dec-strip .dec-future')].map(fill),
    stepTicks: [...document.querySelectorAll('.dec-strip .dec-tick:not(.future)')].map(fill),
    // an empty slot of the cache (its last row) and of a head's mini strip (its last key)
    cacheSlot: px(document.querySelector('.kv-block canvas'), 0.5, 0.97),
    miniSlot: px(document.querySelector('.dec-mini canvas'), 0.97, 0.5),
    costPaper: getComputedStyle(cost.querySelector('.main-svg')).backgroundColor,
    costTicks: [...cost.querySelectorAll('.xtick text, .ytick text')].map(fill),
    costGrid: [...cost.querySelectorAll('.gridlayer path')].map((p) => getComputedStyle(p).stroke).slice(0, 1),
    modebar: cost.layout.modebar || null,
    costBg: cost.layout.paper_bgcolor,
  };
}"""


def wait_charts(page: Page) -> None:
    page.wait_for_selector("#kv-cache:not([hidden]) .kv-block canvas", timeout=60_000)
    page.wait_for_selector("#perturb-verdict:not([hidden])", timeout=60_000)
    page.wait_for_selector(".delta-chart .dc-label", timeout=60_000)
    page.wait_for_selector("#cost-panel .js-plotly-plot .xtick text", timeout=60_000)


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_every_chart_follows_the_theme(page: Page, open_page: Callable[..., Page], scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    open_page(CHARTS)
    wait_charts(page)
    c = page.evaluate(CHART_COLOURS)
    dark = scheme == "dark"
    assert (luminance(c["panel"]) < 0.05) == dark, c["panel"]
    # the claim chart's "layer 0" / "final" labels and its position ticks read on the panel
    assert c["labels"] and all(contrast(f, c["panel"]) >= 4.5 for f in c["labels"]), c["labels"]
    assert c["ticks"] and all(contrast(f, c["panel"]) >= 3 for f in c["ticks"]), c["ticks"]
    assert c["stepTicks"] and all(contrast(f, c["panel"]) >= 4.5 for f in c["stepTicks"]), c["stepTicks"]
    assert c["costTicks"] and all(contrast(f, c["panel"]) >= 4.5 for f in c["costTicks"]), c["costTicks"][:3]
    # grounds: the protected bands, the slots still to come, the cache's empty room and the cost plot sit on the
    # panel's side of the theme, never a white rectangle on a dark page
    grounds = [*c["hatch"], *c["future"], c["costPaper"], c["costBg"], c["cacheSlot"], c["miniSlot"]]
    for g in grounds:
        assert (luminance(g) < 0.1) == dark, (g, grounds)
    assert all(contrast(g, c["panel"]) < 1.6 for g in c["costGrid"])  # rules stay quiet
    # the mode bar, if a plot shows one, draws its icons in an ink that reads on that ground
    assert c["modebar"] and contrast(c["modebar"]["color"], c["costBg"]) >= 3


def test_dark_charts_look_right(page: Page, open_page: Callable[..., Page], tmp_path_factory: Any) -> None:
    """Screenshots of the charts in the dark theme, for a person to look at (kept under the test's tmp folder)."""
    page.emulate_media(color_scheme="dark")
    open_page(CHARTS + "&abl=0.1.zero")
    wait_charts(page)
    page.wait_for_selector("[data-testid=intervention-result] .delta-chart", timeout=60_000)
    out = tmp_path_factory.mktemp("dark")
    for name in ("decode-panel", "claims-panel", "intervene-panel", "cost-panel"):
        page.locator(f"#{name}").screenshot(path=str(out / f"{name}.png"))
    panel = page.evaluate("() => getComputedStyle(document.querySelector('#intervene-panel')).backgroundColor")
    labels = page.evaluate(
        "() => [...document.querySelectorAll('#intervene-panel .dc-label')].map((e) => getComputedStyle(e).fill)"
    )
    assert labels and all(contrast(f, panel) >= 4.5 for f in labels), labels
