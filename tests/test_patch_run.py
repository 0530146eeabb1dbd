"""POST /api/patch/run: one cell of a patching grid opened as a run, checked by the identities of each hook."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.fixtures import make_app_client

CLEAN = "red ball king river frog red ball king"
CORRUPTED = "red ball moon river frog red ball king"  # position 2 differs


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:

    with make_app_client(models="induction,minilm") as c:
        yield c


def weights(body: dict[str, Any]) -> np.ndarray:
    """(L, H, S, S) float64."""
    return np.asarray([[h["weights"] for h in layer["heads"]] for layer in body["layers"]], dtype=np.float64)


def attention(client: TestClient, text: str) -> np.ndarray:
    r = client.post("/api/attention", json={"model": "induction", "text": text, "include": ["weights"]})
    assert r.status_code == 200, r.text
    return weights(r.json())


def opened(client: TestClient, hook: str, row: int, column: int, **corrupted: Any) -> dict[str, Any]:
    body = {
        "clean": {"model": "induction", "text": CLEAN},
        "corrupted": {"model": "induction", "text": CORRUPTED, "include": ["weights"], **corrupted},
        "hook": hook,
        "cell": {"layer": row, "column": column},
    }
    r = client.post("/api/patch/run", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_layer_0s_input_patched_at_the_changed_position_is_the_clean_run_and_elsewhere_the_corrupted_one(
    client: TestClient,
) -> None:
    clean, corrupted = attention(client, CLEAN), attention(client, CORRUPTED)
    assert np.abs(clean - corrupted).max() > 1e-2  # the corruption moves the maps
    at_change = opened(client, "resid_pre", 0, 2)
    assert at_change["patched"] == {
        "hook": "resid_pre",
        "layer": 0,
        "column": 2,
        "clean_tokens": CLEAN.split(),
        "changed_positions": [2],
    }
    assert at_change["tokens"] == CORRUPTED.split()  # the run is the corrupted input's, carrying one clean vector
    assert np.array_equal(weights(at_change), clean)
    elsewhere = opened(client, "resid_pre", 0, 5)
    assert np.array_equal(weights(elsewhere), corrupted)


def test_a_pattern_patch_gives_that_head_the_clean_map_and_a_z_patch_keeps_the_corrupted_one(
    client: TestClient,
) -> None:
    clean, corrupted = attention(client, CLEAN), attention(client, CORRUPTED)
    pattern = weights(opened(client, "pattern", 1, 2))
    assert np.array_equal(pattern[1, 2], clean[1, 2])
    assert np.array_equal(pattern[0], corrupted[0]) and np.array_equal(pattern[1, 0], corrupted[1, 0])
    z = weights(opened(client, "z", 0, 1))
    assert np.array_equal(z[0], corrupted[0])  # z is after the weights: layer 0's maps are the corrupted ones
    assert np.abs(z[1] - corrupted[1]).max() > 1e-4  # and the clean context of L0H1 moves layer 1's maps


def test_the_answer_takes_the_corrupted_bodys_layer_and_form(client: TestClient) -> None:
    one = opened(client, "z", 0, 1, layer=1)
    assert [layer["index"] for layer in one["layers"]] == [1]
    body = {
        "clean": {"model": "induction", "text": CLEAN},
        "corrupted": {"model": "induction", "text": CORRUPTED, "include": ["weights"], "precision": "float16"},
        "hook": "z",
        "cell": {"layer": 0, "column": 1},
    }
    r = client.post("/api/patch/run", json=body, headers={"Accept": "application/vnd.attnlab.arrays"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/vnd.attnlab.arrays")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cell": {"layer": 2, "column": 0}}, "cell.layer"),
        ({"cell": {"layer": 0, "column": 4}}, "cell.column"),  # z: 4 heads, 0..3
        ({"cell": {"layer": 0, "column": -1}}, "cell.column"),
        ({"hook": "mlp_out"}, "hook"),  # induction is attention-only
        ({"clean": {"model": "induction", "text": CLEAN, "include": ["weights"]}}, "clean.include"),
        ({"corrupted": {"model": "induction", "text": "red ball moon"}}, "corrupted"),
        ({"corrupted": {"model": "minilm", "text": CORRUPTED}}, "corrupted.model"),
        ({"corrupted": {"model": "induction", "text": CORRUPTED, "masks": {"causal": False}}}, "corrupted.masks"),
    ],
)
def test_a_cell_or_body_it_cannot_run_is_refused_by_name(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    body = {
        "clean": {"model": "induction", "text": CLEAN},
        "corrupted": {"model": "induction", "text": CORRUPTED},
        "hook": "z",
        "cell": {"layer": 0, "column": 1},
        **change,
    }
    r = client.post("/api/patch/run", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field, r.text
