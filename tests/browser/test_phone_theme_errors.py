"""The page at length and on touch (issue 20): the controls drawer on a phone, the charts in the dark theme, a failed
run told once where the person acted, and fields that keep what was typed when it is refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import pytest
from playwright.sync_api import FloatRect, Page, expect

from tests.browser.conftest import PHONE, Device, open_workspace, wait_idle
from tests.browser.inview import focus_covered

pytestmark = pytest.mark.browser

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"
CHARTS = "?m=random&t=the+cat+sat+on+the+mat+because+it+was+warm&heads=4&seed=3&causal=1&dec=2&pert=3,direction,1"


@pytest.fixture
def phone(tab_on: Callable[[Device], Page], live_server: str) -> Callable[[str], Page]:
    """A phone: 390 px wide, touch, a mobile viewport; opens attnlab at `query` and waits for the heads."""

    def open_(query: str = RANDOM) -> Page:
        page = tab_on(PHONE)
        page.goto(f"{live_server}/{query}")
        wait_idle(page)
        return page

    return open_


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
    page.locator("#controls-toggle").scroll_into_view_if_needed()  # an example opens scrolled to its answer
    tap(page, "#controls-toggle")
    expect(page.locator("#controls-toggle")).to_have_attribute("aria-expanded", "true")
    expect(page.get_by_test_id("run-button")).to_be_visible()
    settled(page)


def settled(page: Page) -> None:
    """Wait until the drawer's slide (a CSS transition) has ended: a tap lands where the person sees the button."""
    page.wait_for_function("() => document.getAnimations().length === 0")


# ---- the drawer on a phone ----


def test_phone_drawer_has_a_close_button_on_screen_that_returns_focus(phone: Callable[[str], Page]) -> None:
    page = phone(RANDOM)
    open_drawer(page)
    close = page.locator("#controls-close")
    expect(close).to_be_visible()
    box = close.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE.width and box["y"] >= 0
    assert box["height"] >= 44 and box["width"] >= 44  # a finger's target
    assert hit(page, box["x"] + box["width"] / 2, box["y"] + box["height"] / 2) == "#controls-close"
    tap(page, "#controls-close")
    expect(page.get_by_test_id("run-button")).to_be_hidden()
    expect(page.locator("#controls-toggle")).to_have_attribute("aria-expanded", "false")
    expect(page.locator("#controls-toggle")).to_be_focused()


def test_phone_drawer_closes_on_a_tap_beside_it(phone: Callable[[str], Page]) -> None:
    page = phone(RANDOM)
    open_drawer(page)
    drawer = page.locator("#controls").bounding_box()
    assert drawer and drawer["x"] + drawer["width"] < PHONE.width - 40  # room left to tap beside it
    x, y = PHONE.width - 20, 500
    assert hit(page, x, y) == "#drawer-scrim"  # the views under it take no tap while it is open
    page.touchscreen.tap(x, y)
    expect(page.get_by_test_id("run-button")).to_be_hidden()
    assert not drawer_open(page)
    expect(page.locator("#controls-toggle")).to_be_focused()


