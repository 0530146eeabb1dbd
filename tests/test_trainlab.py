"""The training lab's engine (engine/trainlab/): the seeds' claims as seeded, bounded runs, the spec's limits, the
written checkpoint against attnlab's loader, cancelling and determinism.

Every claim is checked through the ready-made experiment's own check (engine/trainlab/experiments.py) on small
models with bounded steps, and each check is also shown to fail on runs where the claim does not hold (the runs
swapped, or a negative control), so that no check passes by construction.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.masks import MaskSpec
from engine.models.checkpoint import load_checkpoint
from engine.models.run import RunInput
from engine.trainlab import tasks
from engine.trainlab.experiments import BY_ID, EXPERIMENTS, lowest_similarity, mean
from engine.trainlab.loop import TrainResult, train
from engine.trainlab.measures import max_abs_score, similarity, softmax_jacobian
from engine.trainlab.model import TrainModel
from engine.trainlab.snapshot import Snapshot
from engine.trainlab.spec import TrainLimits, TrainSpec, TrainSpecError, check_spec, parameter_count

CPU = torch.device("cpu")
KEYS = {
    "step",
    "loss",
    "held_out_loss",
    "lr",
    "entropy",
    "previous_token",
    "induction",
    "bracket",
    "similarity",
    "max_abs_score",
    "softmax_jacobian",
    "grad_norm",
    "future_reliance",
}
# The induction pair: the smallest model and budget seen to form an induction head here (positions 64: with 48 or
# 56 a blend over every earlier word already predicted the repeat well, and no sharp head formed in 800 steps).
INDUCTION = TrainSpec(
    task="induction", layers=2, heads=1, width=32, positions=64, batch=32, lr=3e-3, steps=700, snapshot_every=350
)
TINY = TrainSpec(task="induction", layers=2, heads=2, width=16, positions=12, batch=4, steps=6, snapshot_every=3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models train fastest on one thread: on two busy cores, two threads made a step 15 times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(spec: TrainSpec, **kw) -> tuple[TrainResult, list[Snapshot]]:
    snaps: list[Snapshot] = []
    result = train(spec, on_snapshot=snaps.append, **kw)
    return result, snaps


def measures(snaps: list[Snapshot]) -> list[dict]:
    return [s.measures for s in snaps]


@pytest.fixture(scope="module")
def induction_pair() -> tuple[list[dict], list[dict]]:
    """The 2-layer and the 1-layer run of INDUCTION, every snapshot's measures."""
    two = measures(run(INDUCTION)[1])
    one = measures(run(replace(INDUCTION, layers=1))[1])
    return two, one


def test_induction_head_forms_in_two_layers_and_not_one(induction_pair):
    two, one = induction_pair
    best_two = max(max(row) for row in two[-1]["induction"])
    best_one = max(max(row) for row in one[-1]["induction"])
    assert best_two >= 0.5, two[-1]["induction"]
    assert best_one < 0.2, one[-1]["induction"]
    check = BY_ID["induction-head"].check
    assert check([two, one])[0]
    assert not check([one, two])[0]  # the check fails where the 1-layer run stands for the 2-layer one
    assert max(max(row) for row in two[0]["induction"]) < 0.2  # it formed in training: not there at step 0


