"""`dtype` per request: the precision the run computes in, the answer's `max_diff_vs_float32` against the same run in
float32, the magnitude checks in the request's dtype, and the endpoints that compute in the server's dtype refusing
another by name."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import server.refusals
from tests.helpers import assert_error

RANDOM = {"model": "random", "text": "the cat sat on the mat today", "options": {"d_model": 32, "heads": 4}}


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def weights_of(answer: dict[str, Any]) -> np.ndarray:
    return np.array([[h["weights"] for h in layer["heads"]] for layer in answer["layers"]], dtype=np.float64)


def attention(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    got = client.post("/api/attention", json=body)
    assert got.status_code == 200, got.text
    answer: dict[str, Any] = got.json()
    return answer


@pytest.mark.parametrize(("dtype", "most"), [("float64", 1e-6), ("bfloat16", 0.05), ("float16", 0.01)])
def test_each_dtype_runs_and_says_how_far_its_weights_are_from_float32(
    client: TestClient, dtype: str, most: float
) -> None:
    base = attention(client, RANDOM)
    assert base["config"]["dtype"] == "float32"
    assert base["config"]["max_diff_vs_float32"] == 0.0
    other = attention(client, {**RANDOM, "dtype": dtype})
    assert other["config"]["dtype"] == dtype
    measured = float(np.abs(weights_of(other) - weights_of(base)).max())  # the two answers, compared here
    # JSON writes float32 in its shortest digits, which read back within 3e-8 of the float32 value
    assert other["config"]["max_diff_vs_float32"] == pytest.approx(measured, abs=6e-8)
    assert 0 < measured < most


def test_the_difference_covers_only_the_layer_returned(client: TestClient) -> None:
    body = {"model": "textbook", "dtype": "bfloat16", "layer": 0}
    answer = attention(client, body)
    base = attention(client, {"model": "textbook", "layer": 0})
    measured = float(np.abs(weights_of(answer) - weights_of(base)).max())
    assert answer["config"]["max_diff_vs_float32"] == pytest.approx(measured, abs=6e-8)
    assert measured > 1e-4


def test_a_float64_server_measures_its_difference_only_when_asked(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """The server's own dtype, not asked for, costs one pass (null: not measured); asked for, two."""
    with make_client(dtype="float64") as c:
        plain = attention(c, RANDOM)
        assert plain["config"]["dtype"] == "float64" and plain["config"]["max_diff_vs_float32"] is None
        answer = attention(c, {**RANDOM, "dtype": "float64"})
        assert answer["config"]["dtype"] == "float64"
        assert 0 < answer["config"]["max_diff_vs_float32"] < 1e-6
        back = attention(c, {**RANDOM, "dtype": "float32"})
        assert back["config"]["dtype"] == "float32" and back["config"]["max_diff_vs_float32"] == 0.0


def test_the_magnitude_check_reads_the_requests_dtype(client: TestClient) -> None:
    body = {
        "x": [[1e5, 1.0], [2.0, 3.0]],
        "weights": {"w_q": [[1e-5], [1.0]], "w_k": [[1e-5], [1.0]], "w_v": [[1e-5], [1.0]]},
    }
    attention(client, body)  # 1e5 fits float32
    assert_error(client.post("/api/attention", json={**body, "dtype": "float16"}), 422, "x[0][0]", "float16")


def test_a_dtype_the_device_cannot_run_is_a_422_naming_dtype(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server.refusals, "_cannot_run", lambda device, dtype: "no half-precision kernels")
    got = client.post("/api/attention", json={**RANDOM, "dtype": "float16"})
    err = assert_error(got, 422, "dtype", "no half-precision kernels")
    assert "cpu" in err["message"]
    attention(client, {**RANDOM, "dtype": "float32"})  # the server's own is never tried


def test_this_cpu_runs_every_dtype() -> None:
    import torch

    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        assert server.refusals._cannot_run("cpu", dtype) is None, dtype


def test_endpoints_that_compute_in_the_servers_dtype_refuse_another_by_name(client: TestClient) -> None:
    for path in ("/api/heads", "/api/intervene"):
        assert client.post(path, json={**RANDOM, "dtype": "float32"}).status_code == 200, path
        assert_error(client.post(path, json={**RANDOM, "dtype": "bfloat16"}), 422, "dtype", "/api/attention")
    assert_error(client.post("/api/attention", json={**RANDOM, "dtype": "float8"}), 422, "dtype")


def test_precision_rounds_what_goes_out_after_the_dtype_computed_it(client: TestClient) -> None:
    """precision float16 rounds a float64 run's weights for transport; config keeps both names apart."""
    answer = attention(client, {**RANDOM, "dtype": "float64", "precision": "float16"})
    assert answer["config"]["dtype"] == "float64" and answer["config"]["precision"] == "float16"
    exact = attention(client, {**RANDOM, "dtype": "float64"})
    # float16 in JSON's shortest digits: each reads back to the float16 that rounds the float64 run's weight
    np.testing.assert_array_equal(weights_of(answer).astype(np.float16), weights_of(exact).astype(np.float16))
    assert np.abs(weights_of(answer) - weights_of(exact)).max() > 1e-5
