"""The engine's attention layer against the same layer on torch's fused scaled_dot_product_attention (SDPA).

One layer of MiniLM's shape (12 heads, width 384, d_head 32, biases on Q, K, V and W_O), random weights in
MiniLM's own layout, a causal mask, float32, side by side in one run over 16, 64, 128, 256 and 512 tokens:

    engine        engine.attention.attention with the weights split per head as engine/models/minilm.py does;
                  it also returns scores, weights, contexts and the concatenation, applies the all-masked policy
                  and refuses non-finite values
    sdpa          the same layer as transformers writes it with attn_implementation="sdpa": F.linear for Q, K, V,
                  F.scaled_dot_product_attention(is_causal=True), F.linear for W_O; returns the output only
    materialised  softmax(Q K^T / sqrt(d_head) + mask) V alone, on SDPA's Q, K, V (a reference: what keeping
                  every weight costs in itself)
    sdpa kernel   F.scaled_dot_product_attention alone on the same Q, K, V

Rounds interleave the four (their order rotates every round) so load on the machine hits them alike; each time
is the median over rounds, and `spread` is the 25th to 75th percentile of the per-round engine/SDPA ratio.
The thread count is fixed (torch.set_num_threads) and printed. By default the clock is the thread's CPU time
(time.thread_time, one thread): on a shared machine, time spent descheduled by other processes does not count,
while wall-clock time (--clock wall) counts it. Goal (issue 9): ratio at most 1.5 at every length.

    .venv/bin/python -m bench.attention [--threads 1] [--clock cpu|wall] [--rounds 60] [--lengths 16,64,128,256,512]
                                        [--before REV]   # also the engine of git revision REV, in the same rounds
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import Tensor

from engine.attention import AttentionWeights, attention
from engine.masks import MaskSpec, eligibility
from engine.models.families.bert import self_attention as attention_weights

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (16, 64, 128, 256, 512)
GOAL = 1.5  # issue 9, goal 6: the engine's layer at most 1.5x the same layer on SDPA

Layer = Callable[[], Tensor]


def minilm_shaped_layer(d_model: int, heads: int, seed: int = 0) -> dict[str, Tensor]:
    """A BERT self-attention block's state dict (nn.Linear weights are (out, in)) with random numbers."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name in ("self.query", "self.key", "self.value", "output.dense"):
        sd[f"layer.{name}.weight"] = torch.randn(d_model, d_model, generator=g) / d_model**0.5
        sd[f"layer.{name}.bias"] = torch.randn(d_model, generator=g) / 10
    return sd


def sdpa_layer(x: Tensor, sd: dict[str, Tensor], heads: int) -> Tensor:
    """x (B, S, D) -> (B, S, D): BERT's SDPA self-attention and its output projection, causal."""
    b, s, d = x.shape

    def split(name: str) -> Tensor:  # (B, S, D) -> (B, H, S, d_head)
        return F.linear(x, sd[f"layer.{name}.weight"], sd[f"layer.{name}.bias"]).view(b, s, heads, -1).transpose(1, 2)

    contexts = F.scaled_dot_product_attention(
        split("self.query"), split("self.key"), split("self.value"), is_causal=True
    )
    return F.linear(
        contexts.transpose(1, 2).reshape(b, s, d), sd["layer.output.dense.weight"], sd["layer.output.dense.bias"]
    )


def projections(x: Tensor, sd: dict[str, Tensor], heads: int) -> tuple[Tensor, Tensor, Tensor]:
    b, s, _ = x.shape
    return tuple(  # type: ignore[return-value]
        F.linear(x, sd[f"layer.{n}.weight"], sd[f"layer.{n}.bias"]).view(b, s, heads, -1).transpose(1, 2)
        for n in ("self.query", "self.key", "self.value")
    )


def minor_faults() -> int:
    """Page faults this thread has taken so far (each a fresh page of memory touched for the first time)."""
    return resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)).ru_minflt


