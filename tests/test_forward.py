"""The one forward: hook names, and interventions as data (ablation, edge edits, input shifts, perturbation).

Each equivalence has a negative control: the same check on a deliberately wrong result must fail.
"""

from __future__ import annotations

import importlib
import math
import random
import threading
from dataclasses import replace
from typing import Any

import pytest
import torch

from engine.analysis.intervene import intervene
from engine.analysis.perturb import perturb
from engine.analysis.perturb_kernel import Case, Change
from engine.errors import InputError
from engine.interventions import EdgeEdit, HeadAblation, InputShift, Interventions
from engine.masks import MaskSpec
from engine.models import AttentionModel, RunInput, load_models
from engine.models.induction import DEFAULT_TEXT as INDUCTION_TEXT
from engine.stop import Stopped, stop_when

CPU = torch.device("cpu")
SENTENCE = "The animal didn't cross the street because it was too tired"


@pytest.fixture(scope="module")
def models() -> dict[str, AttentionModel]:
    return load_models(["textbook", "random", "minilm", "induction"])


def run(model: AttentionModel, inp: RunInput, dtype: torch.dtype = torch.float64, **interventions: object):  # type: ignore[no-untyped-def]
    return model.run(inp, CPU, dtype, interventions=Interventions(**interventions))  # type: ignore[arg-type]


# ---- hook points ---------------------------------------------------------------------------------------------------


def test_cache_names_every_intermediate_of_every_model(models: dict[str, AttentionModel]) -> None:
    cases = {
        "textbook": (RunInput(), []),
        "random": (RunInput(text="a b c"), []),
        "minilm": (RunInput(text="a cat"), ["hook_mlp_out", "ln1.hook_normalized", "hook_normalized_resid_post"]),
        "induction": (RunInput(text="red ball king"), ["ln1.hook_normalized"]),
    }
    for name, (inp, extra) in cases.items():
        r = models[name].run(inp, CPU, torch.float32)
        cache = r.cache()
        for i, t in enumerate(r.layers):
            p = f"blocks.{i}"
            assert cache[f"{p}.attn.hook_pattern"] is t.attn.weights  # the tensors of the pass, not copies
            assert cache[f"{p}.attn.scores_unmasked"] is t.attn.scores
            assert cache[f"{p}.attn.hook_z"].data_ptr() == t.attn.contexts.data_ptr()  # a view, transposed
            assert cache[f"{p}.hook_attn_out"] is t.attn.output
            assert cache[f"{p}.hook_resid_pre"] is t.resid_in
            for e in extra:
                assert f"{p}.{e}" in cache
            if i + 1 < len(r.layers):
                assert cache[f"blocks.{i + 1}.hook_resid_pre"] is t.resid_out  # what the block passed on
        assert cache["hook_full_embed"] is r.layers[0].resid_in
        assert ("logits" in cache) == (name == "induction")


def test_minilm_block_reads_resid_mid_and_mlp_out_like_bert(models: dict[str, AttentionModel]) -> None:
    r = models["minilm"].run(RunInput(text=SENTENCE), CPU, torch.float64)
    block = models["minilm"].network(RunInput(), CPU, torch.float64).blocks[2]
    t = r.layers[2]
    assert block.ln_attn is not None and block.ln_mlp is not None and t.mlp_out is not None
    assert torch.allclose(t.resid_mid, t.resid_in + t.attn.output, atol=1e-12)  # before BERT's ln1
    assert t.mlp_in is not None and t.resid_post is not None
    assert torch.allclose(t.mlp_in, block.ln_attn(t.resid_mid), atol=1e-12)
    assert torch.allclose(t.resid_post, t.mlp_in + t.mlp_out, atol=1e-12)
    assert torch.allclose(t.resid_out, block.ln_mlp(t.resid_post), atol=1e-12)


