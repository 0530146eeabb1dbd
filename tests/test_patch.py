"""POST /api/patch: activation patching, with the identities that make a patching grid trustworthy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.patch import Metric, patch, recovered_by, token_id
from engine.models.base import RunInput
from engine.models.induction import InductionModel
from tests.fixtures import make_app_client

CLEAN = "red ball king river frog red ball king"
CORRUPTED = "red ball moon river frog red ball king"  # 'king' before 'river' replaced: the repeat's cue is gone
SENTENCE = "The animal didn't cross the street because it was too tired"
INDUCTION = {
    "clean": {"model": "induction", "text": CLEAN},
    "corrupted": {"model": "induction", "text": CORRUPTED},
    "metric": {"kind": "logit_diff", "position": 7, "correct": "river", "wrong": "frog"},
}
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:

    with make_app_client(models="induction,minilm") as c:
        yield c


def patched(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/patch", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def refused(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/patch", json=body)
    assert r.status_code == 422, r.text
    return dict(r.json()["error"])


def test_patching_layer_0s_input_recovers_exactly_1_at_the_changed_position_and_exactly_0_elsewhere(
    client: TestClient,
) -> None:
    r = patched(client, **INDUCTION, hook="resid_pre")
    assert r["changed_positions"] == [2]
    assert r["clean_metric"] > r["corrupted_metric"] + 1.0  # the corruption matters: the repeat is predicted
    first = r["recovered"][0]
    assert first[2] == 1.0
    assert [v for i, v in enumerate(first) if i != 2] == [0.0] * 7
    assert r["metric_grid"][0][2] == r["clean_metric"]
    # one layer on, the previous-token head has moved 'moon' into position 3: that is where it is carried
    later = r["recovered"][1]
    assert later[3] > 0.9 and abs(later[2]) < 0.01
    assert r["forwards"] == 2 * 8 + 2


def test_on_minilm_output_distance_gives_the_same_identity(client: TestClient) -> None:
    r = patched(
        client,
        clean={"model": "minilm", "text": SENTENCE},
        corrupted={"model": "minilm", "text": SENTENCE.replace("tired", "wide")},
        hook="resid_pre",
        metric={"kind": "output_distance"},
    )
    (p,) = r["changed_positions"]
    assert r["clean_metric"] == 0.0 and r["corrupted_metric"] > 1.0
    assert r["recovered"][0][p] == 1.0
    assert all(v == 0.0 for i, v in enumerate(r["recovered"][0]) if i != p)
    mlp = patched(
        client,
        clean={"model": "minilm", "text": SENTENCE},
        corrupted={"model": "minilm", "text": SENTENCE.replace("tired", "wide")},
        hook="mlp_out",
        metric={"kind": "output_distance"},
    )
    assert mlp["rows"] == 6 and mlp["columns"] == len(mlp["tokens"])
    assert max(abs(v) for v in mlp["recovered"][5]) > 0.01  # the last feed-forward at the changed word matters


def test_the_induction_circuit_in_the_head_grid(client: TestClient) -> None:
    """z: the previous-token head L0H1 carries the difference alone (recovered about 1); its pattern does not (it
    looks at the previous position in both inputs: what it moves differs, not where it looks)."""
    z = patched(client, **INDUCTION, hook="z")
    assert (z["rows"], z["columns"]) == (2, 4)
    assert z["recovered"][0][1] > 0.9
    assert max(abs(v) for h, v in enumerate(z["recovered"][0]) if h != 1) < 0.05
    pattern = patched(client, **INDUCTION, hook="pattern")
    assert abs(pattern["recovered"][0][1]) < 0.05


def induction_inputs() -> tuple[InductionModel, RunInput, Any, RunInput, Any, Metric]:
    model = InductionModel()
    ci, bi = RunInput(text=CLEAN), RunInput(text=CORRUPTED)
    metric = Metric("logit_diff", 7, token_id(model, "river", "correct"), token_id(model, "frog", "wrong"))
    return model, ci, model.encode(ci), bi, model.encode(bi), metric


def test_patching_every_heads_z_of_every_layer_recovers_1_and_layer_1s_heads_most_of_it() -> None:
    model, ci, ce, bi, be, metric = induction_inputs()
    every = [(layer, h) for layer in range(2) for h in range(4)]
    assert recovered_by(model, ci, ce, bi, be, "z", every, metric, CPU, torch.float32) == pytest.approx(1.0, abs=1e-9)
    layer_1 = recovered_by(model, ci, ce, bi, be, "z", [(1, h) for h in range(4)], metric, CPU, torch.float32)
    assert layer_1 is not None and layer_1 > 0.8  # measured 1.001: layer 1's heads together carry it all
    none = recovered_by(model, ci, ce, bi, be, "z", [], metric, CPU, torch.float32)
    assert none == 0.0


def test_batched_cells_equal_cells_run_in_chunks_of_one() -> None:
    model, ci, ce, bi, be, metric = induction_inputs()
    whole = patch(model, ci, ce, bi, be, "resid_pre", metric, CPU, torch.float64)
    alone = patch(model, ci, ce, bi, be, "resid_pre", metric, CPU, torch.float64, chunk_bytes=1)
    for a, b in zip(whole.metric_grid, alone.metric_grid, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-12


def test_loss_metric_reads_the_clean_tokens(client: TestClient) -> None:
    r = patched(client, **{**INDUCTION, "metric": {"kind": "loss"}}, hook="resid_pre")
    assert r["clean_metric"] < r["corrupted_metric"]
    assert r["recovered"][0][2] == 1.0


def test_what_patching_cannot_honour_is_refused_by_name(
    client: TestClient, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    short = {**INDUCTION, "corrupted": {"model": "induction", "text": "red ball king"}, "hook": "z"}
    assert refused(client, **short)["field"] == "corrupted"
    other = {**INDUCTION, "corrupted": {"model": "minilm", "text": CLEAN}, "hook": "z"}
    assert refused(client, **other)["field"] == "corrupted.model"
    assert refused(client, **INDUCTION, hook="mlp_out")["field"] == "hook"
    assert refused(client, **INDUCTION, hook="heads")["field"] == "hook"
    bad_token = {**INDUCTION, "metric": {**INDUCTION["metric"], "correct": "zebra"}, "hook": "z"}
    assert refused(client, **bad_token)["field"] == "metric.correct"
    outside = {**INDUCTION, "metric": {**INDUCTION["metric"], "position": 8}, "hook": "z"}
    assert refused(client, **outside)["field"] == "metric.position"
    encoder = {
        "clean": {"model": "minilm", "text": SENTENCE},
        "corrupted": {"model": "minilm", "text": SENTENCE},
        "metric": {"kind": "loss"},
        "hook": "z",
    }
    assert refused(client, **encoder)["field"] == "metric.kind"
    unscaled = {**INDUCTION, "corrupted": {**INDUCTION["corrupted"], "scale": False}, "hook": "z"}
    assert refused(client, **unscaled)["field"] == "corrupted.scale"
    masked = {**INDUCTION, "corrupted": {**INDUCTION["corrupted"], "masks": {"causal": True, "window": 2}}, "hook": "z"}
    assert refused(client, **masked)["field"] == "corrupted.masks"
    layer = {**INDUCTION, "clean": {**INDUCTION["clean"], "layer": 1}, "hook": "z"}
    assert refused(client, **layer)["field"] == "clean.layer"
    with make_client(models="induction", max_patch_cells=10) as small:
        assert small.post("/api/patch", json={**INDUCTION, "hook": "z"}).status_code == 200
        r = small.post("/api/patch", json={**INDUCTION, "hook": "resid_pre"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "hook", r.text
    assert "16 cells" in r.json()["error"]["message"] and "ATTNLAB_MAX_PATCH_CELLS" in r.json()["error"]["message"]
