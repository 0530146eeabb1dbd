"""Two threads measuring at once (an audit and /api/cost's measurement on two compute threads) must not crash the
process: torch's profiler is one per process. Run in a child process, so a crash is a failed test, not a dead run."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

CHILD = """
import threading, torch
from engine.measure import measure

def work():
    a = torch.randn(300, 300)
    return (a @ a).softmax(-1)

def go():
    for _ in range(20):
        out, m = measure(work, torch.device("cpu"))
        assert m.peak_bytes > 0 and m.ms > 0

threads = [threading.Thread(target=go) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("measured")
"""


def test_two_threads_measuring_at_once_do_not_crash_the_process() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "measured" in done.stdout, (done.returncode, done.stderr[-500:])
