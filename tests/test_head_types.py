"""Head-type scores on hand-built weight matrices and on the served models."""

from __future__ import annotations

import math
from typing import cast

import pytest
import torch

from engine.analysis.heads import (
    ProbeSpec,
    duplicate_token_score,
    head_type_scores,
    induction_score,
    mean_distance,
    mean_entropy,
    previous_token_score,
    probe_sequence,
    top_heads_for_pair,
)
from engine.errors import InputError
from engine.masks import MaskSpec, causal_mask
from engine.models.base import ModelRun, RunInput
from engine.models.custom import CustomModel
from engine.models.induction import InductionModel
from engine.models.minilm import MiniLMModel
from engine.models.random_layer import RandomModel
from engine.models.textbook import TextbookModel

CPU = torch.device("cpu")
S = 8
SCORE_NAMES = ("previous_token", "duplicate_token", "induction", "bracket_match", "mean_distance", "entropy")


def one_hot_rows(targets: list[int], s: int = S) -> torch.Tensor:
    """(1, S, S): row q puts all its weight on key targets[q]."""
    w = torch.zeros(1, s, s, dtype=torch.float64)
    w[0, torch.arange(s), torch.tensor(targets)] = 1.0
    return w


def uniform_causal(s: int = S) -> torch.Tensor:
    w = causal_mask(s).double()
    return (w / w.sum(dim=-1, keepdim=True))[None]


PREVIOUS = one_hot_rows([0, *range(S - 1)])  # q -> q - 1 (row 0 -> itself)
IDENTITY = one_hot_rows(list(range(S)))  # q -> q
FIRST = one_hot_rows([0] * S)  # every query -> key 0


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        (PREVIOUS, 1.0),
        (IDENTITY, 0.0),
        (FIRST, 1 / (S - 1)),
        (uniform_causal(), sum(1 / (q + 1) for q in range(1, S)) / 7),
    ],
)
def test_previous_token_score_on_hand_built_patterns(weights, expected):
    got = previous_token_score(weights)
    assert got is not None
    assert float(got[0]) == pytest.approx(expected, abs=1e-12)


def test_previous_token_score_skips_rows_with_no_eligible_key():
    eligible = torch.ones(S, S, dtype=torch.bool)
    eligible[3] = False
    w = PREVIOUS.clone()
    w[0, 3] = 0.0  # the `zero` policy's row
    got = previous_token_score(w, eligible)
    assert got is not None
    assert float(got[0]) == pytest.approx(1.0)
    assert previous_token_score(torch.ones(1, 1, 1, dtype=torch.float64)) is None  # one position: no q - 1


def test_duplicate_token_score_counts_mass_on_earlier_copies_only():
    tokens = ["a", "b", "a", "c", "b", "a", "d", "e"]
    # queries with an earlier copy: 2 (a@0), 4 (b@1), 5 (a@0, a@2)
    w = torch.zeros(1, S, S, dtype=torch.float64)
    w[0, :, 0] = 1.0  # everything on key 0
    got = duplicate_token_score(w, tokens)
    assert got is not None
    assert float(got[0]) == pytest.approx((1 + 0 + 1) / 3)
    assert float(duplicate_token_score(IDENTITY, tokens)[0]) == 0.0  # type: ignore[index]
    assert duplicate_token_score(IDENTITY, list("abcdefgh")) is None  # no repeats: not measurable


def test_induction_score_reads_the_key_after_the_previous_occurrence():
    L, start = 3, 1
    s = start + 2 * L
    targets = list(range(s))
    for q in range(start + L, start + 2 * L):
        targets[q] = q - L + 1
    perfect = one_hot_rows(targets, s)
    got = induction_score(perfect, start, L)
    assert got is not None
    assert float(got[0]) == pytest.approx(1.0)
    duplicate = one_hot_rows([q - L if q >= start + L else q for q in range(s)], s)
    assert float(induction_score(duplicate, start, L)[0]) == 0.0  # type: ignore[index]
    assert float(induction_score(one_hot_rows(list(range(s)), s), start, L)[0]) == 0.0  # type: ignore[index]


