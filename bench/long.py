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

    .venv/bin/python -m bench.long [--tokens 4096,16384,32768] [--rounds 3] [--plot bench/long.png]

--plot saves the figures as a PNG (needs matplotlib: `make bench-long` installs it): time against length (the run,
SDPA, the slowest tile, on log axes with an S^2 line through SDPA's last point) and memory against length (the run's
peak growth and what it keeps, against the S x S float32 weights of its heads that it never makes).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Figures:
    s: int
    run_ms: float
    sdpa_ms: float
    tile_ms: float  # the slowest tile
    grown_mb: float  # peak resident memory the run added
    kept_mb: float  # what the run keeps (MiB)
    heads: int


def bench(s: int, rounds: int, out: list[Figures] | None = None) -> list[str]:
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
    if out is not None:
        out.append(Figures(s, run_ms, sdpa_ms, worst_tile, grown_mb, run.nbytes / 2**20, q.shape[1]))
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


def plot(figures: list[Figures], path: Path, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install '.[bench]')"
    s = [f.s for f in figures]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    left.loglog(s, [f.run_ms for f in figures], "o-", label="run (POST /api/runs's work)")
    left.loglog(s, [f.sdpa_ms for f in figures], "s-", label="torch SDPA, same Q, K, V (no weights)")
    left.loglog(s, [f.tile_ms for f in figures], "^-", label="slowest tile (256 x 256)")
    last = figures[-1]
    left.loglog(s, [last.sdpa_ms * (x / last.s) ** 2 for x in s], ":", color="grey", label="S^2 through SDPA")
    left.set_xlabel("tokens S")
    left.set_ylabel("ms (median)")
    left.set_title("time")
    left.legend(fontsize=8)
    dense = [f.heads * f.s * f.s * 4 / 2**20 for f in figures]
    right.loglog(s, [f.grown_mb for f in figures], "o-", label="peak memory growth of the run")
    right.loglog(s, [f.kept_mb for f in figures], "s-", label="kept for tiles and rows")
    right.loglog(s, dense, ":", color="grey", label="every head's S x S float32 weights (never made)")
    right.set_xlabel("tokens S")
    right.set_ylabel("MiB")
    right.set_title("memory")
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"plot: {path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="4096,16384,32768")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=None, help="save the figures as a PNG here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    said = f"torch {torch.__version__}, {args.threads} threads, {args.rounds} rounds"
    print(said)
    figures: list[Figures] = []
    for s in (int(t) for t in args.tokens.split(",")):
        for line in bench(s, args.rounds, figures):
            print(line, flush=True)
    if args.plot is not None and figures:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(plot(figures, args.plot, f"a long run, random model, 2 heads, causal; {said}; {stamp}"))


if __name__ == "__main__":
    main()
