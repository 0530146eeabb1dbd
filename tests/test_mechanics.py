"""The chapter's mechanics: KV-cache decoding, cross-attention, batches, cost, the audit, the scaling sweep and the
classic bugs, through the engine and a real app. Each check has a control that the same check must reject."""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from engine.analysis.cost import CostQuery, cost
from engine.analysis.decode import decode
from engine.analysis.sweep import scale_sweep
from engine.masks import MaskSpec, pair_counts
from engine.models import AttentionModel, RunInput, load_models
from tests.fixtures import make_app_client
from tests.helpers import assert_error

CPU = torch.device("cpu")
WORDS = "red ball king river frog clock seed moon hat rain snow duck"


@pytest.fixture(scope="module")
def models() -> dict[str, AttentionModel]:
    return load_models(["random", "induction", "minilm", "textbook"])


@pytest.fixture(scope="module")
def trained() -> Iterator[TestClient]:
    with make_app_client(models="random,textbook,custom,minilm,induction") as c:
        yield c


# ---- KV-cache decoding ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "inp"),
    [
        ("induction", RunInput(text=f"{WORDS} {WORDS}")),
        (
            "random",
            RunInput(
                text="the cat sat on the mat",
                options={"heads": 8, "kv_heads": 2, "positions": True},
                masks=MaskSpec(causal=True, window=3, blocked=((4, 2),)),
            ),
        ),
        ("textbook", RunInput()),
    ],
)
def test_cached_decoding_equals_full_recomputation_at_every_step(
    models: dict[str, AttentionModel], name: str, inp: RunInput
) -> None:
    model = models[name]
    result = decode(model, inp, model.encode(inp), CPU, torch.float64)
    assert result.max_diff_vs_full < 1e-12
    full = result.full
    for t, step in enumerate(result.steps):
        assert step.cache_length == t + 1
        assert step.cache_bytes == (t + 1) * result.cache.bytes_per_token
        for layer, rows in enumerate(step.weights):
            expected = full.layers[layer].attn.weights[0, :, t, : t + 1]
            assert np.allclose(rows, expected.numpy(), atol=1e-12)
    w = full.layers[0].weights
    assert result.cache.bytes_per_token == len(full.layers) * w.n_kv_heads * (w.d_head + w.d_v) * 8


def test_decoding_without_the_cache_would_differ(models: dict[str, AttentionModel]) -> None:
    """Control: a step that attends over its own key only (no cache) is not the full pass's row."""
    model = models["induction"]
    inp = RunInput(text=f"{WORDS} {WORDS}")
    enc = model.encode(inp)
    full = model.run(inp, CPU, torch.float64, encoded=enc)
    alone = model.run(RunInput(tokens=enc.tokens[-1:]), CPU, torch.float64)
    assert float((alone.layers[-1].resid_out[0, 0] - full.layers[-1].resid_out[0, -1]).abs().max()) > 1e-2


def test_induction_decoding_predicts_the_repeat(trained: TestClient) -> None:
    r = trained.post("/api/decode", json={"model": "induction", "text": f"{WORDS} {WORDS}"}).json()
    words = WORDS.split()
    predicted = [s["next_token"]["token"] for s in r["steps"]]
    assert sum(predicted[t] == words[(t + 1) % 12] for t in range(13, 23)) >= 8
    assert (
        r["cache"]["formula"]
        == "2 (K and V) x 2 layers x 4 kv_heads x 16 d_head x 4 bytes (float32) = 1024 bytes per token"
    )
    assert r["steps"][-1]["cache_bytes"] == 24 * 1024 and r["max_diff_vs_full"] < 1e-4
    assert [len(s["weights"][1][0]) for s in r["steps"]] == list(range(1, 25))


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"model": "random", "text": "a b"}, "masks.causal", "set causal"),
        ({"model": "minilm", "text": "a b", "masks": {"causal": True}}, "model", "encoder"),
        ({"model": "induction", "text": "red ball", "layer": 0}, "layer", "leave layer out"),
        ({"model": "random", "texts": ["a b"], "masks": {"causal": True}}, "texts", "leave texts out"),
    ],
)
def test_decode_refusals_name_the_field(trained: TestClient, body: dict[str, Any], field: str, words: str) -> None:
    assert_error(trained.post("/api/decode", json=body), 422, field, words)


