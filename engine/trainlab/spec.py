"""What a training run is (TrainSpec), how large one may be (TrainLimits), and the check between them.

Every knob is one of the claims the lab makes testable: layers (an induction head needs two), heads (one against
several at the same width), width, mlp (attention-only by default), positions, scale (1/sqrt(d_head) on or off), lr
and warmup (a high rate without warm-up), init (default, GPT-2's std 0.02, or every head of a layer sharing one set
of projections), causal (without the mask a next-token model reads the answer), seed, steps, batch.

check_spec refuses a spec before anything is allocated, with a TrainSpecError naming the field and the limit; the
parameter count is arithmetic on the spec (parameter_count), never a model built to count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from engine.trainlab.tasks import MIN_POSITIONS, TASKS, vocab_size

__all__ = ["INITS", "TASKS", "TrainLimits", "TrainSpec", "TrainSpecError", "check_spec", "parameter_count"]

INITS = ("default", "gpt2", "shared")
MLP_FACTOR = 4  # the MLP's hidden width is 4 x width, as GPT-2's
MAX_LR = 1.0


@dataclass(frozen=True)
class TrainSpec:
    task: str  # one of TASKS
    layers: int = 2
    heads: int = 4
    width: int = 64  # d_model; each head is width // heads wide
    mlp: bool = False  # False: attention-only (written as a gpt2 checkpoint whose MLP weights are zero)
    positions: int = 64  # tokens per sequence (and the learned position table's rows)
    scale: bool = True  # scores divided by sqrt(d_head)
    lr: float = 1e-3  # AdamW's peak learning rate
    warmup: int = 50  # steps of linear warm-up to lr; 0 = none
    init: str = "default"  # "default" | "gpt2" (std 0.02) | "shared" (every head of a layer shares its q/k/v)
    causal: bool = True  # False: every position sees every other, the answer included
    seed: int = 0  # seeds the weights and the data
    steps: int = 500  # optimiser updates
    batch: int = 32  # sequences per update
    snapshot_every: int = 25  # steps between snapshots (also one at step 0 and one at the last step)


@dataclass(frozen=True)
class TrainLimits:
    """The largest run a server starts, checked before anything is allocated."""

    max_parameters: int = 5_000_000
    max_steps: int = 20_000
    max_tokens_per_step: int = 65_536  # batch x positions
    max_snapshots: int = 1_001  # steps // snapshot_every + 1
    max_layers: int = 12
    max_heads: int = 64
    max_positions: int = 1_024
    max_probe_values: int = 1_048_576  # layers x heads x positions^2: one snapshot's probe weights (4 MB in float32)


class TrainSpecError(ValueError):
    """A spec refused before anything is allocated: `field` names the knob, `message` the value and the limit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def d_head(spec: TrainSpec) -> int:
    return spec.width // spec.heads


def parameter_count(spec: TrainSpec) -> int:
    """The model's trainable parameters, by arithmetic on the spec (the task's vocabulary size included)."""
    v, d, p = vocab_size(spec.task), spec.width, spec.positions
    qkv = 3 * (d * d_head(spec) + d_head(spec)) if spec.init == "shared" else 3 * (d * d + d)
    attn = 2 * d + qkv + d * d + d  # ln_1, W_Q W_K W_V with biases, W_O with bias
    mlp = 2 * d + d * MLP_FACTOR * d + MLP_FACTOR * d + MLP_FACTOR * d * d + d if spec.mlp else 0
    return v * d + p * d + spec.layers * (attn + mlp) + 2 * d + v * d  # wte, wpe, blocks, ln_f, lm_head


def snapshot_count(spec: TrainSpec) -> int:
    """Snapshots a run of `spec` hands over: step 0, every snapshot_every steps, and the last step."""
    return spec.steps // spec.snapshot_every + 1 + (1 if spec.steps % spec.snapshot_every else 0)


