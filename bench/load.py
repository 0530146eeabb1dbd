"""A bounded load benchmark on loopback: one attnlab process against two replicas behind nginx, in one run.

32 concurrent clients send the same few hundred POST /api/attention requests (a seeded mix of the random,
minilm and induction models) to each set-up in turn:

    1 process           clients -> attnlab
    1 process + nginx   clients -> nginx (deploy/nginx.conf) -> attnlab       (nginx's own cost)
    2 replicas + nginx  clients -> nginx (deploy/nginx.conf) -> 2 x attnlab   (the compose topology)

Every answer is checked (status 200, the tokens, layers, heads and S x S weights the request implies), and the
run fails if one is not right. Prints throughput (requests/s), p50 and p99 latency overall and per model, the
requests nginx retried, and the CPU seconds of the clients and of attnlab. Bounded in count (--requests per
set-up and round, --rounds) and time (--time-limit seconds per set-up and round). All servers run on this
machine, as do the clients, so they share its cores: the numbers are for this machine, not for a cluster.

    .venv/bin/python -m bench.load [--clients 32] [--requests 300] [--rounds 1] [--time-limit 120]
                                   [--torch-threads N] [--seed 0]

Needs Debian's nginx (`make bench-load` installs it as root) and the test extras (httpx).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.topology import nginx, replicas

MODELS = "random,minilm,induction"
LAYERS = {"random": 1, "minilm": 6, "induction": 2}
WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "ran",
    "on",
    "under",
    "mat",
    "street",
    "animal",
    "it",
    "was",
    "too",
    "tired",
    "because",
    "river",
    "bank",
    "money",
]


@dataclass
class Request:
    model: str
    body: dict[str, Any]
    tokens: list[str] | None  # known in advance for the whitespace tokenisers
    heads: int


def request_mix(count: int, seed: int, induction_vocab: list[str]) -> list[Request]:
    """A seeded mix: half random (small layers), a quarter each minilm (6 x 12 heads) and induction."""
    rng = random.Random(seed)
    mix: list[Request] = []
    for i in range(count):
        kind = ("random", "random", "minilm", "induction")[i % 4]
        if kind == "random":
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 24))]
            heads = rng.choice([2, 4, 8])
            options = {"d_model": rng.choice([32, 64]), "heads": heads, "seed": rng.randint(0, 9)}
            body = {"model": "random", "text": " ".join(words), "options": options}
            mix.append(Request("random", body, words, heads))
        elif kind == "minilm":
            words = [rng.choice(WORDS) for _ in range(rng.randint(5, 20))]
            mix.append(Request("minilm", {"model": "minilm", "text": " ".join(words)}, None, 12))
        else:
            segment = [rng.choice(induction_vocab) for _ in range(rng.randint(4, 12))]
            words = segment + segment
            mix.append(Request("induction", {"model": "induction", "text": " ".join(words)}, words, 4))
    rng.shuffle(mix)
    return mix


def check(req: Request, status: int, content: bytes) -> str | None:
    """None when the answer is right for the request, else what is wrong."""
    if status != 200:
        return f"status {status}: {content[:200]!r}"
    result = orjson.loads(content)
    tokens = result["tokens"]
    if req.tokens is not None and tokens != req.tokens:
        return f"tokens {tokens[:5]}... for {req.tokens[:5]}..."
    s = len(tokens)
    layers = result["layers"]
    if len(layers) != LAYERS[req.model]:
        return f"{len(layers)} layers, expected {LAYERS[req.model]}"
    for layer in layers:
        if len(layer["heads"]) != req.heads:
            return f"layer {layer['index']}: {len(layer['heads'])} heads, expected {req.heads}"
        for head in layer["heads"]:
            weights = head["weights"]
            if len(weights) != s or any(len(row) != s for row in weights):
                return f"layer {layer['index']} head {head['index']}: weights not {s} x {s}"
    return None


@dataclass
class Outcome:
    name: str
    sent: int = 0
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=dict)  # model -> seconds
    failures: list[str] = field(default_factory=list)
    timed_out: bool = False
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load average as each round began
    client_cpu: float = 0.0  # CPU seconds of this process (the 32 clients)
    server_cpu: float = 0.0  # CPU seconds of the attnlab processes
    retried: int | None = None  # requests nginx retried on another replica (None: no nginx)

    @property
    def ok(self) -> int:
        return sum(len(v) for v in self.latencies.values())


async def run_load(outcome: Outcome, base: str, mix: list[Request], clients: int, time_limit: float) -> None:
    """Send every request of the mix from `clients` concurrent clients; add what happened to outcome."""
    outcome.load.append(os.getloadavg()[0])
    queue: asyncio.Queue[Request] = asyncio.Queue()
    for req in mix:
        queue.put_nowait(req)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            req = queue.get_nowait()
            outcome.sent += 1
            start = time.perf_counter()
            try:
                resp = await http.post("/api/attention", json=req.body)
                elapsed = time.perf_counter() - start
                wrong = check(req, resp.status_code, resp.content)
            except httpx.HTTPError as err:
                elapsed, wrong = 0.0, f"{type(err).__name__}: {err}"
            if wrong is None:
                outcome.latencies.setdefault(req.model, []).append(elapsed)
            else:
                outcome.failures.append(f"{req.model}: {wrong}")

    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60.0), limits=limits) as http:
        start = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(client(http) for _ in range(clients))), time_limit)
        except TimeoutError:
            outcome.timed_out = True
        outcome.seconds += time.perf_counter() - start


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes, from /proc (Linux); 0 elsewhere."""
    total = 0.0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists():
            fields = stat.read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def warm_up(base: str, mix: list[Request]) -> None:
    """One request per model first, so that no set-up pays for first-call costs inside its measurement."""
    with httpx.Client(base_url=base, timeout=60) as http:
        for model in LAYERS:
            req = next(r for r in mix if r.model == model)
            resp = http.post("/api/attention", json=req.body)
            wrong = check(req, resp.status_code, resp.content)
            if wrong:
                raise SystemExit(f"warm-up on {base} failed: {wrong}")


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(outcomes: list[Outcome], clients: int) -> str:
    width = 22
    lines = [f"{'':26}" + "".join(f"{o.name:>{width}}" for o in outcomes)]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"{label:26}" + "".join(f"{c:>{width}}" for c in cells))

    row("answers right / sent", [f"{o.ok} / {o.sent}" + (" (TIMED OUT)" if o.timed_out else "") for o in outcomes])
    row("seconds", [f"{o.seconds:.1f}" for o in outcomes])
    row("throughput (req/s)", [f"{o.ok / o.seconds:.1f}" for o in outcomes])
    every = [[x for v in o.latencies.values() for x in v] for o in outcomes]
    row("p50 latency (ms)", [f"{percentile(a, 50) * 1000:.0f}" for a in every])
    row("p99 latency (ms)", [f"{percentile(a, 99) * 1000:.0f}" for a in every])
    for model in LAYERS:
        cells = [o.latencies.get(model, []) for o in outcomes]
        row(
            f"  {model} p50 / p99 (ms)",
            [f"{percentile(c, 50) * 1000:.0f} / {percentile(c, 99) * 1000:.0f}" for c in cells],
        )
    row("retried by nginx", ["-" if o.retried is None else str(o.retried) for o in outcomes])
    row("CPU s: clients / attnlab", [f"{o.client_cpu:.1f} / {o.server_cpu:.1f}" for o in outcomes])
    row("load average at start", [f"{statistics.mean(o.load):.1f}" for o in outcomes])
    lines.append(f"{clients} concurrent clients; the same requests in the same order for each set-up.")
    return "\n".join(lines)


