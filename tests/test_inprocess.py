"""server/inprocess.py: one request run in this process with no HTTP, no app and no compute threads, as
attnlab.run and attnlab.show run it; the answer is the route's."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np

from engine.models import load_available
from server import inprocess
from server.errors import ApiError
from tests.fixtures import make_app_client, settings_for
from tests.helpers import ROOT, assert_error

BODY = {"model": "random", "text": "red ball king", "masks": {"causal": True}}


def test_run_attention_answers_as_the_route_does() -> None:
    settings = settings_for(models="random")
    body = inprocess.run_attention(
        inprocess.attention_request(BODY),
        settings,
        load_available(["random"]),
        inprocess.local_runtime("cpu", "float32"),
    )
    with make_app_client(settings) as client:
        want = client.post("/api/attention", json=BODY).json()
    assert body["tokens"] == want["tokens"] == ["red", "ball", "king"]
    mine, theirs = body["layers"][0]["heads"][0]["weights"], np.asarray(want["layers"][0]["heads"][0]["weights"])
    assert isinstance(mine, np.ndarray) and mine.shape == theirs.shape == (3, 3)
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-6)
    # the negative control: other masks, other weights
    free = inprocess.run_attention(
        inprocess.attention_request({**BODY, "masks": {}}),
        settings,
        load_available(["random"]),
        inprocess.local_runtime("cpu", "float32"),
    )
    assert not np.allclose(free["layers"][0]["heads"][0]["weights"], theirs, atol=1e-6)


def test_run_export_refuses_what_the_route_refuses() -> None:
    settings = settings_for(models="random")
    body = {**BODY, "view": "all", "layer": 0}
    with make_app_client(settings) as client:
        want = assert_error(client.post("/api/export", json=body), 422, "layer")
    try:
        inprocess.run_export(
            inprocess.export_request(body),
            settings,
            load_available(["random"]),
            inprocess.local_runtime("cpu", "float32"),
        )
    except ApiError as err:
        assert (err.status, err.code, err.field) == (422, want["code"], "layer")
        assert f"{err.field}: {err.message}" == want["message"]  # the error body prefixes its field
    else:
        raise AssertionError("run_export took view all with a layer")


def test_attnlab_run_builds_no_compute_pool_and_starts_no_thread() -> None:
    """In a fresh process where making a ComputePool raises: attnlab.run and attnlab.show still work, and leave no
    thread behind them."""
    script = """
import threading
import server.scheduling

def refuse(*args, **kwargs):
    raise SystemExit("attnlab.run made a ComputePool")

server.scheduling.ComputePool.__init__ = refuse
import attnlab
before = threading.active_count()
w = attnlab.run("random", "red ball king")["layers"][0]["heads"][0]["weights"]
assert w.shape == (3, 3), w.shape
assert "red" in attnlab.export_html("random", "red ball king")
assert threading.active_count() == before, (before, threading.enumerate())
print("ok")
"""
    env = {"ATTNLAB_DEVICE": "cpu", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.stdout + done.stderr)[-2000:]


def test_show_prints_positions_in_the_count_asked_and_refuses_another() -> None:
    import attnlab

    page = attnlab.show("random", "the cat sat on the mat", positions_from=1).html
    shown = re.search(r'<script type="application/json" id="attnlab-view">(.*?)</script>', page)
    assert shown is not None and json.loads(shown.group(1))["positions_from"] == 1
    try:
        attnlab.show("random", "the cat sat on the mat", positions_from=2)
    except attnlab.ApiError as err:
        assert err.field == "positions_from"
    else:
        raise AssertionError("show took positions from 2")
