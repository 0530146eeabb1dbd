"""attnlab.show's widget for real: JupyterLab (this environment's, started by the test on a loopback port with a
token, a temporary root, settings and workspace folder, no browser of its own, nothing fetched) driven in Chromium
with every request that leaves the loopback address refused. A notebook shows a tiny model's widget; a head pressed
in it is read back in the kernel, `w.head = 2` set in the kernel redraws it, and the causal mask switched off in it
is run again in the kernel and drawn. And the widget's fallback, its output's text/html, opened offline, draws."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import BrowserContext, Locator, Page, Route

import attnlab
from tests.browser.test_export import hover_cell
from tests.helpers import ROOT, free_port, until

pytestmark = pytest.mark.browser

TOKEN = "attnlab-widget-test"
# server extensions installed beside JupyterLab that a notebook does not need: not loaded, for a faster start
UNNEEDED = ("jupyter_lsp", "jupyter_server_terminals", "notebook_shim")
MODEL = {"model": "induction", "text": "red ball king river red ball king river"}
CELLS = [
    f"import attnlab\nw = attnlab.show({MODEL['model']!r}, {MODEL['text']!r}, layer=1)\nw",
    "print('read', w.head, w.view, w.selected)",
    "w.head = 2",
    "print('masks', w.causal, w.result['masks']['causal'], w.error or 'ok')",
]


@contextmanager
def jupyterlab(root: Path) -> Iterator[Callable[[], str]]:
    """JupyterLab on a free loopback port, serving `root`, started at once; yields a call that waits until it
    answers and returns its base URL (what the test does meanwhile overlaps its start). Its config, data, runtime,
    settings and workspaces are folders of the test's own; the kernels it starts import attnlab from this checkout.
    Only the server extensions JupyterLab needs are loaded."""
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="attnlab-lab-"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "ATTNLAB_DEVICE": "cpu",
    }
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        f"--IdentityProvider.token={TOKEN}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        f"--LabApp.user_settings_dir={home / 'settings'}",
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        "--ServerApp.jpserver_extensions=" + json.dumps(dict.fromkeys(UNNEEDED, False)).replace("false", "False"),
    ]
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)

        def up() -> bool:
            assert proc.poll() is None, f"JupyterLab exited with {proc.returncode}:\n{tail(log)}"
            try:
                return httpx.get(f"{base}/api/status", params={"token": TOKEN}, timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        def ready() -> str:
            until(up, "JupyterLab answers /api/status", 120)
            return base

        try:
            yield ready
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-4000:]


def notebook(path: Path) -> None:
    cells = [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in CELLS]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.write_text(
        json.dumps({"cells": cells, "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5})
    )


def run_cell(page: Page, n: int) -> Locator:
    """Run the notebook's cell `n` (press Shift+Enter in its editor); its output area."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(n)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    return cell.locator(".jp-OutputArea")


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
    notebook(tmp_path / "widget.ipynb")
    with jupyterlab(tmp_path) as ready:
        fallback_draws(page, tmp_path)
        base = ready()
        page.goto(f"{base}/lab/tree/widget.ipynb?token={TOKEN}")
        # the kernel started and idle: a cell run before then would not be sent
        page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
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
        assert printed(page, 3, "masks") == "masks False False ok"
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
