"""induction: the trained checkpoint's heads, the engine forward against the training module, and training."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from engine.analysis.heads import ProbeSpec, head_type_scores
from engine.errors import InputError
from engine.masks import MaskSpec
from engine.models.base import RunInput
from engine.models.induction import CHECKPOINT, InductionConfig, InductionModel
from engine.train_induction import (
    VOCAB,
    TrainConfig,
    TrainingTransformer,
    half_losses,
    main,
    next_token_losses,
    train,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model() -> InductionModel:
    return InductionModel()


@pytest.fixture(scope="module")
def trained(model: InductionModel) -> TrainingTransformer:
    """The training module with the shipped weights loaded into it."""
    module = TrainingTransformer(model.cfg)
    module.load_state_dict(load_file(str(CHECKPOINT)))
    return module.eval()


def random_words(n: int, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    return [VOCAB[int(i)] for i in torch.randint(len(VOCAB), (n,), generator=gen)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_forward_equals_training_module_logits(model, trained, dtype, seed):
    half = random_words(20, seed)
    words = [*half, *half[:15]]
    result = model.run(RunInput(tokens=words), CPU, dtype)
    assert result.logits is not None
    ours = result.logits[0]
    ids = torch.tensor([[model.word_ids[w] for w in words]])
    with torch.no_grad():
        theirs = copy.deepcopy(trained).to(dtype)(ids)[0]
    assert ours.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert float((ours - theirs).abs().max()) < tol


def test_shipped_checkpoint_has_a_previous_token_head_and_an_induction_head(model):
    table = head_type_scores(model, CPU, torch.float32, probe=ProbeSpec((30,), seed=0))
    layer0, layer1 = table
    prev0 = [row["previous_token"] for row in layer0]
    ind1 = [row["induction"] for row in layer1]
    assert max(prev0) > 0.8  # type: ignore[type-var]
    assert max(ind1) > 0.8  # type: ignore[type-var]
    # the two mechanisms sit in their own layers: layer 0 does no induction, layer 1 no previous-token attention
    assert all(row["induction"] < 0.1 for row in layer0)  # type: ignore[operator]
    assert all(row["previous_token"] < 0.1 for row in layer1)  # type: ignore[operator]


def test_shipped_checkpoint_predicts_the_repeat(model):
    half = random_words(30, seed=7)
    run = model.run(RunInput(tokens=half + half), CPU, torch.float32)
    assert run.logits is not None
    logits = run.logits[0]
    ids = torch.tensor([[model.word_ids[w] for w in run.tokens]])
    losses = next_token_losses(logits[None], ids)[0]  # (59,): column t predicts token t + 1
    chance = math.log(len(VOCAB))
    assert float(losses[:29].mean()) > 0.9 * chance  # the first half is unpredictable
    assert float(losses[30:].mean()) < 0.25 * chance  # the repeat is predicted
    predicted = [row["token"] for row in run.config.next_word[30:59]]
    assert sum(p == w for p, w in zip(predicted, half[1:], strict=True)) >= 25


def test_checkpoint_metadata_matches_the_vocabulary_and_info(model):
    assert model.info.vocab == list(VOCAB)
    assert model.info.default_masks == MaskSpec(causal=True)
    assert model.info.max_tokens == model.cfg.n_ctx
    assert model.info.n_layers == 2 and model.info.n_heads == model.cfg.n_heads
    assert CHECKPOINT.stat().st_size < 4_000_000


def test_induction_is_causal_by_default_and_the_mask_can_be_lifted(model):
    words = random_words(12, seed=3)
    causal = model.run(RunInput(tokens=words), CPU, torch.float32)
    assert causal.masks == MaskSpec(causal=True)
    for trace in causal.layers:
        assert float(trace.attn.weights[0].triu(1).abs().max()) == 0.0
    free = model.run(RunInput(tokens=words, masks=MaskSpec()), CPU, torch.float32)
    assert float(free.layers[0].attn.weights[0].triu(1).abs().max()) > 1e-3


def test_text_and_tokens_give_the_same_run(model):
    words = random_words(10, seed=4)
    a = model.run(RunInput(text="  ".join(words)), CPU, torch.float32)
    b = model.run(RunInput(tokens=words), CPU, torch.float32)
    assert a.tokens == b.tokens == words
    assert torch.equal(a.layers[-1].attn.weights, b.layers[-1].attn.weights)


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"text": "the cat sat on the sofa"}, "text", "unknown word 'sofa' at position 5"),
        ({"tokens": ["The"]}, "tokens", "knows 128 words"),
        ({"tokens": ["cat"] * 65}, "tokens", "got 65 tokens, limit 64 (the induction model's trained positions)"),
        ({"text": " "}, "text", "got no words"),
        ({"x": torch.zeros(2, 64)}, "x", "induction does not read x"),
        ({"text": "cat", "weights": {"w_q": torch.zeros(1, 1)}}, "weights", "does not read weights"),
        ({"text": "cat", "options": {"seed": 2}}, "options.seed", "no options"),
        ({"text": "cat", "last_layer": 2}, "layer", "layers 0..1"),
        ({"text": "cat", "heads": 8}, "heads", "4 per layer"),
        ({"text": "cat", "kv_heads": 2}, "kv_heads", "leave kv_heads out"),
    ],
)
def test_induction_rejects_bad_input_naming_the_field(model, kwargs, field, needle):
    with pytest.raises(InputError) as err:
        model.run(RunInput(**kwargs), CPU, torch.float32)
    assert err.value.field == field
    assert needle in err.value.message


def test_training_is_deterministic_from_the_seed():
    cfg = InductionConfig(vocab_size=len(VOCAB))

    def weights(seed: int) -> dict[str, torch.Tensor]:
        return train(cfg, TrainConfig(steps=5, seed=seed)).state_dict()

    a, b, c = weights(0), weights(0), weights(1)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not all(torch.equal(a[name], c[name]) for name in a)


def test_the_script_trains_a_few_steps_and_writes_a_checkpoint_the_model_reads(tmp_path, capsys):
    """`python -m engine.train_induction` for a few steps: it trains, reports the halves' losses and writes a
    checkpoint the served model loads, with the steps it ran in its metadata. (What the full run learns is checked
    on the committed checkpoint, below: a run long enough to learn takes minutes.)"""
    out = tmp_path / "induction.safetensors"
    main(["--out", str(out), "--steps", "3", "--log-every", "2"])
    printed = capsys.readouterr().out
    assert printed.count("repeated half") == 3 and "trained 3 steps" in printed and str(out) in printed
    written = InductionModel(out)
    assert tuple(written.vocab) == VOCAB and written.cfg == InductionModel().cfg
    assert json.loads(safe_open(str(out), "pt").metadata()["train"])["steps"] == 3
    run = written.run(RunInput(tokens=random_words(8, seed=5)), CPU, torch.float32)
    assert run.logits is not None and bool(torch.isfinite(run.logits).all())


def test_the_committed_checkpoint_learnt_to_predict_repeats(trained):
    """The full training run's result, scored as the script scores it: chance on the random half, the repeat
    predicted."""
    halves = half_losses(trained, trained.cfg.n_ctx, trained.cfg.vocab_size)
    assert halves["first_half"] > 0.95 * halves["chance"]  # nothing to learn there
    assert halves["repeated_half"] < 0.5 * halves["chance"]  # learnt to copy from earlier in the sequence