# ---- head ablation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "inp", "layer", "head"),
    [
        ("random", RunInput(text="the cat sat on the mat", options={"heads": 4}), 0, 2),
        ("minilm", RunInput(text=SENTENCE), 3, 7),
        ("induction", RunInput(text=INDUCTION_TEXT), 1, 3),
    ],
)
def test_zero_ablation_changes_the_attention_output_by_exactly_minus_contexts_times_w_o(
    models: dict[str, AttentionModel], name: str, inp: RunInput, layer: int, head: int
) -> None:
    model = models[name]
    before = run(model, inp)
    after = run(model, inp, ablate=(HeadAblation(layer, head, "zero"),))
    w_o = before.layers[layer].weights.W_O
    assert w_o is not None
    change = after.layers[layer].attn.output - before.layers[layer].attn.output  # (1, S, d_out)
    expected = -before.layers[layer].attn.contexts[:, head] @ w_o[head]  # (1, S, d_out)
    assert float((change - expected).abs().max()) < 1e-12
    assert float(expected.abs().max()) > 1e-3  # the head did contribute
    # negative control: the rows of W_O that read another head do not explain the change
    other = (head + 1) % w_o.shape[0]
    wrong = -before.layers[layer].attn.contexts[:, other] @ w_o[other]
    assert float((change - wrong).abs().max()) > 1e-3
    # earlier layers are untouched; the ablated head's contexts are 0
    for i in range(layer):
        assert torch.equal(after.layers[i].resid_out, before.layers[i].resid_out)
    assert float(after.layers[layer].attn.contexts[:, head].abs().max()) == 0.0


def test_mean_ablation_replaces_contexts_with_their_mean_over_live_rows(models: dict[str, AttentionModel]) -> None:
    padding = (True, True, False, True, True)
    inp = RunInput(
        text="a b c d e", masks=MaskSpec(padding=padding, blocked=((1, 0), (1, 1), (1, 3), (1, 4))), all_masked="zero"
    )
    before = run(models["random"], inp)
    after = run(models["random"], inp, ablate=(HeadAblation(0, 1, "mean"),))
    z = before.layers[0].attn.contexts[0, 1]  # (S, d_v); row 1 has no eligible key
    live = [0, 2, 3, 4]
    mean = z[live].mean(dim=0)
    got = after.layers[0].attn.contexts[0, 1]
    assert torch.allclose(got[live], mean.expand(4, -1), atol=1e-12)
    assert float(got[1].abs().max()) == 0.0
    assert torch.equal(after.layers[0].attn.contexts[0, 0], before.layers[0].attn.contexts[0, 0])


def test_ablating_the_induction_heads_sends_the_repeat_loss_back_toward_chance(
    models: dict[str, AttentionModel],
) -> None:
    model = models["induction"]
    half = 24
    words = random.Random(0).sample(model.info.vocab or [], half)
    inp = RunInput(tokens=words + words)
    chance = math.log(len(model.info.vocab or []))

    def repeat_loss(ablate: tuple[HeadAblation, ...]) -> float:
        result = intervene(model, inp, model.encode(inp), Interventions(ablate=ablate), CPU, torch.float32)
        assert result.predictions is not None
        losses = result.predictions.losses_after  # column t predicts token t + 1
        return sum(losses[half:]) / len(losses[half:])

    intact = repeat_loss(())
    layer1 = repeat_loss(tuple(HeadAblation(1, h) for h in range(4)))
    assert intact < 0.25 * chance
    assert layer1 > 0.7 * chance
    # the previous-token head L0H1 is the other half of the circuit: ablating it alone breaks induction too
    assert repeat_loss((HeadAblation(0, 1),)) > 0.7 * chance


# ---- edge edits ----------------------------------------------------------------------------------------------------


def test_edge_edit_sets_the_weight_and_rescales_the_row(models: dict[str, AttentionModel]) -> None:
    inp = RunInput(text="the cat sat on the mat", masks=MaskSpec(causal=True))
    before = run(models["random"], inp)
    after = run(models["random"], inp, edit=(EdgeEdit(0, 1, 4, 1, 0.7),))
    wb, wa = before.layers[0].attn.weights[0, 1], after.layers[0].attn.weights[0, 1]
    assert float(wa[4, 1]) == pytest.approx(0.7, abs=1e-15)
    assert float(wa[4].sum()) == pytest.approx(1.0, abs=1e-12)
    others = [0, 2, 3, 4]
    ratio = wa[4, others] / wb[4, others]
    assert torch.allclose(ratio, torch.full_like(ratio, 0.3 / float(1 - wb[4, 1])), atol=1e-12)
    assert float(wa[4, 5:].abs().max()) == 0.0  # masked keys stay exactly 0
    assert torch.equal(wa[:4], wb[:4]) and torch.equal(
        after.layers[0].attn.weights[0, 0], before.layers[0].attn.weights[0, 0]
    )
    # the contexts follow the edited weights
    v = before.layers[0].attn.v[0, 1]
    assert torch.allclose(after.layers[0].attn.contexts[0, 1, 4], wa[4] @ v, atol=1e-12)