# ---- cross-attention -----------------------------------------------------------------------------------------------


def test_cross_attention_takes_keys_and_values_from_the_source(trained: TestClient) -> None:
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    src = [[2.0, 0.0], [0.0, 2.0], [1.0, -1.0], [0.5, 0.5]]
    eye = [[1.0, 0.0], [0.0, 1.0]]
    body = {
        "x": x,
        "weights": {"w_q": eye, "w_k": eye, "w_v": eye},
        "source": {"x": src, "padding": [True, True, True, False]},
        "include": ["scores", "weights", "contexts"],
    }
    r = trained.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    b = r.json()
    head = b["layers"][0]["heads"][0]
    q, k = torch.tensor(x), torch.tensor(src)
    scores = q @ k.T / math.sqrt(2)
    assert np.allclose(head["scores"], scores.numpy(), atol=1e-6)
    expected = torch.softmax(scores[:, :3], dim=-1)
    assert np.allclose(np.array(head["weights"])[:, :3], expected.numpy(), atol=1e-6)
    assert [row[3] for row in head["weights"]] == [0.0, 0.0, 0.0]  # the source's padding column
    assert np.allclose(head["contexts"], (expected @ k[:3]).numpy(), atol=1e-6)
    assert b["shapes"]["weights"] == [1, 3, 4] and b["source_tokens"] == ["x1", "x2", "x3", "x4"]
    assert b["eligible"] == [[True, True, True, False]] * 3
    # control: without a source the same request is self-attention, 3 x 3
    plain = trained.post("/api/attention", json={k: v for k, v in body.items() if k != "source"}).json()
    assert plain["shapes"]["weights"] == [1, 3, 3]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"model": "random", "text": "a b", "source": {"text": "c d e"}, "masks": {"causal": True}},
            "masks.causal",
            "different sequences",
        ),
        (
            {"model": "random", "text": "a b", "source": {"text": "c d e"}, "masks": {"padding": [True, True]}},
            "masks.padding",
            "source.padding",
        ),
        (
            {"model": "random", "text": "a b", "source": {"text": "c d e", "padding": [True]}},
            "source.padding",
            "1 padding flags for 3 source positions",
        ),
        (
            {"model": "random", "text": "a b", "source": {"text": "c d e"}, "masks": {"blocked": [[0, 3]]}},
            "masks.blocked[0]",
            "key in 0..2",
        ),
        ({"model": "minilm", "text": "a b", "source": {"text": "c d"}}, "source", "no cross-attention"),
        ({"model": "random", "text": "a b", "source": {}}, "source", "give the source"),
    ],
)
def test_cross_attention_refusals(trained: TestClient, body: dict[str, Any], field: str, words: str) -> None:
    assert_error(trained.post("/api/attention", json=body), 422, field, words)


# ---- batches -------------------------------------------------------------------------------------------------------


def test_a_batch_pads_to_the_longest_and_each_item_equals_its_own_run(trained: TestClient) -> None:
    texts = ["The animal was tired", "it ran", "The street was too wide to cross"]
    b = trained.post(
        "/api/attention", json={"model": "minilm", "texts": texts, "layer": 5, "include": ["weights"]}
    ).json()
    assert b["config"]["batch"] == 3 and b["shapes"]["weights"] == [3, 12, 9, 9]
    lengths = [sum(p) for p in b["batch_padding"]]
    assert lengths == [6, 4, 9] and b["batch_tokens"][1][4:] == ["[PAD]"] * 5
    for i, text in enumerate(texts):
        alone = trained.post(
            "/api/attention", json={"model": "minilm", "text": text, "layer": 5, "include": ["weights"]}
        ).json()
        n = lengths[i]
        for h in (0, 7):
            batch_w = np.array(b["layers"][0]["heads"][h]["weights"][i])
            assert np.allclose(batch_w[:n, :n], alone["layers"][0]["heads"][h]["weights"], atol=2e-5)
            assert (batch_w[:, n:] == 0).all()  # no query attends to an item's padding
    assert b["eligible"][1][0] == [True] * 4 + [False] * 5