def check_types(spec: TrainSpec) -> None:
    for f in fields(spec):
        value = getattr(spec, f.name)
        want = {"str": str, "int": int, "bool": bool, "float": float}[str(f.type)]
        ok = isinstance(value, want) and (want is bool or not isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise TrainSpecError(f.name, f"got {value!r} ({type(value).__name__}): {f.name} must be a {want.__name__}")


def at_least(name: str, got: int, least: int, why: str = "") -> None:
    if got < least:
        raise TrainSpecError(name, f"got {got}: {name} must be at least {least}{why}")


def at_most(name: str, got: int, most: int, limit: str) -> None:
    if got > most:
        raise TrainSpecError(name, f"got {got:,}: this server's limit is {most:,} ({limit})")


def check_spec(spec: TrainSpec, limits: TrainLimits = TrainLimits()) -> None:
    """Refuse a spec with a TrainSpecError naming the field and the limit; nothing is allocated."""
    check_types(spec)
    if spec.task not in TASKS:
        raise TrainSpecError("task", f"got {spec.task!r}: the tasks are {', '.join(TASKS)}")
    if spec.init not in INITS:
        raise TrainSpecError("init", f"got {spec.init!r}: the initialisations are {', '.join(INITS)}")
    at_least("layers", spec.layers, 1)
    at_most("layers", spec.layers, limits.max_layers, "max_layers")
    at_least("heads", spec.heads, 1)
    at_most("heads", spec.heads, limits.max_heads, "max_heads")
    at_least("width", spec.width, 1)
    if spec.width % spec.heads:
        raise TrainSpecError(
            "heads", f"got {spec.heads} heads for width {spec.width}: the width must divide by the heads"
        )
    at_least("positions", spec.positions, MIN_POSITIONS[spec.task], f" for the task {spec.task}")
    at_most("positions", spec.positions, limits.max_positions, "max_positions")
    if not math.isfinite(spec.lr) or not 0 < spec.lr <= MAX_LR:
        raise TrainSpecError("lr", f"got {spec.lr!r}: the learning rate must be a number above 0 and at most {MAX_LR}")
    at_least("warmup", spec.warmup, 0)
    at_least("seed", spec.seed, 0)
    at_most("seed", spec.seed, 2**63 - 1, "a 64-bit seed")
    at_least("steps", spec.steps, 1)
    at_most("steps", spec.steps, limits.max_steps, "max_steps")
    at_least("batch", spec.batch, 1)
    at_least("snapshot_every", spec.snapshot_every, 1)
    tokens = spec.batch * spec.positions
    if tokens > limits.max_tokens_per_step:
        raise TrainSpecError(
            "batch",
            f"got {spec.batch} sequences of {spec.positions} positions, {tokens:,} tokens a step: this server's "
            f"limit is {limits.max_tokens_per_step:,} (max_tokens_per_step)",
        )
    snapshots = snapshot_count(spec)
    if snapshots > limits.max_snapshots:
        raise TrainSpecError(
            "snapshot_every",
            f"got {spec.snapshot_every} for {spec.steps} steps, {snapshots:,} snapshots: this server's limit is "
            f"{limits.max_snapshots:,} (max_snapshots): snapshot less often",
        )
    probe = spec.layers * spec.heads * spec.positions**2
    if probe > limits.max_probe_values:
        raise TrainSpecError(
            "positions",
            f"{spec.layers} layers x {spec.heads} heads x {spec.positions}^2 positions make {probe:,} probe weights a "
            f"snapshot: this server's limit is {limits.max_probe_values:,} (max_probe_values)",
        )
    n = parameter_count(spec)
    if n > limits.max_parameters:
        raise TrainSpecError(
            "width",
            f"layers {spec.layers}, width {spec.width}, mlp {spec.mlp} and positions {spec.positions} make {n:,} "
            f"parameters: this server's limit is {limits.max_parameters:,} (max_parameters)",
        )