def test_edge_edits_that_would_break_the_mask_or_the_sum_are_named(models: dict[str, AttentionModel]) -> None:
    inp = RunInput(text="a b c", masks=MaskSpec(causal=True))
    with pytest.raises(InputError) as err:
        run(models["random"], inp, edit=(EdgeEdit(0, 0, 0, 2, 0.5),))
    assert err.value.field == "edit[0].key" and "masked" in err.value.message
    with pytest.raises(InputError) as err:
        run(models["random"], inp, edit=(EdgeEdit(0, 0, 0, 0, 0.5),))  # query 0 sees only key 0
    assert err.value.field == "edit[0].weight"
    with pytest.raises(InputError) as err:
        run(models["random"], inp, ablate=(HeadAblation(0, 9),))
    assert err.value.field == "ablate[0].head" and "0..3" in err.value.message


# ---- perturbation --------------------------------------------------------------------------------------------------


def test_causal_minilm_leaves_every_earlier_position_exactly_unchanged_through_every_layer(
    models: dict[str, AttentionModel],
) -> None:
    model = models["minilm"]
    inp = RunInput(text=SENTENCE, masks=MaskSpec(causal=True))
    p = 10  # "it", after [CLS]
    result = perturb(Case(model, inp, model.encode(inp), CPU, torch.float32), p, Change("shift", amount=1.0))
    assert len(result.layers) == 6
    for row in [*result.layers, result.final_delta]:
        assert all(d == 0.0 for d in row[:p])
        assert row[p] > 0.01
    (check,) = result.checks
    assert check.name == "causal" and check.holds and check.tested and check.protected == list(range(p))
    assert result.verdict.startswith("Causal masking holds")
    # the control: without the mask, the change reaches earlier positions in layer 0 already
    free = RunInput(text=SENTENCE, masks=MaskSpec())
    moved = perturb(Case(model, free, model.encode(free), CPU, torch.float32), p, Change("shift"))
    assert min(moved.layers[0][:p]) > 0.0 and moved.checks == []