def test_batch_refusals(trained: TestClient) -> None:
    assert_error(trained.post("/api/attention", json={"model": "textbook", "texts": ["a"]}), 422, "texts", "no batch")
    assert_error(trained.post("/api/attention", json={"model": "random", "texts": ["a", "  "]}), 422, "texts[1]")
    assert_error(trained.post("/api/attention", json={"model": "random", "texts": ["a"], "text": "b"}), 422, "texts")
    assert_error(
        trained.post("/api/attention", json={"model": "random", "texts": ["a b"], "masks": {"padding": [True, True]}}),
        422,
        "masks.padding",
        "fills each item's padding",
    )
    assert_error(
        trained.post("/api/attention", json={"model": "random", "texts": ["a"] * 17}), 422, "texts", "limit 16"
    )
    assert_error(trained.post("/api/perturb", json={"model": "textbook", "texts": ["a"], "position": 0}), 422, "texts")


# ---- cost ----------------------------------------------------------------------------------------------------------


def test_cost_formulas_against_hand_arithmetic() -> None:
    c = cost(CostQuery(batch=2, heads=8, kv_heads=2, seq_len=1024, d_model=512, layers=4, dtype="bfloat16"))
    assert c.d_head == 64 and c.bytes_per_value == 2
    assert c.score_elements == 2 * 8 * 1024 * 1024 == 16_777_216
    assert c.score_bytes == 33_554_432 and c.score_bytes_all_layers == 134_217_728
    assert c.kv_cache_bytes == 2 * 2 * 4 * 2 * 1024 * 64 * 2 == 4_194_304
    assert c.params_one_head == 4 * 512 * 512
    assert c.params_heads == 2 * 512 * 512 + 2 * 512 * 2 * 64  # W_Q, W_O full; W_K, W_V for 2 groups
    assert c.flops["scores"] == 2 * 2 * 8 * 1024 * 1024 * 64
    by_len = {p.seq_len: p.score_bytes for p in c.curve}
    assert by_len[8192] == 64 * by_len[1024] and by_len[2048] == 4 * by_len[1024]
    same = cost(CostQuery(heads=12, seq_len=128, d_model=384))
    assert same.params_heads == same.params_one_head  # H heads of width D/H cost what one head of width D does


def test_cost_endpoint_measures_within_the_limits(trained: TestClient) -> None:
    r = trained.post("/api/cost", json={"seq_len": 128, "heads": 4, "d_model": 64, "layers": 2, "measure": True}).json()
    m = r["measured"]
    assert m["peak_bytes"] >= 4 * 128 * 128 * 4  # at least the scores of one layer were materialised
    assert m["ms"] > 0 and r["tokens_per_s"] > 0 and "profiler" in m["method"]
    assert r["limits"]["max_tokens"] == 512 and r["limits"]["memory_bytes"] > 0
    assert "1024 -> 8192 is 64x" in r["note"]
    assert_error(trained.post("/api/cost", json={"seq_len": 4096, "measure": True}), 422, "seq_len", "limit 512")
    assert_error(trained.post("/api/cost", json={"heads": 5, "d_model": 64}), 422, "heads", "divide")
    assert trained.post("/api/cost", json={"seq_len": 4096}).json()["measured"] is None


# ---- audit ---------------------------------------------------------------------------------------------------------


def test_audit_record_agrees_with_sdpa_and_reports_the_mask_checks(trained: TestClient) -> None:
    body = {"model": "minilm", "text": "the cat sat on the mat", "masks": {"causal": True}, "include": ["audit"]}
    a = trained.post("/api/attention", json=body).json()["audit"]
    assert a["sdpa_max_diff"] < 1e-5
    assert (a["heads"], a["kv_heads"], a["d_k"], a["d_v"], a["layers"]) == (12, 12, 32, 32, 6)
    assert a["projections"]["W_Q"] == [384, 384] and a["scale"]["factor"] == pytest.approx(1 / math.sqrt(32))
    assert a["max_masked_weight"] == 0.0 and a["max_row_sum_error"] < 1e-5 and a["valid_tokens"] == 8
    assert a["peak_bytes"] > 0 and a["tokens_per_s"] > 0
    assert a["perturbation"][0]["mask"] == "causal" and a["perturbation"][0]["holds"]