def interleaved_ms(
    calls: dict[str, Layer], rounds: int, device: torch.device, clock: Callable[[], float], warmup: int = 3
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Each call once per round, in an order that rotates every round; milliseconds and page faults per call per
    round."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    faults: dict[str, list[int]] = {n: [] for n in names}
    for r in range(-warmup, rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            faulted = minor_faults()
            start = clock()
            calls[name]()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if r >= 0:
                times[name].append((clock() - start) * 1000)
                faults[name].append(minor_faults() - faulted)
    return times, faults


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def module_at(rev: str, path: str) -> ModuleType | None:
    """The file `path` as it was at git revision `rev`, run as a module of its own; None where it did not exist."""
    shown = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, cwd=ROOT)
    if shown.returncode != 0:
        return None
    module = ModuleType(f"{Path(path).stem}_at_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their class's module up
    exec(compile(shown.stdout, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def engine_at(rev: str) -> ModuleType:
    """engine/attention.py as it was at git revision `rev`, with engine/finite.py and engine/softmax.py of that
    revision where it had them (the rest of the engine as it is now): the "before" of a change, timed in the same
    rounds as the "after"."""
    now = {name: sys.modules[name] for name in ("engine.finite", "engine.softmax")}
    try:
        for name in now:  # what that attention.py (and its softmax.py) imports from these is that revision's
            module = module_at(rev, name.replace(".", "/") + ".py")
            if module is not None:
                sys.modules[name] = module
        attention = module_at(rev, "engine/attention.py")
    finally:
        sys.modules.update(now)
    if attention is None:
        raise SystemExit(f"--before {rev}: no engine/attention.py at that revision")
    return attention


def layer_calls(
    s: int, heads: int, d_model: int, device: torch.device, before: ModuleType | None = None
) -> dict[str, Layer]:
    """The four calls at S tokens (five with the engine `before`), checked against each other before they are timed."""
    g = torch.Generator().manual_seed(s)
    sd = {k: v.to(device) for k, v in minilm_shaped_layer(d_model, heads).items()}
    w: AttentionWeights = attention_weights(sd, "layer", heads)
    x = torch.randn(1, s, d_model, generator=g).to(device)
    eligible = eligibility(MaskSpec(causal=True), s, device)
    q, k, v = projections(x, sd, heads)
    mask = torch.zeros(s, s, device=device).masked_fill_(~eligible, float("-inf"))
    factor = 1 / (d_model // heads) ** 0.5
    calls: dict[str, Layer] = {
        "engine": lambda: attention(x, w, eligible).output,
        "sdpa": lambda: sdpa_layer(x, sd, heads),
        "materialised": lambda: torch.softmax(q @ k.transpose(-1, -2) * factor + mask, dim=-1) @ v,
        "sdpa kernel": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    if before is not None:  # the weights as that revision's from_concatenated splits them, biases as minilm adds them
        names = ("self.query", "self.key", "self.value", "output.dense")
        old = before.from_concatenated(*(sd[f"layer.{n}.weight"].T for n in names), n_heads=heads)
        b_Q, b_K, b_V = (sd[f"layer.{n}.bias"].reshape(heads, -1) for n in names[:3])
        old = replace(old, b_Q=b_Q, b_K=b_K, b_V=b_V, b_O=sd["layer.output.dense.bias"])
        calls["before"] = lambda: before.attention(x, old, eligible).output
        torch.testing.assert_close(calls["before"](), calls["sdpa"](), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(calls["engine"](), calls["sdpa"](), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(calls["materialised"](), calls["sdpa kernel"](), rtol=1e-4, atol=1e-5)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads (default 1: steadier on a shared box)"
    )
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: this thread's CPU time, blind to time spent descheduled by other load (one thread, CPU only); "
        "wall: perf_counter",
    )
    parser.add_argument("--before", metavar="REV", help="also time the engine of this git revision, in the same rounds")
    args = parser.parse_args()
    before = engine_at(args.before) if args.before else None
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.clock == "cpu" and (device.type != "cpu" or args.threads != 1):
        parser.error("--clock cpu measures the calling thread only: it needs --device cpu and --threads 1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    h, d = args.heads, args.d_model
    print(
        f"torch {torch.__version__} on {device} ({platform.machine()}, {os.cpu_count()} cores), "
        f"torch.set_num_threads({torch.get_num_threads()}); one layer: heads={h} d_model={d} d_head={d // h}, "
        f"biases, causal, float32, batch 1; median of {args.rounds} interleaved rounds, "
        f"{'thread CPU time' if args.clock == 'cpu' else 'wall-clock time'}"
    )
    print(
        f"{'S':>5} {'engine ms':>10} {'sdpa ms':>9} {'ratio':>6} {'spread':>11} {'goal':>5} {'faults':>11}"
        f" | {'materialised ms':>15} {'sdpa kernel ms':>14} {'ratio':>6}"
        + (f" | {args.before + ' ms':>12} {'ratio':>6} {'faults':>6}" if before else "")
    )
    worst = 0.0
    with torch.inference_mode():
        for s in (int(v) for v in args.lengths.split(",")):
            times, faults = interleaved_ms(layer_calls(s, h, d, device, before), args.rounds, device, clock)
            med = {name: statistics.median(t) for name, t in times.items()}
            paged = {name: round(statistics.median(f)) for name, f in faults.items()}
            pair = f"{paged['engine']}/{paged['sdpa']}"
            ratio = med["engine"] / med["sdpa"]
            lo, hi = quartiles([e / s_ for e, s_ in zip(times["engine"], times["sdpa"], strict=True)])
            worst = max(worst, ratio)
            print(
                f"{s:>5} {med['engine']:>10.3f} {med['sdpa']:>9.3f} {ratio:>6.2f} {f'{lo:.2f}-{hi:.2f}':>11}"
                f" {'met' if ratio <= GOAL else 'NOT':>5} {pair:>11}"
                f" | {med['materialised']:>15.3f}"
                f" {med['sdpa kernel']:>14.3f} {med['materialised'] / med['sdpa kernel']:>6.2f}"
                + (
                    f" | {med['before']:>12.3f} {med['before'] / med['sdpa']:>6.2f} {paged['before']:>6}"
                    if before
                    else ""
                )
            )
    print(f"worst engine/SDPA ratio {worst:.2f}: goal <= {GOAL} {'met' if worst <= GOAL else 'not met'}")


if __name__ == "__main__":
    main()
