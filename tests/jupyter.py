"""JupyterLab for tests and benchmarks: this environment's, started on a loopback port with a token and folders of
its own, no browser of its own, nothing fetched; a notebook written for it; a cell run in it from Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
from playwright.sync_api import Locator, Page

from tests.helpers import ROOT, free_port, until

TOKEN = "attnlab-widget-test"
# server extensions installed beside JupyterLab that a notebook does not need: not loaded, for a faster start
UNNEEDED = ("jupyter_lsp", "jupyter_server_terminals", "notebook_shim")


@contextmanager
def jupyterlab(root: Path, preload: str = "") -> Iterator[Callable[[], str]]:
    """JupyterLab on a free loopback port, serving `root`, started at once; yields a call that waits until it
    answers and returns its base URL (what the test does meanwhile overlaps its start). Its config, data, runtime,
    settings, workspaces and IPython profile are folders of the test's own; the kernels it starts import attnlab
    from this checkout and run `preload` (imports, say) as they start. Only the server extensions JupyterLab needs
    are loaded."""
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="attnlab-lab-"))
    startup = home / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-preload.py").write_text(preload)
    env = {
        "IPYTHONDIR": str(home / "ipython"),
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
            shutil.rmtree(home, ignore_errors=True)


def tail(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-4000:]


def notebook(path: Path, sources: list[str]) -> None:
    """A notebook of code cells `sources` at `path`, on the python3 kernel."""
    cells = [
        {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in sources
    ]
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


def open_notebook(page: Page, base: str, name: str) -> None:
    """Open the notebook `name` in the JupyterLab at `base`; return once its kernel has started and is idle (a cell
    run before then is not sent). Its kernel is started first, so that it starts (and runs its preload) while the
    page loads; the page joins that session."""
    session = {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    resp = httpx.post(f"{base}/api/sessions", params={"token": TOKEN}, json=session, timeout=60)
    assert resp.status_code == 201, resp.text
    page.goto(f"{base}/lab/tree/{name}?token={TOKEN}")
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=60_000)
