"""What the benchmarks start: `attnlab serve` on a free loopback port (bench/api.py, bench/page.py,
bench/mask_change.py) and Debian's Chromium, launched as the browser tests launch it (bench/page.py,
bench/mask_change.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser

from tests.helpers import CHROMIUM, CHROMIUM_ARGS  # as the browser tests launch it

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1400, "height": 900}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def attnlab_server(
    threads: int,
    log: Path,
    models: str = "minilm",
    env: dict[str, str] | None = None,
    pids: list[int] | None = None,
    root: Path = ROOT,
) -> Iterator[int]:
    """`attnlab serve` on a free loopback port with `models` (minilm), on the CPU, with no run cache; yields the
    port. `env`: more ATTNLAB_ settings; `pids`: the server's process id is put in it (its memory, read by
    bench/checkpoints.py); `root`: the checkout it serves (this one; bench/page_ab.py serves another beside it)."""
    port = free_port()
    exe = Path(sys.executable).with_name("attnlab")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "server"]
    env = {
        **os.environ,
        "ATTNLAB_MODELS": models,
        "ATTNLAB_DEVICE": "cpu",
        "ATTNLAB_CACHE_BYTES": "0",  # a repeated request would otherwise skip its forward
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        # the checkout the benchmark runs from is the one served, not the one the environment was installed from
        # (an editable install of another checkout, whose console script imports that checkout's server)
        "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])]),
        **(env or {}),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cmd, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env, stdout=out, stderr=out, cwd=root
        )
    if pids is not None:
        pids.append(proc.pid)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"attnlab serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch(p: Any) -> Browser:
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: install Debian's chromium (make chromium)")
    return p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)  # type: ignore[no-any-return]
