"""One attention layer by the engine against the same layer with torch's scaled_dot_product_attention.

Both project Q, K, V, attend under a causal mask and merge through W_O; the engine also keeps every
intermediate (scores, weights, contexts) for display and checks the all-masked policy and finiteness, so
it is expected to cost more than the fused kernel. Prints, per sequence length: the median time of each,
their ratio, the score elements B*H*S^2 and their float32 MiB.

    .venv/bin/python -m bench.attention [--device cpu|cuda] [--heads 12] [--d-model 384]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from engine.attention import attention, from_concatenated, merge_heads, project
from engine.masks import MaskSpec, eligibility


def median_ms(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=384)
    parser.add_argument("--lengths", default="16,64,128,256")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    device = torch.device(args.device)
    h, d = args.heads, args.d_model
    g = torch.Generator().manual_seed(0)
    w = from_concatenated(*(torch.randn(d, d, generator=g) / d**0.5 for _ in range(4)), h).to(device, torch.float32)
    print(f"device={device} heads={h} d_model={d} d_head={d // h} dtype=float32 causal mask, median of {args.repeats}")
    print(f"{'S':>5} {'engine ms':>10} {'sdpa ms':>9} {'ratio':>6} {'B*H*S^2':>10} {'score MiB':>9}")
    with torch.inference_mode():
        for s in (int(v) for v in args.lengths.split(",")):
            x = torch.randn(1, s, d, generator=g).to(device)
            eligible = eligibility(MaskSpec(causal=True), s, device)
            out = attention(x, w, eligible)

            def engine_call(x: torch.Tensor = x, eligible: torch.Tensor = eligible) -> torch.Tensor:
                return attention(x, w, eligible).output

            def sdpa_call(x: torch.Tensor = x) -> torch.Tensor:
                q, k, v = project(x, w)
                contexts = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return merge_heads(contexts, w)[1]

            torch.testing.assert_close(out.output, sdpa_call(), rtol=1e-4, atol=1e-5)
            e_ms = median_ms(engine_call, device, args.repeats)
            s_ms = median_ms(sdpa_call, device, args.repeats)
            cells = h * s * s
            print(f"{s:>5} {e_ms:>10.3f} {s_ms:>9.3f} {e_ms / s_ms:>6.1f} {cells:>10,} {cells * 4 / 2**20:>9.2f}")


if __name__ == "__main__":
    main()