def test_mean_distance_and_entropy_on_hand_built_patterns():
    assert float(mean_distance(IDENTITY)[0]) == 0.0  # type: ignore[index]
    assert float(mean_distance(PREVIOUS)[0]) == pytest.approx((S - 1) / S)  # type: ignore[index]
    assert float(mean_entropy(IDENTITY)[0]) == 0.0  # type: ignore[index]
    expected = sum(math.log(q + 1) for q in range(S)) / S  # row q uniform over q + 1 keys
    assert float(mean_entropy(uniform_causal())[0]) == pytest.approx(expected)  # type: ignore[index]


def test_head_type_scores_random_model_shapes_and_ranges():
    model = RandomModel()
    runs: list[ModelRun] = []

    def runner(inp: RunInput) -> ModelRun:
        runs.append(model.run(inp, CPU, torch.float64))
        return runs[-1]

    table = head_type_scores(model, CPU, torch.float64, probe=ProbeSpec((10,), seed=3), runner=runner)
    assert len(table) == 1 and len(table[0]) == 4 and len(runs) == 1  # the probe only
    w = runs[0].layers[0].attn.weights[0]  # (H, S, S)
    # each score is a mean of parts of softmax rows: in [0, 1] because every row sums to 1 (a check of the scores'
    # range alone passes for rows that sum to anything up to 1)
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(w.shape[:-1], dtype=w.dtype), rtol=0, atol=1e-9)
    q = torch.arange(1, w.shape[-1])
    for row in table[0]:
        assert set(row) == {"layer", "head", *SCORE_NAMES, "induction_by_length", "duplicate_by_length"}
        assert row["previous_token"] == pytest.approx(float(w[row["head"], q, q - 1].mean()), abs=1e-12)
        assert row["entropy"] <= math.log(20) + 1e-9  # type: ignore[operator]  # 2 x 10 probe tokens


@pytest.mark.parametrize("segment_len", [10, 20])
def test_untrained_random_layer_has_no_head_type(segment_len):
    """Seeded random weights: every head's scores stay near what uniform attention gives, 1 / S."""
    table = head_type_scores(RandomModel(), CPU, torch.float64, probe=ProbeSpec((segment_len,)))
    uniform = 1 / (2 * segment_len)
    for row in table[0]:
        for name in ("previous_token", "duplicate_token", "induction"):
            assert row[name] < 3 * uniform  # type: ignore[operator]


def test_textbook_scores_its_own_five_positions_without_induction():
    table = head_type_scores(TextbookModel(), CPU, torch.float64)
    assert len(table) == 1 and len(table[0]) == 1
    row = table[0][0]
    assert row["induction"] is None
    assert row["duplicate_token"] is None  # x1..x5 are all different
    run = TextbookModel().run(RunInput(), CPU, torch.float64)
    w = run.layers[0].attn.weights[0, 0]
    assert row["previous_token"] == pytest.approx(float(sum(w[q, q - 1] for q in range(1, 5)) / 4))


def test_custom_model_has_no_input_of_its_own():
    with pytest.raises(InputError) as err:
        head_type_scores(CustomModel(), CPU, torch.float64)
    assert err.value.field == "x"


@pytest.fixture(scope="module")
def minilm() -> MiniLMModel:
    return MiniLMModel()


def test_probe_sequence_is_seeded_framed_and_bounded(minilm):
    a = probe_sequence(minilm, 10, seed=1)
    b = probe_sequence(minilm, 10, seed=1)
    c = probe_sequence(minilm, 10, seed=2)
    assert a is not None and b is not None and c is not None
    assert a == b and a.tokens != c.tokens
    assert a.tokens[0] == "[CLS]" and a.tokens[-1] == "[SEP]" and a.start == 1
    assert a.tokens[1:11] == a.tokens[11:21]
    assert len(set(a.tokens[1:11])) == 10
    with pytest.raises(InputError) as err:
        probe_sequence(minilm, 256)
    assert err.value.field == "segment_len"
    assert "at most 255" in err.value.message
    assert probe_sequence(TextbookModel()) is None


def test_minilm_head_scores_on_given_text_and_probe(minilm):
    text = "the cat sat on the mat and the cat sat on the mat"
    table = head_type_scores(minilm, CPU, torch.float32, probe=ProbeSpec((12,)), inp=RunInput(text=text))
    assert len(table) == 6 and all(len(layer) == 12 for layer in table)
    run = minilm.run(RunInput(text=text), CPU, torch.float32)
    w = run.layers[2].attn.weights[0, 5].double()
    expected_prev = float(sum(w[q, q - 1] for q in range(1, len(run.tokens))) / (len(run.tokens) - 1))
    assert table[2][5]["previous_token"] == pytest.approx(expected_prev, abs=1e-6)
    best_prev = max(row["previous_token"] for layer in table for row in layer)  # type: ignore[type-var]
    assert best_prev > 0.5  # BERT-style encoders have clear previous-token heads


