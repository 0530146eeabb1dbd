"""Heads of unequal widths (`head_widths` with custom weights) against NumPy: each head's scores with its own
1 / sqrt(d_k^h), its weights and contexts, the output through W_O of the unequal contexts' concatenation, and the
422s for widths that cannot split the weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.helpers import assert_error

EVERYTHING = ["scores", "weights", "contexts", "output", "stats", "qkv"]


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def problem(widths: list[int], d_v: int | None = None, w_o: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = sum(widths)
    m = {
        "x": rng.normal(size=(5, 6)),
        "w_q": rng.normal(size=(6, cols)),
        "w_k": rng.normal(size=(6, cols)),
        "w_v": rng.normal(size=(6, cols if d_v is None else d_v * len(widths))),
    }
    if w_o:
        m["w_o"] = rng.normal(size=(m["w_v"].shape[1], 3))
    return m


def body(m: dict[str, np.ndarray], widths: list[int] | None, **extra: Any) -> dict[str, Any]:
    weights = {k: v.tolist() for k, v in m.items() if k != "x"}
    out = {"x": m["x"].tolist(), "weights": weights, "heads": len(widths or [1]), "include": EVERYTHING, **extra}
    if widths is not None:
        out["head_widths"] = widths
    return out


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reference(m: dict[str, np.ndarray], widths: list[int], value_widths: list[int]) -> dict[str, Any]:
    """Each head by hand: its own columns, its own scale, then the concatenation of unequal contexts."""
    x, heads, contexts = m["x"], [], []
    q0 = v0 = 0
    for d, dv in zip(widths, value_widths, strict=True):
        q, k = x @ m["w_q"][:, q0 : q0 + d], x @ m["w_k"][:, q0 : q0 + d]
        v = x @ m["w_v"][:, v0 : v0 + dv]
        scores = q @ k.T / np.sqrt(d)
        weights = softmax(scores)
        heads.append({"q": q, "k": k, "v": v, "scores": scores, "weights": weights, "contexts": weights @ v})
        contexts.append(weights @ v)
        q0, v0 = q0 + d, v0 + dv
    concat = np.concatenate(contexts, axis=-1)
    return {"heads": heads, "output": concat @ m["w_o"] if "w_o" in m else concat}


def check(got: dict[str, Any], want: dict[str, Any], widths: list[int]) -> None:
    layer = got["layers"][0]
    for h, head in enumerate(layer["heads"]):
        for name in ("scores", "weights", "contexts", "q", "k", "v"):
            np.testing.assert_allclose(np.array(head[name]), want["heads"][h][name], atol=2e-5, err_msg=f"{h} {name}")
        assert head["stats"]["qk_rank_max"] == widths[h]
        assert head["stats"]["qk_rank"] == min(widths[h], 6)
    np.testing.assert_allclose(np.array(layer["output"]), want["output"], atol=2e-5)


def test_unequal_heads_match_numpy_head_by_head_and_through_w_o(client: TestClient) -> None:
    widths = [1, 4, 2]
    m = problem(widths)
    got = client.post("/api/attention", json=body(m, widths))
    assert got.status_code == 200, got.text
    answer = got.json()
    check(answer, reference(m, widths, widths), widths)
    assert answer["config"]["head_widths"] == widths
    assert answer["config"]["value_widths"] == widths
    assert answer["config"]["scale_factor"] == 1.0  # head 0's: 1 / sqrt(1)


def test_the_scale_reads_each_heads_own_width_not_the_padded_one(client: TestClient) -> None:
    """Two heads of widths 1 and 4: scaled by 1 and by 1/2. Head 0 padded to 4 and scaled by 1/2 would halve it."""
    widths = [1, 4]
    m = problem(widths, seed=3)
    on = client.post("/api/attention", json=body(m, widths)).json()
    off = client.post("/api/attention", json=body(m, widths, scale=False)).json()
    for h, d in enumerate(widths):
        s_on = np.array(on["layers"][0]["heads"][h]["scores"])
        s_off = np.array(off["layers"][0]["heads"][h]["scores"])
        np.testing.assert_allclose(s_on * np.sqrt(d), s_off, rtol=1e-5, atol=1e-5)


def test_equal_value_widths_when_w_v_has_other_columns_and_no_w_o(client: TestClient) -> None:
    widths = [2, 3]
    m = problem(widths, d_v=2, w_o=False, seed=1)
    got = client.post("/api/attention", json=body(m, widths))
    assert got.status_code == 200, got.text
    answer = got.json()
    check(answer, reference(m, widths, [2, 2]), widths)
    assert np.array(answer["layers"][0]["output"]).shape == (5, 4)  # the concatenation of 2 + 2 columns
    assert answer["config"]["value_widths"] == [2, 2]


def test_equal_widths_given_as_head_widths_match_the_usual_split(client: TestClient) -> None:
    m = problem([3, 3], seed=2)
    usual = client.post("/api/attention", json=body(m, None, heads=2)).json()
    given = client.post("/api/attention", json=body(m, [3, 3])).json()
    for a, b in zip(usual["layers"][0]["heads"], given["layers"][0]["heads"], strict=True):
        np.testing.assert_allclose(a["weights"], b["weights"], atol=1e-6)
    np.testing.assert_allclose(usual["layers"][0]["output"], given["layers"][0]["output"], atol=1e-5)


def test_widths_that_cannot_split_the_weights_are_422s_naming_the_field(client: TestClient) -> None:
    m = problem([2, 3])
    cases = [
        (body(m, [2, 2]), "head_widths", "sum to 4"),
        (body(m, [5, 0], heads=2), "head_widths[1]", "at least 1"),
        (body(m, [6, -1], heads=2), "head_widths[1]", "at least 1"),
        (body(m, [2, 3], heads=3), "head_widths", "one per head"),
        (body(m, [2, 3], kv_heads=1), "kv_heads", "own K and V"),
    ]
    for request, field, words in cases:
        assert_error(client.post("/api/attention", json=request), 422, field, words)
    odd = problem([2, 3], d_v=2)
    odd["w_v"] = odd["w_v"][:, :3]
    odd["w_o"] = odd["w_o"][:3]
    assert_error(client.post("/api/attention", json=body(odd, [2, 3])), 422, "weights.w_v", "multiple of 2")
    short = problem([2, 3])
    short["w_o"] = short["w_o"][:4]
    assert_error(client.post("/api/attention", json=body(short, [2, 3])), 422, "weights.w_o", "(5, d_out)")
    assert_error(
        client.post("/api/attention", json={"model": "textbook", "head_widths": [1, 2]}), 422, "head_widths", "custom"
    )
    zero = client.post("/api/attention", json={**body(m, [2, 3]), "head_widths": []})
    assert_error(zero, 422, "head_widths")
