"""POST /api/qk-attribution and engine.analysis.qk: a score as a sum over the residual stream's components."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.qk import qk_attribution
from engine.models.base import AttentionModel, RunInput
from engine.models.checkpoint import load_checkpoint
from engine.models.induction import InductionModel
from tests.checkpoints import PROBE, make_checkpoint
from tests.fixtures import make_app_client

REPEAT = "red ball king river frog red ball king"
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    from server.config import Settings

    settings = Settings(device="cpu", models="induction,minilm,pycode", allowed_hosts="testserver")
    with make_app_client(settings) as c:
        yield c


def attribute(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/qk-attribution", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def every_cell_sums(model: AttentionModel, inp: RunInput, layer: int, cells: list[tuple[int, int]]) -> float:
    """The largest |sum of terms - score| over every head at these cells, in float64."""
    run = model.run(inp, CPU, torch.float64)
    net = model.network(inp, CPU, torch.float64)
    worst = 0.0
    for head in range(run.layers[layer].attn.weights.shape[1]):
        for q, k in cells:
            r = qk_attribution(run, net, layer, head, q, k)
            assert r.score == pytest.approx(float(run.layers[layer].attn.scores[0, head, q, k]), abs=1e-12)
            worst = max(worst, abs(sum(t.value for t in r.terms) - r.score))
    return worst


def test_the_terms_sum_to_the_score_on_induction_every_cell_every_head() -> None:
    """LayerNorm frozen, learned positions in the embedding, 4 heads with W_O and b_O: every cell, masked ones too."""
    model = InductionModel()
    cells = [(q, k) for q in range(8) for k in range(8)]
    assert every_cell_sums(model, RunInput(text=REPEAT), 1, cells) < 1e-10


def test_the_terms_sum_to_the_score_on_pycode_rotary_rmsnorm_and_grouped_keys() -> None:
    model = load_checkpoint("pycode", Path("engine/checkpoints/pycode"), reference=False)
    inp = RunInput(text="def f(x):\n    return [x, x]\n")
    n = len(model.encode(inp).tokens)
    cells = [(n - 1, k) for k in range(n)] + [(3, 1), (5, 5)]
    assert every_cell_sums(model, inp, model.info.n_layers - 1, cells) < 1e-9


def test_the_terms_sum_to_the_score_on_a_gpt2_checkpoint_with_every_bias(tmp_path: Path) -> None:
    model = load_checkpoint("mygpt2", make_checkpoint("gpt2", tmp_path), reference=False)
    inp = RunInput(text=PROBE)
    n = len(model.encode(inp).tokens)
    assert every_cell_sums(model, inp, 1, [(n - 1, 0), (n - 1, n - 2), (4, 2)]) < 1e-9


def test_every_component_is_needed_leaving_one_out_misses_the_score() -> None:
    """The negative control: the same sum without the MLP of layer 0 (or without the norm's bias) is off."""
    model = load_checkpoint("pycode", Path("engine/checkpoints/pycode"), reference=False)
    inp = RunInput(text="def f(x):\n    return [x, x]\n")
    run, net = model.run(inp, CPU, torch.float64), model.network(inp, CPU, torch.float64)
    r = qk_attribution(run, net, 2, 0, 8, 3)
    without = sum(t.value for t in r.terms if "L0 MLP" not in (t.query_source, t.key_source))
    assert abs(without - r.score) > 1e-3
    ind = InductionModel()
    run, net = (
        ind.run(RunInput(text=REPEAT), CPU, torch.float64),
        ind.network(RunInput(text=REPEAT), CPU, torch.float64),
    )
    r = qk_attribution(run, net, 1, 2, 7, 3)
    without = sum(t.value for t in r.terms if "norm bias" not in (t.query_source, t.key_source))
    assert abs(without - r.score) > 1e-3


def test_the_induction_head_matches_king_to_river_through_the_previous_token_head(client: TestClient) -> None:
    """L1H2 at 'king' (7) looking at 'river' (3): the largest term is the query's own embedding against what the
    previous-token head L0H1 wrote into position 3 ('king' came before 'river'), over half of the score."""
    r = attribute(client, model="induction", text=REPEAT, layer=1, head=2, query=7, key=3)
    assert r["eligible"] is True and r["score"] > 5
    assert r["total"] == pytest.approx(r["score"], abs=1e-4)
    top = r["terms"][0]
    assert (top["query_source"], top["key_source"]) == ("embedding", "L0H1")
    assert top["value"] > 0.5 * r["score"]
    assert r["sources"] == ["embedding", "L0H0", "L0H1", "L0H2", "L0H3"]  # no b_O, no MLP in this model
    assert len(r["terms"]) == (len(r["sources"]) + 1) ** 2  # and the norm's bias on both sides


def test_what_cannot_be_attributed_is_refused_by_name(client: TestClient) -> None:
    def refused(**body: Any) -> dict[str, Any]:
        r = client.post("/api/qk-attribution", json=body)
        assert r.status_code == 422, r.text
        return dict(r.json()["error"])

    err = refused(model="minilm", text="a cat sat", layer=1, head=0, query=1, key=0)
    assert err["field"] == "model" and "post-norm" in err["message"]
    assert refused(model="induction", text=REPEAT, layer=1, head=4, query=1, key=0)["field"] == "head"
    assert refused(model="induction", text=REPEAT, layer=1, head=0, query=8, key=0)["field"] == "query"
    assert refused(model="induction", text=REPEAT, layer=2, head=0, query=1, key=0)["field"] == "layer"
    assert refused(model="induction", text=REPEAT, head=0, query=1, key=0)["field"] == "layer"
    assert refused(model="induction", text=REPEAT, layer=1, head=0, query=1, key=0, include=["weights"])["field"] == (
        "include"
    )
    assert refused(model="induction", texts=[REPEAT], layer=1, head=0, query=1, key=0)["field"] == "texts"