def machine(threads: int | None) -> str:
    import torch

    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [ln.split(":", 1)[1].strip() for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    threads = threads or torch.get_num_threads()
    return (
        f"{os.cpu_count()} cores ({cpu}), torch {torch.__version__} with {threads} threads per "
        f"process, Python {platform.python_version()}; clients, nginx and attnlab all on this machine"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--requests", type=int, default=300, help="requests per set-up and round (default 300)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each running every set-up in turn (default 1)")
    parser.add_argument("--time-limit", type=float, default=120, help="seconds per set-up and round before it stops")
    parser.add_argument("--torch-threads", type=int, help="OMP_NUM_THREADS for each attnlab process")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 1 <= args.requests <= 2000 or not 1 <= args.clients <= 64 or not 1 <= args.rounds <= 5:
        parser.error("--requests must be 1..2000, --clients 1..64 and --rounds 1..5: this benchmark stays bounded")

    print(machine(args.torch_threads), flush=True)
    env = {"OMP_NUM_THREADS": str(args.torch_threads)} if args.torch_threads else {}
    with tempfile.TemporaryDirectory(prefix="attnlab-load-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        pair = stack.enter_context(replicas(work, 2, models=MODELS, **env))
        models = httpx.get(f"{pair[0].base}/api/models", timeout=10).json()["models"]
        mix = request_mix(args.requests, args.seed, next(m["vocab"] for m in models if m["name"] == "induction"))
        for replica in pair:
            warm_up(replica.base, mix)
        proxies = {
            "1 process + nginx": stack.enter_context(nginx(work / "nginx-1", [pair[0].port])),
            "2 replicas + nginx": stack.enter_context(nginx(work / "nginx-2", [r.port for r in pair])),
        }
        bases = {"1 process": pair[0].base, **{name: proxy.base for name, proxy in proxies.items()}}
        outcomes = {name: Outcome(name) for name in bases}
        for n in range(args.rounds):
            for name, base in bases.items():
                print(f"round {n + 1}: {name} ...", flush=True)
                outcome, pids = outcomes[name], [r.proc.pid for r in pair if r.proc]
                client_cpu, server_cpu = time.process_time(), cpu_seconds(pids)
                asyncio.run(run_load(outcome, base, mix, args.clients, args.time_limit))
                outcome.client_cpu += time.process_time() - client_cpu
                outcome.server_cpu += cpu_seconds(pids) - server_cpu
        for name, proxy in proxies.items():
            # nginx logs a request it sent to a second replica with both addresses
            log = [orjson.loads(line) for line in proxy.access_log.read_bytes().splitlines() if line.strip()]
            outcomes[name].retried = sum(1 for e in log if "," in e["upstream"])
    print(report(list(outcomes.values()), args.clients))
    bad = [o for o in outcomes.values() if o.failures or o.timed_out]
    for o in bad:
        print(f"{o.name}: {len(o.failures)} wrong answers, e.g. {o.failures[:3]}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
