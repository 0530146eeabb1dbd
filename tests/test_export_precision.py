"""An export (POST /api/export, attnlab.export_html) embeds a small run at float32, so the chapter's printed numbers
stay exact (the textbook's 0.241, which float16 writes as 0.240), and a large one at float16: the threshold is
server/export.py FLOAT32_WEIGHTS weights in all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import attnlab
from server.export import FLOAT32_WEIGHTS
from wire.arrays import read_arrays
from wire.standalone import read_embedded


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def embedded(page: str) -> Any:
    return read_arrays(read_embedded(page))


def test_the_textbook_export_holds_the_float32_weights_exactly(client: TestClient) -> None:
    page = client.post("/api/export", json={"model": "textbook"})
    assert page.status_code == 200, page.text[:500]
    got = embedded(page.text)
    want = client.post("/api/attention", json={"model": "textbook", "include": ["weights"]}).json()
    assert got["config"]["precision"] == "float32"
    weights = got["layers"][0]["heads"][0]["weights"]
    assert weights.dtype == np.float32
    # JSON's shortest float32 digits read back to the very float32 the export holds
    np.testing.assert_array_equal(weights, np.array(want["layers"][0]["heads"][0]["weights"], dtype=np.float32))
    assert f"{weights[3][1]:.3f}" == "0.241"  # the chapter's number
    assert f"{np.float16(weights[3][1]):.3f}" == "0.240"  # what the float16 file showed


def random_text(n: int) -> dict[str, Any]:
    return {"model": "random", "text": " ".join(f"w{i}" for i in range(n)), "view": "all"}


def test_the_threshold_in_weights_decides_float32_or_float16(client: TestClient) -> None:
    """The random model's 4 heads: 128 tokens are 65,536 weights (float32), 129 tokens 66,564 (float16)."""
    assert FLOAT32_WEIGHTS == 4 * 128 * 128
    at = embedded(client.post("/api/export", json=random_text(128)).text)
    above = embedded(client.post("/api/export", json=random_text(129)).text)
    assert at["config"]["precision"] == "float32" and above["config"]["precision"] == "float16"
    assert {h["weights"].dtype for h in at["layers"][0]["heads"]} == {np.dtype(np.float32)}
    assert {h["weights"].dtype for h in above["layers"][0]["heads"]} == {np.dtype(np.float16)}
    want = client.post("/api/attention", json={"model": "random", "text": random_text(129)["text"]}).json()
    for got_head, want_head in zip(above["layers"][0]["heads"], want["layers"][0]["heads"], strict=True):
        exact = np.array(want_head["weights"], dtype=np.float32).astype(np.float16)
        np.testing.assert_array_equal(got_head["weights"], exact)  # float16 of the float32 run


def test_the_moved_export_keeps_its_strips_at_the_same_precision(client: TestClient) -> None:
    small = embedded(client.post("/api/export", json={"model": "textbook", "matrix": "moved"}).text)
    head = small["layers"][0]["heads"][0]
    assert head["weights"].dtype == head["value_norms"].dtype == head["contribution"].dtype == np.float32
    large = embedded(client.post("/api/export", json={**random_text(129), "matrix": "moved"}).text)
    head = large["layers"][0]["heads"][0]
    assert head["weights"].dtype == head["value_norms"].dtype == head["contribution"].dtype == np.float16


def test_an_export_carries_the_requests_dtype(client: TestClient) -> None:
    got = embedded(client.post("/api/export", json={"model": "textbook", "dtype": "bfloat16"}).text)
    assert got["config"]["dtype"] == "bfloat16"
    assert got["config"]["max_diff_vs_float32"] > 0


def test_the_notebook_export_keeps_float32_for_the_textbook() -> None:
    page = attnlab.export_html("textbook")
    got = embedded(page)
    weights = got["layers"][0]["heads"][0]["weights"]
    assert weights.dtype == np.float32 and f"{weights[3][1]:.3f}" == "0.241"
