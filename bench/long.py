"""A long run (POST /api/runs's work) against torch's fused attention on the same Q, K, V, side by side in one run.

For each length, the random model (one layer, 2 heads, width 128, causal) through engine.long.long_run, as the
server runs it, against F.scaled_dot_product_attention(q, k, v, is_causal=True) on that run's own Q, K and V (which
returns contexts only: no weights at all). Timed, the median over rounds:

    run      long_run: the blockwise forward (contexts and row normalisers), the summaries and the tile pyramid
    sdpa     torch's fused attention on the same Q, K, V
    tile     one tile at each level (the deepest: exact weights; above: folded from the pyramid or recomputed)
    row      one exact row

and the peak resident memory the run added (VmHWM reset through /proc/self/clear_refs before it).

Goals (issue 24): at 32,768 tokens the run at most 5x sdpa, peak memory growth at most 1.5 GB, a tile at most 2%
of the run. Prints PASS or MISS.

    .venv/bin/python -m bench.long [--tokens 4096,16384,32768] [--rounds 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.long import long_run
from engine.masks import MaskSpec
from engine.models import load_models
from engine.models.base import RunInput
from engine.tiles import PYRAMID_BYTES, deepest, row, tile, tile_spec


def peak_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def timed(fn: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def bench(s: int, rounds: int) -> list[str]:
    model = load_models(["random"])["random"]
    inp = RunInput(
        text=" ".join(f"t{i}" for i in range(s)),
        options={"heads": 2, "d_model": 128, "positions": True},
        masks=MaskSpec(causal=True),
    )
    cpu = torch.device("cpu")
    gc.collect()
    reset_peak()
    before = peak_kb()
    run = long_run(model, inp, cpu, torch.float32, 256, PYRAMID_BYTES)
    grown_mb = (peak_kb() - before) / 1024
    run_ms = timed(lambda: long_run(model, inp, cpu, torch.float32, 256, PYRAMID_BYTES), rounds)
    keep = run.layers[0]
    q, k = keep.q[None], keep.k[None]
    v = torch.randn_like(k)
    sdpa_ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), rounds)
    zmax = deepest(s)
    tiles = []
    for z in range(zmax + 1):
        n = 2**z
        spec = tile_spec(s, s, z, n // 2, n - 1)  # a tile on the diagonal's lower half
        assert not isinstance(spec, str), spec
        tiles.append((z, spec.cell, timed(lambda spec=spec: tile(keep, 1, spec, "max"), rounds)))
    row_ms = timed(lambda: row(keep, 1, s - 1), rounds)
    worst_tile = max(t for _, _, t in tiles)
    lines = [
        f"S = {s:,}: run {run_ms:,.0f} ms, sdpa {sdpa_ms:,.0f} ms, run / sdpa {run_ms / sdpa_ms:.2f}x; peak memory "
        f"growth {grown_mb:,.0f} MB; kept {run.nbytes / 2**20:,.1f} MiB (fine block {keep.fine})",
        "  tiles: " + ", ".join(f"z{z} (cell {c}) {t:.1f} ms" for z, c, t in tiles),
        f"  row {row_ms:.1f} ms; slowest tile / run {100 * worst_tile / run_ms:.2f}%",
    ]
    if s >= 32_768:
        ok = run_ms <= 5 * sdpa_ms and grown_mb <= 1536 and worst_tile <= 0.02 * run_ms
        lines.append(
            f"  goals: run <= 5x sdpa {'PASS' if run_ms <= 5 * sdpa_ms else 'MISS'}, memory <= 1.5 GB "
            f"{'PASS' if grown_mb <= 1536 else 'MISS'}, tile <= 2% {'PASS' if worst_tile <= 0.02 * run_ms else 'MISS'}"
            f" -> {'PASS' if ok else 'MISS'}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="4096,16384,32768")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds")
    for s in (int(t) for t in args.tokens.split(",")):
        for line in bench(s, args.rounds):
            print(line, flush=True)


if __name__ == "__main__":
    main()