def test_a_broken_mask_is_reported_as_a_leak(
    models: dict[str, AttentionModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test engine whose softmax ignores the eligibility matrix: the verdict must say where the leak is."""
    module = importlib.import_module("engine.softmax")
    real = module.masked_softmax

    def leaky(scores: torch.Tensor, eligible: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return real(scores, torch.ones_like(eligible), *args, **kwargs)

    monkeypatch.setattr(module, "masked_softmax", leaky)
    model = models["minilm"]
    inp = RunInput(text=SENTENCE, masks=MaskSpec(causal=True))
    result = perturb(Case(model, inp, model.encode(inp), CPU, torch.float32), 10, Change("shift"))
    (check,) = result.checks
    assert not check.holds and check.max_delta > 0.0
    assert check.first_leak is not None and check.first_leak.layer == 0 and check.first_leak.position < 10
    assert result.verdict.startswith("Leak: causal masking does not hold")


def test_window_claims_reach_one_window_per_layer(models: dict[str, AttentionModel]) -> None:
    model = models["minilm"]
    inp = RunInput(text=SENTENCE, masks=MaskSpec(window=2))
    p = 3
    result = perturb(Case(model, inp, model.encode(inp), CPU, torch.float32), p, Change("shift"))
    for layer, row in enumerate(result.layers):
        reach = layer + 1
        assert all(row[q] == 0.0 for q in range(len(row)) if abs(q - p) > reach)
        assert all(row[q] > 0.0 for q in range(len(row)) if abs(q - p) <= reach)  # and the claim is tight
    (check,) = result.checks
    assert check.holds and check.protected == [q for q in range(15) if abs(q - p) > 6]


def test_padding_and_token_swaps(models: dict[str, AttentionModel]) -> None:
    textbook = models["textbook"]
    inp = RunInput()  # the chapter's defaults: causal, position 5 (index 4) is padding
    result = perturb(Case(textbook, inp, textbook.encode(inp), CPU, torch.float64), 4, Change("shift", amount=2.0))
    checks = {c.name: c for c in result.checks}
    assert checks["padding"].holds and checks["padding"].protected == [0, 1, 2, 3]
    assert result.layers[0][:4] == [0.0] * 4 and result.layers[0][4] > 0
    with pytest.raises(InputError) as err:
        perturb(Case(textbook, inp, textbook.encode(inp), CPU, torch.float64), 1, Change("token", token="z"))
    assert err.value.field == "change.kind"
    induction = models["induction"]
    inp = RunInput(text="red ball king red ball king", masks=None)
    swapped = perturb(Case(induction, inp, induction.encode(inp), CPU, torch.float32), 2, Change("token", token="moon"))
    assert swapped.tokens_after == ["red", "ball", "moon", "red", "ball", "king"]
    assert swapped.checks[0].holds and swapped.final.startswith("the logits")
    with pytest.raises(InputError) as err:
        perturb(Case(induction, inp, induction.encode(inp), CPU, torch.float32), 2, Change("token", token="qqq"))
    assert err.value.field == "change.token"


def test_shift_is_the_embedding_plus_the_amount(models: dict[str, AttentionModel]) -> None:
    model = models["random"]
    inp = RunInput(text="a b c d")
    before = run(model, inp)
    after = run(model, inp, shift=(InputShift(2, 0.5),))
    diff = after.cache()["hook_full_embed"] - before.cache()["hook_full_embed"]
    assert torch.allclose(diff[0, 2], torch.full_like(diff[0, 2], 0.5), atol=1e-15, rtol=0)
    assert float(diff[0, [0, 1, 3]].abs().max()) == 0.0
    assert replace(inp).text == "a b c d"  # inputs are not mutated by a run


def test_a_run_asked_to_stop_stops_at_the_next_layer(
    models: dict[str, AttentionModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine.stop: a request whose client left is stopped between layers (minilm has six)."""
    import engine.forward

    done: list[int] = []
    event = threading.Event()
    block_forward = engine.forward.block_forward

    def watched(i: int, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        out = block_forward(i, *args, **kwargs)  # type: ignore[arg-type]
        done.append(i)
        if i == 1:
            event.set()  # the client goes away while layer 1 runs
        return out

    monkeypatch.setattr(engine.forward, "block_forward", watched)
    with stop_when(event), pytest.raises(Stopped):
        models["minilm"].run(RunInput(text=SENTENCE), CPU, torch.float32)
    assert done == [0, 1]
    done.clear()
    models["minilm"].run(RunInput(text=SENTENCE), CPU, torch.float32)  # no stop event: the whole pass
    assert done == [0, 1, 2, 3, 4, 5]


def test_unembedding_bias_is_added_and_moves_with_the_network() -> None:
    """logits = Norm(x) W_U + b_U, and `to` moves b_U with W_U (Phi-2's lm_head has a bias); without one, as before."""
    from engine.forward import Unembed
    from engine.norms import LayerNorm

    g = torch.Generator().manual_seed(0)
    d, v = 8, 5
    ln = LayerNorm(torch.rand(d, generator=g) + 0.5, torch.randn(d, generator=g))
    W_U, b_U = torch.randn(d, v, generator=g), torch.randn(v, generator=g)
    x = torch.randn(1, 3, d, generator=g)
    plain, biased = Unembed(ln, W_U), Unembed(ln, W_U, b_U)
    assert torch.equal(biased(x), plain(x) + b_U)
    moved = biased.to(CPU, torch.float64)
    assert moved.b_U is not None and moved.b_U.dtype == torch.float64
    assert torch.allclose(moved(x.double()), (plain(x) + b_U).double(), atol=1e-5)
    assert (moved(x.double()) - plain.to(CPU, torch.float64)(x.double())).abs().max() > 1e-3  # the bias counts