def test_shared_heads_stay_identical_and_independent_ones_differ(tmp_path):
    shared_spec = replace(TINY, init="shared", heads=4, steps=30, snapshot_every=10, lr=1e-2)
    _, shared = run(shared_spec)
    _, independent = run(replace(shared_spec, init="default"))
    for snap in shared:
        assert lowest_similarity(snap.measures) >= 0.9999, (snap.step, snap.measures["similarity"])
    assert lowest_similarity(independent[-1].measures) < 0.9, independent[-1].measures["similarity"]
    assert BY_ID["shared-heads"].check([measures(shared), measures(independent)])[0]
    assert not BY_ID["shared-heads"].check([measures(independent), measures(shared)])[0]
    # a perturbed head does not read 1.0: head 1's W_Q nudged in the written checkpoint, run by attnlab's forward
    last = shared[-1]
    last.write(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    d_head = shared_spec.width // shared_spec.heads
    torch.manual_seed(0)
    for layer in range(shared_spec.layers):
        w = state[f"transformer.h.{layer}.attn.c_attn.weight"]
        w[:, d_head : 2 * d_head] += 0.3 * torch.randn(shared_spec.width, d_head)
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    got = forward_weights(tmp_path, last.probe_tokens, causal=True)
    assert min(similarity(got[layer].double())[0][1] for layer in range(shared_spec.layers)) < 0.9999


def test_scale_off_saturates_the_softmax_at_the_start():
    on = replace(TINY, width=128, heads=4, positions=64, steps=1, snapshot_every=1)
    _, scaled = run(on)
    _, unscaled = run(replace(on, scale=False))
    first = [measures(scaled), measures(unscaled)]
    held, ratio = BY_ID["no-scale"].check(first)
    assert held and ratio < 0.5, ratio
    assert not BY_ID["no-scale"].check([measures(scaled), measures(scaled)])[0]  # the same run twice: ratio 1
    assert mean(unscaled[0].measures, "max_abs_score") > 3 * mean(scaled[0].measures, "max_abs_score")


def test_without_the_causal_mask_the_model_reads_ahead():
    masked = replace(TINY, width=32, positions=24, batch=16, steps=150, snapshot_every=75, lr=3e-3, warmup=10)
    _, on = run(masked)
    _, off = run(replace(masked, causal=False))
    held, ratio = BY_ID["no-causal"].check([measures(on), measures(off)])
    assert held, (ratio, on[-1].measures["future_reliance"], off[-1].measures["future_reliance"])
    assert off[-1].measures["held_out_loss"] < 0.5 * on[-1].measures["held_out_loss"]
    assert abs(on[-1].measures["future_reliance"]) < 1e-3
    assert off[-1].measures["future_reliance"] > 1.0
    assert not BY_ID["no-causal"].check([measures(off), measures(on)])[0]


def diagonal_weight(weights: torch.Tensor, task: str, n: int) -> float:
    """The best head's mean weight from each query of the second x to the word it must copy next: key q - n for copy
    (a diagonal), 2n - 1 - q for reverse (an anti-diagonal)."""
    q = torch.arange(n, 2 * n)
    k = q - n if task == "copy" else 2 * n - 1 - q
    return float(weights[:, :, q, k].mean(dim=-1).max())


def test_copy_forms_a_diagonal_and_reverse_an_anti_diagonal():
    n = 8
    for task, other in (("copy", "reverse"), ("reverse", "copy")):
        spec = replace(TINY, task=task, layers=1, width=32, positions=2 * n + 1, batch=16, steps=100, lr=1e-2)
        _, snaps = run(replace(spec, warmup=10, snapshot_every=100))
        first, last = snaps[0].weights, snaps[-1].weights
        assert diagonal_weight(first, task, n) < 0.3
        assert diagonal_weight(last, task, n) > 0.9, task
        assert diagonal_weight(last, other, n) < 0.3, task  # the other task's diagonal stays empty


def test_softmax_jacobian_and_max_abs_score_read_what_they_say():
    scores = torch.randn(3, 6, 6, dtype=torch.float64) * 2
    weights = scores.softmax(dim=-1)
    want = [
        float(
            torch.stack(
                [torch.linalg.matrix_norm(torch.diag(p) - torch.outer(p, p)) for p in weights[h]]  # Frobenius
            ).mean()
        )
        for h in range(3)
    ]
    assert softmax_jacobian(weights) == pytest.approx(want, abs=1e-12)
    one_hot = torch.eye(6, dtype=torch.float64)[None]
    assert softmax_jacobian(one_hot) == pytest.approx([0.0], abs=1e-12)  # a saturated row lets nothing through
    uniform = torch.full((1, 6, 6), 1 / 6, dtype=torch.float64)
    assert softmax_jacobian(uniform) == pytest.approx([(1 / 6 - 1 / 36) ** 0.5])
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    masked = scores.masked_fill(~causal, 100.0)  # a masked cell's score is never the largest
    assert max_abs_score(masked, causal) == pytest.approx(scores.abs().masked_fill(~causal, 0).amax((-1, -2)).tolist())


LIMITS = TrainLimits(
    max_parameters=200_000, max_steps=1_000, max_tokens_per_step=4_096, max_snapshots=50, max_positions=1_024
)
REFUSED = [
    ({"task": "poetry"}, "task", "induction, copy"),
    ({"heads": 3}, "heads", "width must divide"),
    ({"heads": 0}, "heads", "at least 1"),
    ({"layers": 0}, "layers", "at least 1"),
    ({"layers": 13}, "layers", "max_layers"),
    ({"positions": 4}, "positions", "at least 8"),
    ({"positions": 4096}, "positions", "max_positions"),
    ({"lr": float("nan")}, "lr", "above 0"),
    ({"lr": float("inf")}, "lr", "above 0"),
    ({"lr": 0.0}, "lr", "above 0"),
    ({"lr": "0.1"}, "lr", "must be a float"),
    ({"warmup": -1}, "warmup", "at least 0"),
    ({"init": "xavier"}, "init", "default, gpt2, shared"),
    ({"steps": 0}, "steps", "at least 1"),
    ({"steps": 1_001}, "steps", "1,000 (max_steps)"),
    ({"batch": 65}, "batch", "4,096 (max_tokens_per_step)"),
    ({"snapshot_every": 0}, "snapshot_every", "at least 1"),
    ({"steps": 1_000, "snapshot_every": 10}, "snapshot_every", "50 (max_snapshots)"),
    ({"width": 512}, "width", "200,000 (max_parameters)"),
    ({"seed": -1}, "seed", "at least 0"),
    ({"layers": 12, "heads": 64, "positions": 1024, "batch": 1}, "positions", "(max_probe_values)"),
    ({"causal": 1}, "causal", "must be a bool"),
]


@pytest.mark.parametrize(("change", "field", "words"), REFUSED)
def test_check_spec_refuses_each_limit_naming_the_field(change, field, words):
    spec = replace(TrainSpec(task="induction"), **change)
    with pytest.raises(TrainSpecError) as err:
        check_spec(spec, LIMITS)
    assert err.value.field == field
    assert words in err.value.message, err.value.message
    with pytest.raises(TrainSpecError):  # train refuses before it allocates anything
        train(spec, on_snapshot=lambda s: pytest.fail("a snapshot of a refused spec"), limits=LIMITS)


def test_the_defaults_pass_and_the_parameter_count_is_the_models():
    check_spec(TrainSpec(task="induction"), LIMITS)
    for spec in (TINY, replace(TINY, mlp=True), replace(TINY, init="shared"), replace(TINY, task="text")):
        model = TrainModel(spec, tasks.vocab_size(spec.task), torch.Generator().manual_seed(0))
        assert parameter_count(spec) == sum(p.numel() for p in model.parameters()), spec


def forward_weights(directory: Path, tokens: list[str], *, causal: bool, reference: bool = False) -> torch.Tensor:
    """(L, H, T, T): attnlab's forward on a written checkpoint, loaded as a user's, with the causal mask as asked."""
    model = load_checkpoint("train", directory, reference=reference)
    result = model.run(RunInput(tokens=tokens, masks=MaskSpec(causal=causal)), CPU, torch.float32)
    return torch.stack([layer.attn.weights[0] for layer in result.layers])


@pytest.mark.parametrize(
    ("scale", "causal", "mlp", "task"),
    [(True, True, False, "brackets"), (False, True, True, "induction"), (True, False, False, "copy")],
)
def test_written_checkpoint_loads_and_equals_the_probe_weights(tmp_path, scale, causal, mlp, task):
    spec = replace(TINY, task=task, scale=scale, causal=causal, mlp=mlp, steps=4, snapshot_every=4)
    _, snaps = run(spec)
    last = snaps[-1]
    last.write(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["scale_attn_weights"] is scale
    assert config["attnlab"]["causal"] is causal
    got = forward_weights(tmp_path, last.probe_tokens, causal=config["attnlab"]["causal"], reference=scale and causal)
    assert got.shape == last.weights.shape
    assert torch.allclose(got, last.weights, atol=1e-5, rtol=0), (got - last.weights).abs().max()
    card = json.loads((tmp_path / "attnlab.json").read_text())
    assert card["spec"]["task"] == task and card["step"] == spec.steps
    model = load_checkpoint("train", tmp_path, reference=False)
    opened = model.run(RunInput(text=model.info.default_text), CPU, torch.float32)  # the probe, read as text
    assert opened.tokens == last.probe_tokens
    probe = load_file(str(tmp_path / "probe.safetensors"))["weights"]
    assert torch.equal(probe, last.weights)
    assert json.loads((tmp_path / "measures.json").read_text()) == last.measures
    if not mlp:
        state = load_file(str(tmp_path / "model.safetensors"))
        assert not state["transformer.h.0.mlp.c_fc.weight"].any()
    # a negative control: the other scale setting does not give these weights
    config["scale_attn_weights"] = not scale
    (tmp_path / "config.json").write_text(json.dumps(config))
    other = forward_weights(tmp_path, last.probe_tokens, causal=causal)
    assert not torch.allclose(other, last.weights, atol=1e-5, rtol=0)


def test_should_stop_stops_promptly():
    calls: list[int] = []
    snaps: list[Snapshot] = []

    def stop() -> bool:
        calls.append(len(snaps))
        return len(snaps) >= 1  # stop as soon as step 0's snapshot is out

    result = train(replace(TINY, steps=1_000, snapshot_every=500), on_snapshot=snaps.append, should_stop=stop)
    assert result.status == "cancelled"
    assert result.steps_done == 1 and result.last is snaps[0]
    assert [s.step for s in snaps] == [0]
    finished = run(TINY)[0]
    assert finished.status == "finished" and finished.steps_done == TINY.steps


def test_same_seed_same_measures_and_another_seed_others():
    first, a = run(TINY)
    _, b = run(TINY)
    _, c = run(replace(TINY, seed=1))
    assert [s.step for s in a] == [0, 3, 6]
    assert [s.measures for s in a] == [s.measures for s in b]
    assert all(torch.equal(x.weights, y.weights) for x, y in zip(a, b, strict=True))
    assert [s.measures for s in a] != [s.measures for s in c]
    assert first.last is a[-1]


@pytest.mark.parametrize("task", tasks.TASKS)
def test_every_task_runs_and_its_measures_are_json(task, tmp_path):
    spec = replace(TINY, task=task, positions=16, steps=2, snapshot_every=1, mlp=task == "text")
    _, snaps = run(spec)
    assert [s.step for s in snaps] == [0, 1, 2]
    last = snaps[-1]
    assert set(last.measures) == KEYS
    json.dumps(last.measures, allow_nan=False)
    assert last.weights.shape == (spec.layers, spec.heads, spec.positions, spec.positions)
    assert torch.allclose(last.weights.sum(-1), torch.ones(spec.layers, spec.heads, spec.positions))
    assert len(last.probe_tokens) == spec.positions
    has_brackets = task in ("brackets", "text")
    assert (last.measures["bracket"] is not None) is has_brackets
    groups = {"embed", "positions", "layer0.attn", "layer1.attn", "unembed"} | (
        {"layer0.mlp", "layer1.mlp"} if spec.mlp else set()
    )
    assert set(last.measures["grad_norm"]) == groups
    assert all(v > 0 for v in last.measures["grad_norm"].values())
    last.write(tmp_path)
    model = load_checkpoint("train", tmp_path, reference=False)
    opened = model.run(RunInput(text=model.info.default_text), CPU, torch.float32)  # opens on its probe
    assert len(opened.tokens) <= spec.positions


def test_the_text_task_reads_the_standard_library_and_holds_out_textwrap():
    probe = tasks.probe_of("text", 32)
    assert "".join(probe.labels).startswith('"""Text wrapping')
    assert tasks.text_tokenizer().get_vocab_size() == tasks.TEXT_VOCAB


def test_every_experiment_is_data_with_a_checkable_claim():
    assert len(EXPERIMENTS) == 6 and len({e.id for e in EXPERIMENTS}) == 6
    for e in EXPERIMENTS:
        assert 1 <= len(e.specs) <= 2 and len(e.labels) == len(e.specs)
        assert e.measure in KEYS and e.look_at and e.claim
        for spec in e.specs:
            check_spec(spec)