def test_phone_drawer_closes_after_an_example_and_after_run(phone: Callable[[str], Page]) -> None:
    page = phone(RANDOM)
    open_drawer(page)
    example = page.locator("#example-select option").nth(1).get_attribute("value")
    assert example
    with page.expect_response(lambda r: r.url.endswith("/api/attention")):
        page.locator("#example-select").select_option(example)
    wait_idle(page)
    assert not drawer_open(page)
    # the result is what the person sees: the first head is on screen, nothing over it
    head = page.get_by_test_id("head-heatmap").first
    head.scroll_into_view_if_needed()
    box = head.bounding_box()
    assert box
    assert "controls" not in hit(page, box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    open_drawer(page)
    page.get_by_test_id("sequence-input").fill("a b c d")
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        tap(page, "#run-button")
    body = sent.value.post_data_json
    assert body and body["text"] == "a b c d"
    wait_idle(page)
    assert not drawer_open(page)


def test_phone_drawer_never_hides_the_focused_control_under_its_head(phone: Callable[[str], Page]) -> None:
    """Going back up the drawer with the keyboard, each control is scrolled to below the drawer's sticky head, not
    under it."""
    page = phone(RANDOM)
    open_drawer(page)
    page.locator("#controls-close").focus()
    page.keyboard.press("Shift+Tab")  # round to the drawer's last control, at its bottom
    seen, hidden = [], []
    while (focused := page.evaluate("() => document.activeElement.id || document.activeElement.tagName")) != (
        "controls-close"
    ):
        seen.append(focused)
        assert len(seen) < 80, f"Shift+Tab never reached the drawer's head: {seen}"
        if (what := focus_covered(page)) is not None:
            hidden.append(what)
        page.keyboard.press("Shift+Tab")
    assert len(seen) > 20 and "run-button" in seen and "model-select" in seen, seen
    assert hidden == [], hidden


def test_phone_drawer_keeps_focus_inside_and_escape_gives_it_back(phone: Callable[[str], Page]) -> None:
    page = phone(RANDOM)
    open_drawer(page)
    expect(page.get_by_test_id("model-select")).to_be_focused()
    inside = "() => document.getElementById('controls').contains(document.activeElement)"
    page.keyboard.press("Shift+Tab")
    expect(page.locator("#controls-close")).to_be_focused()
    page.keyboard.press("Shift+Tab")  # from the first stop to the last, not out into the page
    assert page.evaluate(inside)
    for _ in range(60):  # round the whole drawer and past its end: focus never leaves it
        page.keyboard.press("Tab")
        assert page.evaluate(inside), page.evaluate("() => document.activeElement.outerHTML.slice(0, 120)")
    page.keyboard.press("Escape")
    assert not drawer_open(page)
    expect(page.locator("#controls-toggle")).to_be_focused()
    # closed: the views take taps and focus again
    assert page.evaluate("() => !document.getElementById('views').inert")


# ---- a failed run, told once ----


VISIBLE_TEXT_WITH = """(words) => {
  const found = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  // seen: laid out, not hidden, and no element around it clipped to a pixel (a visually hidden live region)
  const seen = (el) => {
    if (!el.checkVisibility({ visibilityProperty: true, opacityProperty: true })) return false;
    for (let e = el; e; e = e.parentElement) {
      const r = e.getBoundingClientRect();
      if (r.width <= 2 || r.height <= 2) return false;
    }
    return true;
  };
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.textContent.includes(words) && seen(n.parentElement)) found.push(n.parentElement.closest('[id]')?.id || '?');
  }
  return found;
}"""


def shown(page: Page, words: str) -> list[str]:
    """The elements that show `words` to a sighted person (a visually hidden live region does not count)."""
    return list(page.evaluate(VISIBLE_TEXT_WITH, words))


def overlap(a: FloatRect | None, b: FloatRect | None) -> bool:
    assert a and b
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def test_an_error_is_shown_once_beside_the_field_which_keeps_what_was_typed(
    open_page: Callable[..., Page], run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    page = open_page(RANDOM)
    page.set_viewport_size({"width": 1440, "height": 900})
    layout_top = page.locator(".layout").bounding_box()
    page.locator("#opt-heads").fill("7")
    run_and_wait(lambda: page.locator("#opt-heads").dispatch_event("change"))
    note = page.get_by_test_id("action-error")
    expect(note).to_contain_text("width must divide by heads")
    assert shown(page, "must divide by heads") == ["action-error"]
    # the live region still says it, and the page did not move down for it
    banner = page.get_by_test_id("error-banner")
    expect(banner).to_have_attribute("role", "alert")
    expect(banner).to_contain_text("width must divide by heads")
    after = page.locator(".layout").bounding_box()
    assert layout_top and after and after["y"] == layout_top["y"]
    # the box keeps the 7 the message is about, marked; the views and the link are the last run that worked
    expect(page.locator("#opt-heads")).to_have_value("7")
    expect(page.locator("#opt-heads")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_test_id("head-heatmap")).to_have_count(4)
    assert "heads=7" not in page.url
    # the message sits under the fields, over none of their labels
    for label in page.locator("#random-options label").all():
        assert not overlap(note.bounding_box(), label.bounding_box()), label.inner_text()
    page.locator("#opt-heads").fill("8")
    run_and_wait(lambda: page.locator("#opt-heads").dispatch_event("change"))
    expect(note).to_have_count(0)
    expect(page.locator("#opt-heads")).to_have_value("8")
    expect(page.locator("#opt-heads")).not_to_have_attribute("aria-invalid", "true")


def test_phone_an_error_in_the_closed_drawer_floats_a_line_that_opens_it(phone: Callable[[str], Page]) -> None:
    page = phone(RANDOM)
    open_drawer(page)
    page.locator("#opt-heads").fill("7")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")):
        page.locator("#opt-heads").press("Tab")  # the box's change, as a person leaves it
    wait_idle(page)
    assert shown(page, "must divide by heads") == ["action-error"]  # beside the field, in the open drawer
    page.keyboard.press("Escape")
    settled(page)
    # the drawer closed over the message: the live region's line floats on screen instead, over nothing it pushes
    banner = page.get_by_test_id("error-banner")
    expect(banner).to_be_visible()
    assert shown(page, "must divide by heads") == ["error-message"]
    box = banner.bounding_box()
    assert box and box["y"] + box["height"] <= PHONE.height and box["width"] <= PHONE.width
    tap(page, "#error-banner [data-role=show]")
    settled(page)
    assert drawer_open(page)
    expect(page.get_by_test_id("action-error")).to_be_in_viewport()
    assert shown(page, "must divide by heads") == ["action-error"]
    # the message's own ✕, a finger's target on screen, puts it away (the banner's ✕ is hidden with the banner)
    dismiss = page.get_by_test_id("action-error-dismiss")
    box = dismiss.bounding_box()
    assert box and box["width"] >= 44 and box["height"] >= 44
    assert box["x"] >= 0 and box["y"] >= 0 and box["y"] + box["height"] <= PHONE.height
    assert hit(page, box["x"] + box["width"] / 2, box["y"] + box["height"] / 2) == "button.act-error-dismiss"
    tap(page, "[data-testid=action-error-dismiss]")
    expect(page.get_by_test_id("action-error")).to_have_count(0)
    expect(banner).to_be_hidden()
    expect(page.locator("#opt-heads")).to_have_value("4")  # back at the run the views show


def test_an_emptied_matrix_cell_is_an_error_at_that_cell(
    open_page: Callable[..., Page], run_and_wait: Callable[[Callable[[], None]], dict[str, Any]]
) -> None:
    page = open_page()  # textbook: causal, so padding position 0 leaves query 0 no key: a stale error to start with
    run_and_wait(lambda: page.get_by_test_id("token").nth(0).click())
    expect(page.get_by_test_id("action-error")).to_contain_text("no eligible key")
    page.locator("#textbook-matrices summary").click()
    cell = page.get_by_label("X row 1 column 1", exact=True)
    cell.fill("")
    cell.dispatch_event("change")
    message = page.get_by_test_id("matrix-error")
    expect(message).to_be_visible()
    expect(message).to_contain_text("X row 1 column 1 is empty")
    expect(cell).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_test_id("action-error")).to_have_count(0)  # the stale error no longer stands for this one
    # the page redraws (another control, focus gone from the cell): the cell stays empty, marked, named
    page.locator("input[name=view][value=scores]").check()
    expect(cell).to_have_value("")
    expect(cell).to_have_attribute("aria-invalid", "true")
    expect(message).to_contain_text("X row 1 column 1 is empty")
    # a number there clears it and runs
    cell.fill("0.5")
    body = run_and_wait(lambda: cell.dispatch_event("change"))
    assert body["x"][0][0] == 0.5
    expect(message).to_be_hidden()
    expect(page.get_by_label("X row 1 column 1", exact=True)).not_to_have_attribute("aria-invalid", "true")
    expect(page.get_by_test_id("error-banner")).to_be_hidden()


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
    """The decoding and cost charts (Mechanics), then the claim's (Test), each drawn in its workspace."""
    open_workspace(page, "mechanics")
    page.wait_for_selector("#kv-cache:not([hidden]) .kv-block canvas", timeout=60_000)
    page.wait_for_selector("#cost-panel .js-plotly-plot .xtick text", timeout=60_000)
    open_workspace(page, "test")
    page.wait_for_selector("#perturb-verdict:not([hidden])", timeout=60_000)
    page.wait_for_selector(".delta-chart .dc-label", timeout=60_000)


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_every_chart_follows_the_theme(
    page: Page, open_page: Callable[..., Page], scheme: Literal["dark", "light"]
) -> None:
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
    for ws, names in (("test", ("claims-panel", "intervene-panel")), ("mechanics", ("decode-panel", "cost-panel"))):
        open_workspace(page, ws)
        for name in names:
            page.locator(f"#{name}").screenshot(path=str(out / f"{name}.png"))
    panel = page.evaluate("() => getComputedStyle(document.querySelector('#intervene-panel')).backgroundColor")
    labels = page.evaluate(
        "() => [...document.querySelectorAll('#intervene-panel .dc-label')].map((e) => getComputedStyle(e).fill)"
    )
    assert labels and all(contrast(f, panel) >= 4.5 for f in labels), labels
