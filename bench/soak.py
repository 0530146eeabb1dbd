"""A soak: one `attnlab serve` process on loopback under mixed traffic for a long while, watched for growth.

8 bounded clients (threads, each its own httpx.Client with httpx's default pool: an idle connection reused for up to
5 s) send, for --minutes (default 20), a seeded mix: /api/attention (random, minilm, induction), /api/heads,
/api/perturb, a long run (POST /api/runs) with a few of its tiles and a row, /api/decode, and a streamed answer
(Accept: application/vnd.attnlab.arrays-stream, minilm) read to its end. Every few seconds it samples the server's
resident memory (VmRSS) and its open files (/proc/<pid>/fd), and at the end prints each one's start, end, largest
and slope (least squares over the whole run, and over its second half, after the warm-up), and every request's
outcome: its status, or the connection error it met. A connection closed with no answer is listed with how long
the request had been in flight and how long its connection had been idle before it.

    .venv/bin/python -m bench.soak [--minutes 20] [--clients 8] [--sample-s 5] [--seed 0] [--kinds long,stream]

The server runs with its defaults (ATTNLAB_MAX_CONCURRENT 2, a run cache of 512 MiB, ATTNLAB_RUN_BYTES 2 GiB): a
server that keeps what it should not grows while they are full; one that is sound levels off once they are.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers import serve_on

MODELS = "random,minilm,induction"
WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "street", "river", "bank", "money", "it"]
STREAM = "application/vnd.attnlab.arrays-stream"
# what each client sends, by weight
KINDS = {"attention": 4, "heads": 2, "perturb": 2, "long": 1, "decode": 2, "stream": 1}


@dataclass
class Sample:
    t: float  # seconds since the traffic began
    rss: int  # bytes
    fds: int


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)  # "kind status" or "kind ErrorName"
    closed: list[str] = field(default_factory=list)  # a connection closed with no answer: when, how long in, idle
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, outcome: str) -> None:
        with self.lock:
            self.outcomes[f"{kind} {outcome}"] += 1


def words(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def one_request(http: httpx.Client, kind: str, rng: random.Random, vocab: list[str], n: int, tally: Tally) -> int:
    """Send one request of `kind` and read its answer whole; its status. A long run: the run, then three of its
    tiles (each counted as "long tile") and a row, whose status it is."""
    if kind == "attention":
        model = rng.choice(["random", "minilm", "induction"])
        text = " ".join(rng.choice(vocab) for _ in range(8)) if model == "induction" else words(rng, 5, 60)
        return http.post("/api/attention", json={"model": model, "text": text}).status_code
    if kind == "heads":
        return http.post("/api/heads", json={"model": "induction", "seed": rng.randint(0, 5)}).status_code
    if kind == "perturb":
        body = {"model": "minilm", "text": words(rng, 12, 40), "masks": {"causal": True}, "position": 5}
        return http.post("/api/perturb", json=body).status_code
    if kind == "decode":
        segment = [rng.choice(vocab) for _ in range(rng.randint(3, 8))]
        return http.post("/api/decode", json={"model": "induction", "text": " ".join(segment * 2)}).status_code
    if kind == "stream":
        body = {"model": "minilm", "text": words(rng, 100, 300), "precision": "float16"}
        with http.stream("POST", "/api/attention", json=body, headers={"accept": STREAM}) as resp:
            for _ in resp.iter_bytes():
                pass
            return resp.status_code
    # a long run kept by name, then what the page's Long input panel asks of it
    s = rng.choice([1024, 2048, 4096])
    body = {"model": "random", "text": words(rng, s, s), "options": {"heads": 4, "d_model": 64, "seed": 1}}
    name = f"soak-{threading.get_ident() % 100000}-{n}"
    resp = http.post("/api/runs", json=body, headers={"X-Attnlab-Run": name})
    if resp.status_code != 200:
        return resp.status_code
    for z, x, y in ((0, 0, 0), (1, 0, 0), (1, 1, 1)):
        tally.add("long tile", str(http.get(f"/api/runs/{name}/tiles/0/{rng.randint(0, 3)}/{z}/{x}/{y}").status_code))
    return http.get(f"/api/runs/{name}/rows/0/0/{s // 2}").status_code


def client(base: str, seed: int, until: float, vocab: list[str], tally: Tally, began: float, only: list[str]) -> None:
    """One client: requests one after another until `until`, each outcome counted; `only`: those kinds of KINDS."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if k in only]
    weights = [KINDS[k] for k in kinds]
    last_done = time.monotonic()
    with httpx.Client(base_url=base, timeout=httpx.Timeout(120.0)) as http:
        n = 0
        while time.monotonic() < until:
            kind = rng.choices(kinds, weights)[0]
            start = time.monotonic()
            try:
                tally.add(kind, str(one_request(http, kind, rng, vocab, n, tally)))
            except httpx.HTTPError as err:
                tally.add(kind, type(err).__name__)
                if isinstance(err, (httpx.RemoteProtocolError, httpx.ReadError)):
                    with tally.lock:
                        tally.closed.append(
                            f"{kind} at {start - began:.1f} s: {type(err).__name__} ({err}) "
                            f"{time.monotonic() - start:.2f} s in, {start - last_done:.2f} s after the client's last"
                        )
            last_done = time.monotonic()
            n += 1


