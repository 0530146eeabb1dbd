"""The textbook example checked by hand (plain Python arithmetic), the random layer's promises, stats."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from engine.errors import InputError
from engine.masks import MaskSpec
from engine.models import RunInput, load_models
from engine.models.textbook import W_K, W_Q, W_V, X
from engine.stats import head_similarity, head_stats
from tests.helpers import ROOT

CPU = torch.device("cpu")


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def by_hand(eligible: list[list[bool]]) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """The chapter's computation with pencil-and-paper arithmetic."""
    q, k, v = matmul(X, W_Q), matmul(X, W_K), matmul(X, W_V)
    scores = [[sum(a * b for a, b in zip(qi, kj, strict=True)) / math.sqrt(2) for kj in k] for qi in q]
    weights = []
    for i, row in enumerate(scores):
        exps = [math.exp(s) if eligible[i][j] else 0.0 for j, s in enumerate(row)]
        total = sum(exps)
        weights.append([e / total for e in exps])
    contexts = [[sum(weights[i][j] * v[j][c] for j in range(5)) for c in range(3)] for i in range(5)]
    return scores, weights, contexts


def test_textbook_default_masks_match_hand_arithmetic() -> None:
    run = load_models(["textbook"])["textbook"].run(RunInput(), CPU, torch.float64)
    assert run.masks == MaskSpec(causal=True, padding=(True, True, True, True, False))
    eligible = [[j <= i and j != 4 for j in range(5)] for i in range(5)]
    assert run.eligible.tolist() == eligible
    scores, weights, contexts = by_hand(eligible)
    a = run.layers[0].attn
    assert a.scale_factor == pytest.approx(1 / math.sqrt(2))
    torch.testing.assert_close(a.scores[0, 0], torch.tensor(scores, dtype=torch.float64))
    torch.testing.assert_close(a.weights[0, 0], torch.tensor(weights, dtype=torch.float64))
    torch.testing.assert_close(a.output[0], torch.tensor(contexts, dtype=torch.float64))  # no W_O: concat
    assert a.weights[0, 0, 0].tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]  # the first query sees only itself


def test_textbook_numbers_can_be_replaced() -> None:
    model = load_models(["textbook"])["textbook"]
    x = torch.eye(4, dtype=torch.float64)
    run = model.run(RunInput(x=x, masks=MaskSpec()), CPU, torch.float64)
    q, k = torch.tensor(W_Q, dtype=torch.float64), torch.tensor(W_K, dtype=torch.float64)
    torch.testing.assert_close(run.layers[0].attn.scores[0, 0], (q @ k.T) / math.sqrt(2))
    assert run.tokens == ["x1", "x2", "x3", "x4"]
    with pytest.raises(InputError) as err:
        model.tokenize(RunInput(text="a b c"))
    assert err.value.field == "text" and "3 tokens for 5" in err.value.message


def test_random_repeated_token_gets_the_same_vector() -> None:
    model = load_models(["random"])["random"]
    run = model.run(RunInput(text="a b a", masks=MaskSpec()), CPU, torch.float64)
    x = run.layers[0].resid_in[0]
    torch.testing.assert_close(x[0], x[2])
    assert not torch.equal(x[0], x[1])
    again = model.run(RunInput(text="a b a", masks=MaskSpec()), CPU, torch.float64)
    torch.testing.assert_close(again.layers[0].attn.weights, run.layers[0].attn.weights)


def test_random_without_positions_is_permutation_equivariant() -> None:
    model = load_models(["random"])["random"]
    words = ["the", "cat", "sat", "on", "a", "mat"]
    perm = [3, 0, 5, 1, 4, 2]
    a = model.run(RunInput(tokens=words, masks=MaskSpec()), CPU, torch.float64).layers[0].attn.weights[0]
    b = model.run(RunInput(tokens=[words[i] for i in perm], masks=MaskSpec()), CPU, torch.float64)
    p = torch.tensor(perm)
    torch.testing.assert_close(b.layers[0].attn.weights[0], a[:, p][:, :, p])
    with_pos = RunInput(tokens=[words[i] for i in perm], masks=MaskSpec(), options={"positions": True})
    c = model.run(with_pos, CPU, torch.float64).layers[0].attn.weights[0]
    assert float((c - a[:, p][:, :, p]).abs().max()) > 1e-3  # positions break the symmetry


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"d_model": 64, "heads": 7}, "options.heads", "got 7 heads for width 64: width must divide by heads"),
        ({"heads": 4, "kv_heads": 3}, "options.kv_heads", "heads must divide by kv_heads"),
        ({"depth": 2}, "options.depth", "unknown option"),
    ],
)
def test_random_options_are_validated(options: dict[str, int], field: str, words: str) -> None:
    with pytest.raises(InputError) as err:
        load_models(["random"])["random"].run(RunInput(text="a b", options=options), CPU, torch.float32)
    assert err.value.field == field and words in err.value.message


def test_stats_report_the_real_numbers() -> None:
    scores = torch.tensor([[[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [3.0, 0.0, 0.0]]], dtype=torch.float64)
    eligible = torch.tensor([[True, False, False], [True, True, False], [False, False, False]])
    weights = torch.tensor([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    (st,) = head_stats(scores, weights, eligible)
    assert st.entropy == pytest.approx([0.0, math.log(2), 0.0])
    assert st.zero_rows == [2]
    assert st.max_row_sum_error == 0.0 and st.max_masked_weight == 0.0
    e = math.exp
    assert st.masked_share[0] == pytest.approx((e(1) + e(2)) / (1 + e(1) + e(2)))
    assert st.masked_share[1] == pytest.approx(1 / 3)
    assert st.masked_weight == [0.0, 0.0, 0.0]
    assert (st.score_min, st.score_max) == (0.0, 3.0)
    assert (st.eligible_score_min, st.eligible_score_max) == (0.0, 1.0)
    assert st.mean_distance == pytest.approx((0 + 0.5) / 2)
    sim = head_similarity(torch.stack([weights[0], weights[0], torch.eye(3, dtype=torch.float64)]))
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] < 1.0


def test_engine_never_imports_web_libraries() -> None:
    code = (
        "import sys, engine, engine.models, engine.stats, engine.device, pkgutil, importlib\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'engine.'):\n"
        "    if not m.name.startswith('engine.train_'): importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('fastapi', 'starlette', 'jinja2', 'uvicorn'))\n"
        "assert not bad, bad\nprint('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr
