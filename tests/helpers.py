"""Helpers shared by the tests: the one error shape, a free port, a real server process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]


def assert_error(resp: httpx.Response, status: int, field: str | None = None, *words: str) -> dict[str, Any]:
    """Pin the error shape: JSON {"error": {status, code, field, message, details}} naming the field."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"status", "code", "field", "message", "details"}, err
    assert err["status"] == status
    assert isinstance(err["code"], str) and err["code"]
    assert isinstance(err["message"], str) and err["message"]
    if field is not None:
        assert err["field"] == field, err
        assert field in err["message"], err
    for w in words:
        assert w in err["message"], (w, err["message"])
    return err


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(models: str = "textbook,random,custom", **env: str) -> Iterator[str]:
    """Start `attnlab serve` as its own process on a free loopback port; yield its base URL."""
    port = free_port()
    environ = {**os.environ, "ATTNLAB_DEVICE": "cpu", **env}
    cmd = [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(port), "--models", models]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise RuntimeError(f"attnlab serve exited with {proc.returncode}:\n{out}")
            try:
                if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("attnlab serve did not answer /api/health within 120 s")
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
