"""The training lab's speed: train() with its snapshots against a bare PyTorch loop, and the induction phase change.

    .venv/bin/python -m bench.train [--steps 200] [--rounds 5] [--threads 1] [--no-phase]

1. Steps per second, side by side in one run: the default TrainSpec (induction, 2 layers x 4 heads, width 64, 64
   positions, batch 32, a snapshot every 25 steps) through engine.trainlab.loop.train, each Snapshot streamed as the
   server would (its measures as JSON and its probe weights as float32 bytes), against a bare loop of the same
   model, batches, optimiser and learning-rate schedule with no snapshot, no measure and no callback. The two
   alternate for --rounds rounds (so that a change in the machine's load falls on both); the median and the best of
   each and their ratios are printed (goal: train() takes at most 1.15x the bare loop's time). On a shared machine
   the best of several rounds is the figure least moved by other work.
2. The ready-made "induction-head" experiment's 2-layer run (experiments.py), timed from the call to the snapshot
   where the best induction score first reaches 0.5 (the phase change; the run is stopped there), with the step of
   the largest jump between two snapshots (goal: under 3 minutes on this machine).

--threads sets torch's threads for the whole benchmark (1 by default: these models are too small for two threads
to help, and on two busy cores a second thread made a step several times slower).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import time
from dataclasses import replace

import torch

from engine.trainlab.experiments import BY_ID, best
from engine.trainlab.loop import BETAS, DATA_SEED_OFFSET, WEIGHT_DECAY, Snapshot, lr_at, train
from engine.trainlab.model import TrainModel, mean_loss, next_token_losses
from engine.trainlab.spec import TrainSpec
from engine.trainlab.tasks import batch_of, vocab_size

PHASE_SCORE = 0.5


def bare_loop(spec: TrainSpec) -> float:
    """Seconds for spec.steps updates of the same model, data and optimiser, with nothing else."""
    start = time.perf_counter()
    model = TrainModel(spec, vocab_size(spec.task), torch.Generator().manual_seed(spec.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=BETAS, weight_decay=WEIGHT_DECAY)
    gen = torch.Generator().manual_seed(spec.seed + DATA_SEED_OFFSET)
    rng = random.Random(spec.seed + DATA_SEED_OFFSET)
    for step in range(spec.steps):
        batch = batch_of(spec.task, gen, rng, spec.batch, spec.positions)
        loss = mean_loss(next_token_losses(model(batch.tokens), batch.tokens), batch.counted)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for group in opt.param_groups:
            group["lr"] = lr_at(spec, step)
        opt.step()
    return time.perf_counter() - start


def lab_loop(spec: TrainSpec) -> tuple[float, int, int]:
    """Seconds for train(spec) with every snapshot streamed; the snapshots and the bytes streamed."""
    sent = [0, 0]

    def stream(snap: Snapshot) -> None:
        sent[0] += 1
        sent[1] += len(json.dumps(snap.measures, allow_nan=False)) + len(snap.weights.numpy().tobytes())

    start = time.perf_counter()
    train(spec, on_snapshot=stream)
    return time.perf_counter() - start, sent[0], sent[1]


def throughput(spec: TrainSpec, rounds: int) -> None:
    bare_s: list[float] = []
    lab_s: list[float] = []
    snapshots = streamed = 0
    for r in range(rounds):
        bare_s.append(bare_loop(spec))
        seconds, snapshots, streamed = lab_loop(spec)
        lab_s.append(seconds)
        print(
            f"  round {r + 1}: bare {spec.steps / bare_s[-1]:.1f} steps/s, train() {spec.steps / seconds:.1f} steps/s"
        )
    print(f"train() handed over {snapshots} snapshots a run ({streamed / 1e6:.2f} MB streamed)")
    for name, pick in (("median", statistics.median), ("best", min)):
        bare, lab = pick(bare_s), pick(lab_s)
        print(
            f"steps per second, {name} of {rounds}: bare loop {spec.steps / bare:.1f}, train() {spec.steps / lab:.1f}; "
            f"train() takes {lab / bare:.3f}x the bare loop's time (goal: at most 1.15x)"
        )


def phase_change() -> None:
    spec = BY_ID["induction-head"].specs[0]
    scores: list[tuple[int, float, float]] = []  # (step, best induction score, seconds since the start)
    start = time.perf_counter()

    def seen(snap: Snapshot) -> None:
        scores.append((snap.step, best(snap.measures, "induction"), time.perf_counter() - start))

    train(spec, on_snapshot=seen, should_stop=lambda: bool(scores) and scores[-1][1] >= PHASE_SCORE)
    crossed = next(((s, v, t) for s, v, t in scores if v >= PHASE_SCORE), None)
    jumps = [(b[1] - a[1], b[0]) for a, b in itertools.pairwise(scores)]
    trail = ", ".join(f"{s}: {v:.2f}" for s, v, _ in scores)
    print(
        f"induction-head, 2 layers ({spec.width} wide, {spec.heads} heads, lr {spec.lr}): best induction score by step"
    )
    print(f"  {trail}")
    if crossed is None:
        print(f"no phase change in {spec.steps} steps ({scores[-1][2]:.1f} s)")
        return
    step, value, seconds = crossed
    print(
        f"phase change: the score reached {value:.2f} at step {step}, {seconds:.1f} s after the call (goal: under "
        f"180 s); the largest jump between two snapshots ended at step {max(jumps)[1]}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-phase", action="store_true", help="skip the phase-change run")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = replace(TrainSpec(task="induction"), steps=args.steps)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    throughput(spec, args.rounds)
    if not args.no_phase:
        phase_change()


if __name__ == "__main__":
    main()