def test_audit_catches_a_broken_scale(trained: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test engine that forgets the 1/sqrt(d_k): the audit recomputes the scale and sees the difference."""
    module = importlib.import_module("engine.attention")
    monkeypatch.setattr(module, "scale_factor", lambda d_head, scale: 1.0)
    body = {"model": "random", "text": "the cat sat on the mat", "include": ["audit"]}
    assert trained.post("/api/attention", json=body).json()["audit"]["sdpa_max_diff"] > 1e-2


# ---- the scaling sweep ---------------------------------------------------------------------------------------------


def test_unscaled_spread_grows_like_sqrt_dk_while_scaled_stays_flat() -> None:
    rows = scale_sweep([1, 4, 16, 64, 256], samples=4000, seed=0, variance=1.0)
    for r in rows:
        assert r.std_unscaled == pytest.approx(math.sqrt(r.d_k), rel=0.08)
        assert r.std_scaled == pytest.approx(1.0, rel=0.08)
    assert rows[-1].entropy_unscaled < 0.3 < rows[-1].entropy_scaled
    assert rows[-1].max_weight_unscaled > 0.85 > rows[-1].max_weight_scaled
    wide = scale_sweep([64], samples=4000, variance=4.0)[0]
    assert wide.std_scaled == pytest.approx(4.0, rel=0.08)  # the scale removes sqrt(d_k), not the variance


def test_scale_sweep_endpoint(trained: TestClient) -> None:
    r = trained.post("/api/scale-sweep", json={"widths": [2, 128], "samples": 500, "keys": 8}).json()
    assert r["uniform_entropy"] == pytest.approx(math.log(8)) and [w["d_k"] for w in r["widths"]] == [2, 128]
    assert_error(trained.post("/api/scale-sweep", json={"widths": [0]}), 422, "widths[0]")
    assert_error(trained.post("/api/scale-sweep", json={"variance": -1}), 422, "variance")


# ---- classic bugs, pair counts, symmetry -------------------------------------------------------------------------


def test_softmax_over_queries_makes_columns_sum_to_one(trained: TestClient) -> None:
    body = {"model": "random", "text": "the cat sat on a mat", "include": ["weights"], "masks": {}}
    bug = trained.post("/api/attention", json={**body, "demo_bug": "softmax_over_queries"}).json()
    w = np.array(bug["layers"][0]["heads"][0]["weights"])
    assert np.allclose(w.sum(axis=0), 1, atol=1e-5) and not np.allclose(w.sum(axis=1), 1, atol=1e-2)
    assert bug["demo_bug"]["wrong"] is True and "WRONG" in bug["demo_bug"]["note"]
    right = np.array(trained.post("/api/attention", json=body).json()["layers"][0]["heads"][0]["weights"])
    assert np.allclose(right.sum(axis=1), 1, atol=1e-5)


def test_a_flipped_mask_attends_to_exactly_the_masked_keys(trained: TestClient) -> None:
    body = {
        "model": "random",
        "text": "a b c d",
        "masks": {"causal": True},
        "all_masked": "zero",
        "include": ["weights"],
    }
    b = trained.post("/api/attention", json={**body, "demo_bug": "flipped_mask"}).json()
    w = np.array(b["layers"][0]["heads"][0]["weights"])
    eligible = np.array(b["eligible"])
    assert (w[eligible] == 0).all() and (w[~eligible] > 0).all()
    assert_error(
        trained.post("/api/attention", json={**body, "all_masked": "error", "demo_bug": "flipped_mask"}),
        422,
        "masks",
        "no eligible key",
    )


def test_eligible_pair_counts() -> None:
    assert pair_counts(MaskSpec(causal=True), 6) == {"total": 36, "causal": 21, "eligible": 21}
    counts = pair_counts(MaskSpec(causal=True, window=2, padding=(True,) * 5 + (False,), blocked=((3, 3),)), 6)
    assert counts["window"] == 16 and counts["padding"] == 30 and counts["blocked"] == 35
    assert counts["eligible"] == 11 - 1 - 1  # causal+window: 11 pairs; minus the padded key's (5,5); minus (3,3)


def test_equal_w_q_and_w_k_make_symmetric_scores(trained: TestClient) -> None:
    w = [[1.0, 0.5], [0.2, 1.0]]
    body = {
        "x": [[1.0, 0.0], [0.3, 1.0], [0.5, 0.5]],
        "weights": {"w_q": w, "w_k": w, "w_v": w},
        "include": ["scores", "stats"],
    }
    head = trained.post("/api/attention", json=body).json()["layers"][0]["heads"][0]
    scores = np.array(head["scores"])
    assert head["stats"]["qk_symmetric"] is True and np.allclose(scores, scores.T, atol=1e-6)
    other = {**body, "weights": {"w_q": w, "w_k": [[1.0, 0.0], [0.0, 1.0]], "w_v": w}}
    assert trained.post("/api/attention", json=other).json()["layers"][0]["heads"][0]["stats"]["qk_symmetric"] is False


def test_sdpa_reference_is_what_the_audit_compares_with(trained: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit's reference is torch's own fused kernel, which equals softmax(QK^T/sqrt d)V: the audit of a run small
    enough to work by hand calls it once per layer with the scale it recomputes from d_k, reports the numbers worked
    here, and a reference moved by 0.25 shows in sdpa_max_diff as 0.25."""
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    manual = (q @ k.transpose(-1, -2) / 2).masked_fill(~mask, float("-inf")).softmax(-1) @ v
    assert torch.allclose(ref, manual, atol=1e-12)

    x = np.array([[1.0, 0.0], [0.3, 1.0], [0.5, 0.5], [-0.4, 0.8]])
    w_q, w_k, w_v = np.array([[1.0, 0.5], [0.2, 1.0]]), np.array([[0.7, -0.3], [0.4, 0.9]]), np.eye(2)
    body = {
        "x": x.tolist(),
        "weights": {"w_q": w_q.tolist(), "w_k": w_k.tolist(), "w_v": w_v.tolist()},
        "masks": {"causal": True},
        "include": ["audit", "scores"],
    }
    audit_module = importlib.import_module("engine.analysis.audit")
    sdpa = F.scaled_dot_product_attention
    scales: list[float] = []

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        scales.append(kwargs["scale"])
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(audit_module, "F", type("F", (), {"scaled_dot_product_attention": staticmethod(spy)}))
    got = trained.post("/api/attention", json=body).json()
    a = got["audit"]
    assert scales == [pytest.approx(1 / math.sqrt(2))]  # one layer: one call, the scale from d_k = 2
    scores = (x @ w_q) @ (x @ w_k).T / math.sqrt(2)  # (S, S), by hand
    causal = np.tri(4, dtype=bool)
    np.testing.assert_allclose(got["layers"][0]["heads"][0]["scores"], scores, atol=1e-5)  # the same convention
    e = np.where(causal, np.exp(scores - scores.max(axis=1, keepdims=True)), 0.0)
    weights = e / e.sum(axis=1, keepdims=True)
    entropy = -np.where(causal, weights * np.log(np.where(causal, weights, 1.0)), 0.0).sum(axis=1).mean()
    assert (a["heads"], a["d_k"], a["layers"], a["seq_len"], a["valid_tokens"]) == (1, 2, 1, 4, 4)
    assert a["scale"]["factor"] == pytest.approx(1 / math.sqrt(2))
    assert a["score_range"] == pytest.approx([scores[causal].min(), scores[causal].max()], abs=1e-5)
    assert a["entropy"] == pytest.approx(entropy, abs=1e-5)
    assert a["max_masked_weight"] == 0.0 and a["max_row_sum_error"] < 1e-6 and a["sdpa_max_diff"] < 1e-5
    assert a["perturbation"][0]["mask"] == "causal" and a["perturbation"][0]["holds"]

    def moved(*args: Any, **kwargs: Any) -> torch.Tensor:
        return sdpa(*args, **kwargs) + 0.25

    monkeypatch.setattr(audit_module, "F", type("F", (), {"scaled_dot_product_attention": staticmethod(moved)}))
    assert trained.post("/api/attention", json=body).json()["audit"]["sdpa_max_diff"] == pytest.approx(0.25, abs=1e-5)


def test_a_cost_past_64_bits_is_a_number_not_a_500(trained: TestClient) -> None:
    """Found by the cost fuzz: a batch of 57,267 over 99,999 layers needs more score bytes at the curve's longest
    length than a 64-bit integer holds."""
    r = trained.post("/api/cost", json={"batch": 57267, "layers": 99999})
    assert r.status_code == 200, r.text[:300]
    assert max(p["score_bytes"] for p in r.json()["curve"]) > 2**64