def test_top_heads_for_it_attending_to_animal(minilm):
    run = minilm.run(RunInput(text="The animal didn't cross the street because it was too tired"), CPU, torch.float32)
    q, k = run.tokens.index("it"), run.tokens.index("animal")
    top = top_heads_for_pair(run, q, k, k=5)
    assert len(top) == 5
    weights = [row["weight"] for row in top]
    assert weights == sorted(weights, reverse=True)
    everything = torch.stack([t.attn.weights[0, :, q, k] for t in run.layers])  # (layers, heads)
    best = int(everything.argmax())
    assert (top[0]["layer"], top[0]["head"]) == divmod(best, 12)
    assert top[0]["weight"] == pytest.approx(float(everything.max()))
    for bad, field in (((99, k), "query"), ((q, -1), "key")):
        with pytest.raises(InputError) as err:
            top_heads_for_pair(run, *bad)
        assert err.value.field == field


def test_blocking_the_pair_removes_it_from_every_head(minilm):
    text = "The animal didn't cross the street because it was too tired"
    run = minilm.run(RunInput(text=text, masks=MaskSpec(blocked=[(10, 2)])), CPU, torch.float32)
    assert all(row["weight"] == 0.0 for row in top_heads_for_pair(run, 10, 2, k=72))


@pytest.fixture(scope="module")
def induction() -> InductionModel:
    return InductionModel()


def test_given_text_scores_that_text_and_keeps_induction_on_the_probe(induction):
    text = "red ball king river frog red ball king river frog"
    on_probe = head_type_scores(induction, CPU, torch.float64, probe=ProbeSpec((16,)))
    on_text = head_type_scores(induction, CPU, torch.float64, probe=ProbeSpec((16,)), inp=RunInput(text=text))
    run = induction.run(RunInput(text=text), CPU, torch.float64)
    for layer, trace in enumerate(run.layers):
        w = trace.attn.weights[0]  # (H, S, S)
        for h in range(w.shape[0]):
            row = on_text[layer][h]
            assert row["induction"] == on_probe[layer][h]["induction"]
            prev = float(sum(w[h, q, q - 1] for q in range(1, 10)) / 9)
            dup = float(sum(w[h, q, q - 5] for q in range(5, 10)) / 5)  # each word's one earlier copy
            assert row["previous_token"] == pytest.approx(prev, abs=1e-12)
            assert row["duplicate_token"] == pytest.approx(dup, abs=1e-12)


def test_masks_without_text_apply_to_the_probe(induction):
    causal = head_type_scores(induction, CPU, torch.float64, probe=ProbeSpec((10,)))
    lifted = head_type_scores(induction, CPU, torch.float64, probe=ProbeSpec((10,)), inp=RunInput(masks=MaskSpec()))
    # lifting the causal mask on the probe moves some head's previous-token score by more than 0.01 (was: any change)
    assert any(
        abs(lift["previous_token"] - c["previous_token"]) > 0.01  # type: ignore[operator]
        for layer_c, layer_l in zip(causal, lifted, strict=True)
        for c, lift in zip(layer_c, layer_l, strict=True)
    )
    with pytest.raises(InputError) as err:
        head_type_scores(
            induction, CPU, torch.float64, probe=ProbeSpec((10,)), inp=RunInput(masks=MaskSpec(padding=[True] * 3))
        )
    assert err.value.field == "masks.padding"


def test_a_lowest_over_lengths_score_is_compared_with_that_lengths_baseline() -> None:
    model = RandomModel()
    both = head_type_scores(model, CPU, torch.float64, probe=ProbeSpec((10, 20)), permutations=5, seed=1)
    for row in both[0]:
        by = cast(dict[str, float], row["induction_by_length"])
        assert row["induction"] == min(by.values())
        length = min(by, key=by.__getitem__)
        one = head_type_scores(model, CPU, torch.float64, probe=ProbeSpec((int(length),)), permutations=5, seed=1)
        alone = one[0][cast(int, row["head"])]
        assert alone["induction"] == row["induction"]
        assert cast(dict, row["baselines"])["induction"] == cast(dict, alone["baselines"])["induction"]
