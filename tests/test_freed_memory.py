"""`attnlab serve` gives freed tensors' memory back: with glibc's raised mmap threshold, 4 MiB tensors freed between
small ones that stay were kept in its heaps (the soak in bench/README.md grew past its caches by gigabytes)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

# in a process of its own: glibc's threshold is the process's, and raised by what the process freed before
FREE = r"""
import re, sys, torch
if sys.argv[1] == "serve":
    from server.cli import give_back_freed_memory
    give_back_freed_memory()

def rss():
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) * 1024

first = torch.ones(8 << 20, dtype=torch.uint8)
del first  # glibc raises its mmap threshold past this block's size once it is freed
before = rss()
large, small = [], []
for _ in range(64):
    large.append(torch.ones(4 << 20, dtype=torch.uint8))
    small.append(torch.ones(200 << 10, dtype=torch.uint8))  # made after each large one, and kept
del large
print(rss() - before)
"""


def held_after_freeing(how: str) -> int:
    out = subprocess.run([sys.executable, "-c", FREE, how], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout)


def test_the_server_gives_back_the_memory_of_freed_tensors() -> None:
    kept = 64 * (200 << 10)  # 12.5 MiB still in use
    held = held_after_freeing("serve")
    assert held < kept + (32 << 20), f"{held >> 20} MiB held after 256 MiB of tensors were freed"
    # the control: a process that does not set it keeps what it freed
    assert held_after_freeing("plain") > 128 << 20