def sample(pid: int, began: float) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return Sample(time.monotonic() - began, rss, len(os.listdir(f"/proc/{pid}/fd")))


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope, per minute."""
    if len(points) < 2:
        return float("nan")
    return statistics.linear_regression([t for t, _ in points], [v for _, v in points]).slope * 60


def summary(samples: list[Sample], name: str, value: Callable[[Sample], float], unit: str, scale: float) -> str:
    values = [value(s) / scale for s in samples]
    whole = slope([(s.t, value(s) / scale) for s in samples])
    late = slope([(s.t, value(s) / scale) for s in samples if s.t >= samples[-1].t / 2])
    return (
        f"{name:12} start {values[0]:8.1f}  end {values[-1]:8.1f}  max {max(values):8.1f} {unit:5}"
        f"  slope {whole:+7.2f} {unit}/min (second half {late:+7.2f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=20, help="how long the traffic runs (default 20)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--sample-s", type=float, default=5, help="seconds between samples (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    every = ",".join(KINDS)
    parser.add_argument("--kinds", default=every, help=f"the kinds of request sent (default {every})")
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 120 or not 1 <= args.clients <= 32:
        parser.error("--minutes must be in (0, 120] and --clients 1..32: this soak stays bounded")
    only = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not only or set(only) - set(KINDS):
        parser.error(f"--kinds: some of {','.join(KINDS)}")

    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, {os.cpu_count()} cores, load {os.getloadavg()}")
    with serve_on("127.0.0.1", MODELS) as served:
        models = httpx.get(f"{served.base}/api/models", timeout=30).json()["models"]
        vocab = next(m["vocab"] for m in models if m["name"] == "induction")
        tally = Tally()
        began = time.monotonic()
        until = began + args.minutes * 60
        samples = [sample(served.proc.pid, began)]
        threads = [
            threading.Thread(target=client, args=(served.base, args.seed * 100 + i, until, vocab, tally, began, only))
            for i in range(args.clients)
        ]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(args.sample_s)
            samples.append(sample(served.proc.pid, began))
        for t in threads:
            t.join()
        samples.append(sample(served.proc.pid, began))
        metrics = httpx.get(f"{served.base}/metrics", timeout=30).text
        log = served.output()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()}")
    print(f"{args.clients} clients for {args.minutes:g} min, {len(samples)} samples every {args.sample_s:g} s")
    print(summary(samples, "VmRSS", lambda s: s.rss, "MiB", 1 << 20))
    print(summary(samples, "open files", lambda s: s.fds, "", 1))
    minutes = [next(s for s in samples if s.t >= 60 * m) for m in range(int(samples[-1].t // 60) + 1)]
    print("VmRSS each minute (MiB): " + " ".join(f"{s.rss / (1 << 20):.0f}" for s in minutes))
    held = [line for line in metrics.splitlines() if line.startswith("attnlab_run_cache_bytes ")]
    print(f"at the end the run cache held {float(held[0].split()[1]) / (1 << 20):.0f} MiB" if held else "")
    total = sum(tally.outcomes.values())
    print(f"requests: {total}")
    for outcome, count in sorted(tally.outcomes.items()):
        print(f"  {outcome:40} {count}")
    print(f"closed with no answer: {len(tally.closed)}")
    for line in tally.closed:
        print(f"  {line}")
    failed = log.count('"status": 500')
    print(f"server log: {failed} answers of 500, {log.count('Traceback')} tracebacks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
