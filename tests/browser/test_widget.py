"""attnlab.show's widget for real: JupyterLab (this environment's, started by the test on a loopback port with a
token, a temporary root, settings and workspace folder, no browser of its own, nothing fetched) driven in Chromium
with every request that leaves the loopback address refused. A notebook shows a tiny model's widget; a head pressed
in it is read back in the kernel, `w.head = 2` set in the kernel redraws it, and the causal mask switched off in it
is run again in the kernel and drawn, as is a cell pressed and blocked in it. And the widget's fallback, its
output's text/html, opened offline, draws."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import BrowserContext, Page, Route

import attnlab
from tests.browser.test_export import hover_cell
from tests.helpers import until
from tests.jupyter import jupyterlab, notebook, open_notebook, run_cell

pytestmark = pytest.mark.browser

MODEL = {"model": "induction", "text": "red ball king river red ball king river"}
CELLS = [
    f"import attnlab\nw = attnlab.show({MODEL['model']!r}, {MODEL['text']!r}, layer=1)\nw",
    "print('read', w.head, w.view, w.selected)",
    "w.head = 2",
    "print('masks', w.causal, w.result['masks']['causal'], w.blocked, w.selected['key'], w.error or 'ok')",
]


def printed(page: Page, n: int, start: str) -> str:
    """The line cell `n` printed that starts with `start`, once it has."""
    out = run_cell(page, n).locator(".jp-OutputArea-output", has_text=start)
    out.wait_for(timeout=60_000)
    return out.inner_text().strip()


def test_the_widget_talks_both_ways_in_jupyterlab_and_falls_back_offline(
    context: BrowserContext, page: Page, tmp_path: Path
) -> None:
    """One JupyterLab, one page load (JupyterLab's start is the cost): while it starts, the fallback is opened."""
    left: list[str] = []

    def loopback_only(route: Route) -> None:
        url = route.request.url
        if urlparse(url).hostname == "127.0.0.1" or url.startswith(("blob:", "data:", "file:")):
            route.continue_()
        else:
            left.append(route.request.url)
            route.abort()

    context.route("**/*", loopback_only)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    notebook(tmp_path / "widget.ipynb", CELLS)
    with jupyterlab(tmp_path, preload="import attnlab.widget\n") as ready:
        fallback_draws(page, tmp_path)
        base = ready()
        open_notebook(page, base, "widget.ipynb")
        run_cell(page, 0)
        # the widget, in its shadow root (Playwright's locators see into an open one): the heads of layer 1
        widget = page.locator(".jp-OutputArea-output [data-drawn]")
        widget.wait_for(timeout=90_000)
        assert errors == [], errors
        card = page.locator("[data-testid=head-heatmap][data-layer='1'][data-head='3']")
        card.wait_for()
        card.locator("canvas").click()  # a head pressed: it opens large, and the kernel's w.head follows
        large = page.locator(".sa-large[data-testid=head-heatmap]")
        large.wait_for()
        assert large.get_attribute("data-head") == "3"
        read = printed(page, 1, "read")
        assert read.startswith("read 3 head {"), read
        assert "'layer': 1, 'head': 3" in read and "'key': " in read

        run_cell(page, 2)  # w.head = 2 in the kernel: the view redraws on head 2
        page.locator(".sa-large[data-testid=head-heatmap][data-head='2']").wait_for(timeout=30_000)

        # the induction model masks causally: query 0 may not see key 7; switched off in the widget, the kernel runs
        # the model again and the view draws the new weights
        cell = ".sa-large[data-testid=head-heatmap]"
        page.locator(cell).scroll_into_view_if_needed()
        assert "masked (causal)" in hover_cell(page, cell, 0, 7)
        drawn = widget.get_attribute("data-drawn")
        page.locator("#sa-causal").uncheck()
        until(lambda: widget.get_attribute("data-drawn") != drawn, "the widget draws the recomputed weights")
        after = hover_cell(page, cell, 0, 7)
        assert "masked" not in after and "weight 0." in after, after
        # a cell pressed in the large head is `selected`; "Block pressed cell" blocks it: recomputed in the kernel
        hover_cell(page, cell, 0, 7)
        page.mouse.down()
        page.mouse.up()
        drawn = widget.get_attribute("data-drawn")
        page.locator("#sa-block").click()
        until(lambda: widget.get_attribute("data-drawn") != drawn, "the widget draws the cell blocked")
        assert "masked (blocked)" in hover_cell(page, cell, 0, 7)
        assert printed(page, 3, "masks") == "masks False False [[0, 7]] 7 ok"
    assert left == [] and errors == [], (left, errors)


def fallback_draws(page: Page, tmp_path: Path) -> None:
    """Where widgets cannot run, the widget's output is its text/html: the standalone page in a sandboxed iframe,
    which draws offline (the test's routes refuse every request but a file's and the loopback's)."""
    w = attnlab.show(MODEL["model"], MODEL["text"], layer=1, view="head", head=3, query=5)
    data, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    host = tmp_path / "static-notebook.html"
    host.write_text(f"<!doctype html><html><body><h1>a notebook</h1>{data['text/html']}</body></html>")
    page.goto(host.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("[data-testid=retrieval-diagram][data-query='5']").wait_for(timeout=30_000)
    large = frame.locator("[data-testid=head-heatmap]")
    assert large.get_attribute("data-layer") == "1" and large.get_attribute("data-head") == "3"
