"""train(spec, on_snapshot, should_stop): one seeded, deterministic, cancellable training run.

    check_spec(spec)                         refused before anything is allocated
    model, AdamW                             weights drawn from a generator seeded with spec.seed
    for step in 0 .. steps:
        should_stop()?                       -> "cancelled", promptly, with the last snapshot handed over
        batch = the task's next batch        data from generators seeded with spec.seed (apart from the weights')
        loss, backward                       at the weights after `step` updates
        step 0, every snapshot_every, last:  a Snapshot of the weights after `step` updates (its grad_norm from this
                                             backward, its loss the mean since the last snapshot) -> on_snapshot
        step < steps: lr, update             linear warm-up over spec.warmup steps to spec.lr, then flat

The last step draws one batch more than it updates on, so that its snapshot's gradient and loss are read at the
weights it holds, as every other snapshot's are. Torch's deterministic kernels are on for the run (and restored
after the last run of the process ends): same spec, same torch, same machine: the same measures, bit for bit.
Nothing global is seeded. Torch's threads are the caller's: these models are small enough that one thread is
the fastest (bench/train.py; on two busy cores a second thread made a step many times slower).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from engine.trainlab.measures import grad_norms, head_measures, held_out_measures
from engine.trainlab.model import TrainModel, gpt2_state, mean_loss, next_token_losses
from engine.trainlab.snapshot import Snapshot, jsonable
from engine.trainlab.spec import TrainLimits, TrainSpec, check_spec
from engine.trainlab.tasks import Probe, batch_of, held_out, probe_of, vocab_size

BETAS = (0.9, 0.98)
WEIGHT_DECAY = 0.01
DATA_SEED_OFFSET = 1  # the data's generators are seeded with spec.seed + this, the weights' with spec.seed


@dataclass(frozen=True)
class TrainResult:
    status: Literal["finished", "cancelled"]
    steps_done: int  # updates made
    last: Snapshot | None  # the last snapshot handed over (None when cancelled before step 0's)


def lr_at(spec: TrainSpec, step: int) -> float:
    """The learning rate of the update after `step`: linear warm-up over spec.warmup steps, then spec.lr."""
    if spec.warmup and step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    return spec.lr


def snapshot_due(spec: TrainSpec, step: int) -> bool:
    return step % spec.snapshot_every == 0 or step == spec.steps


@torch.no_grad()
def take_snapshot(spec: TrainSpec, model: TrainModel, probe: Probe, step: int, loss: float) -> Snapshot:
    """The snapshot of `model` (the weights after `step` updates, the gradient of this step's batch on it)."""
    record: list = []
    model(torch.tensor([probe.ids]), record)
    repeated: list = []
    if probe.induction_ids == probe.ids:
        repeated = record
    else:
        model(torch.tensor([probe.induction_ids]), repeated)
    measures: dict = {"step": step, "loss": loss, "lr": lr_at(spec, step)}
    measures |= held_out_measures(model, held_out(spec.task, spec.positions), vocab_size(spec.task))
    measures |= head_measures(probe, record, repeated, spec.causal)
    measures["grad_norm"] = grad_norms(model)
    weights = torch.stack([w[0] for _, w in record]).float().clone()  # (L, H, T, T)
    return Snapshot(step, jsonable(measures), weights, list(probe.labels), spec, gpt2_state(model))


def train(
    spec: TrainSpec,
    *,
    on_snapshot: Callable[[Snapshot], None],
    should_stop: Callable[[], bool] = lambda: False,
    limits: TrainLimits | None = None,
) -> TrainResult:
    """Run `spec` (see the module's docstring); TrainSpecError before anything is allocated."""
    check_spec(spec, limits or TrainLimits())
    with deterministic():
        return run(spec, on_snapshot, should_stop)


_lock = threading.Lock()
_running = [0, False]  # runs under way in this process, and the deterministic setting before the first began


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Torch's deterministic kernels on while any run of this process is under way; the setting found before the
    first run began is put back when the last one ends (a run ending never turns them off under another)."""
    with _lock:
        if _running[0] == 0:
            _running[1] = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(True)
        _running[0] += 1
    try:
        yield
    finally:
        with _lock:
            _running[0] -= 1
            if _running[0] == 0:
                torch.use_deterministic_algorithms(bool(_running[1]))


def run(spec: TrainSpec, on_snapshot: Callable[[Snapshot], None], should_stop: Callable[[], bool]) -> TrainResult:
    model = TrainModel(spec, vocab_size(spec.task), torch.Generator().manual_seed(spec.seed))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=BETAS, weight_decay=WEIGHT_DECAY)
    gen = torch.Generator().manual_seed(spec.seed + DATA_SEED_OFFSET)
    rng = random.Random(spec.seed + DATA_SEED_OFFSET)
    probe = probe_of(spec.task, spec.positions)
    last: Snapshot | None = None
    since = torch.zeros((), dtype=torch.float64)  # the losses since the last snapshot, summed
    count = 0
    for step in range(spec.steps + 1):
        if should_stop():
            return TrainResult("cancelled", step, last)
        batch = batch_of(spec.task, gen, rng, spec.batch, spec.positions)
        loss = mean_loss(next_token_losses(model(batch.tokens), batch.tokens), batch.counted)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        since += loss.detach()
        count += 1
        if snapshot_due(spec, step):
            last = take_snapshot(spec, model, probe, step, float(since) / count)
            on_snapshot(last)
            since.zero_()
            count = 0
        if step == spec.steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(spec, step)
        opt.step()
    return TrainResult("finished", spec.steps, last)
