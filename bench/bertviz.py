"""bertviz's head_view page built from attention weights in a child process: its bytes and build time (bench/api.py
sets them beside the arrays form's). bertviz draws from a CDN, so its drawing is not measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

BERTVIZ_CHILD = textwrap.dedent(
    """
    import json, statistics, sys, time
    import numpy as np, torch
    from bertviz import head_view
    w = torch.from_numpy(np.load(sys.argv[1]))
    tokens = json.loads(open(sys.argv[2]).read())
    attention = tuple(w[i][None] for i in range(w.shape[0]))
    print("ready", flush=True)
    times, size = [], 0
    for _ in range(int(sys.argv[3])):
        start = time.perf_counter()
        html = head_view(attention, tokens, html_action="return")
        times.append(time.perf_counter() - start)
        size = len(html.data.encode("utf-8"))
        del html
    print(json.dumps({"bytes": size, "seconds": statistics.median(times)}), flush=True)
    """
)


@dataclass
class Bertviz:
    bytes: int | None = None
    seconds: float | None = None
    note: str = ""


def bertviz_page(weights: torch.Tensor, tokens: list[str], cap: float, repeats: int) -> Bertviz:
    """head_view's HTML for (L, H, S, S) weights, built in a child process: its bytes and build time, or why not."""
    try:
        import bertviz  # noqa: F401
    except ImportError:
        return Bertviz(note="bertviz not installed (pip install '.[bench]')")
    with tempfile.TemporaryDirectory() as tmp:
        npy, tok = Path(tmp, "w.npy"), Path(tmp, "tokens.json")
        np.save(npy, weights.numpy())
        tok.write_text(json.dumps(tokens))
        child = subprocess.Popen(
            [sys.executable, "-c", BERTVIZ_CHILD, str(npy), str(tok), str(repeats)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            child.wait()
            return Bertviz(note=f"bertviz failed: {child.stderr.read()[-300:] if child.stderr else ''}")
        try:
            out, err = child.communicate(timeout=cap * repeats + 5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return Bertviz(note=f"> {cap:g} s: stopped")
        if child.returncode != 0:
            return Bertviz(note=f"bertviz failed: {err[-300:]}")
        result = json.loads(out.strip().splitlines()[-1])
        return Bertviz(bytes=result["bytes"], seconds=result["seconds"])
