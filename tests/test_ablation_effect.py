"""/api/heads with include ablation_effect: each head's measured importance beside its attention scores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.analysis.ablation import ranks, spearman
from tests.fixtures import make_app_client

REPEAT = "red ball king river frog clock seed moon red ball king river frog clock seed moon"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    from server.config import Settings

    settings = Settings(device="cpu", models="induction,minilm,textbook", allowed_hosts="testserver")
    with make_app_client(settings) as c:
        yield c


def heads(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post("/api/heads", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_each_effect_is_the_loss_change_intervene_measures_for_that_head(client: TestClient) -> None:
    """On a given text, a head's ablation_effect equals /api/intervene's loss_after - loss_before for the same
    zero-ablation: the two routes run the same forward with the same intervention."""
    r = heads(client, model="induction", text=REPEAT, include=["ablation_effect"])
    assert r["ablation_metric"] == "loss" and r["scored_on"] == "input"
    for row in r["heads"]:
        body = {"model": "induction", "text": REPEAT, "ablate": [{"layer": row["layer"], "head": row["head"]}]}
        i = client.post("/api/intervene", json=body).json()
        assert i["loss_before"] == pytest.approx(r["ablation_baseline"], abs=1e-5)
        assert row["ablation_effect"] == pytest.approx(i["loss_after"] - i["loss_before"], abs=1e-5)


def test_on_the_probe_the_previous_token_head_matters_most_and_the_induction_heads_share_the_work(
    client: TestClient,
) -> None:
    """The induction model's probe: ablating L0H1 (previous-token score 0.94) costs over a nat, while each of the
    four layer-1 induction heads (induction scores about 0.9) costs a fraction of that alone: attention scores do
    not rank importance, which the rank correlation says (negative for induction on this probe)."""
    r = heads(client, model="induction", include=["ablation_effect"])
    assert r["scored_on"] == "probe"
    by = {(h["layer"], h["head"]): h for h in r["heads"]}
    top = max(r["heads"], key=lambda h: h["ablation_effect"])
    assert (top["layer"], top["head"]) == (0, 1) and top["ablation_effect"] > 1.0
    assert top["previous_token"] > 0.9
    induction_heads = [h for h in r["heads"] if h["induction"] > 0.5]
    assert len(induction_heads) >= 2
    assert all(h["ablation_effect"] < top["ablation_effect"] / 4 for h in induction_heads)
    rho = r["ablation_rank_correlation"]
    assert rho["induction"] is not None and rho["induction"] < 0
    assert rho["bracket_match"] is None  # no brackets on the probe: no score to rank
    assert by[(0, 1)]["ablation_effect"] == top["ablation_effect"]


def test_an_encoder_measures_the_change_of_its_output(client: TestClient) -> None:
    text = "The animal didn't cross the street because it was too tired"
    r = heads(client, model="minilm", text=text, include=["ablation_effect"])
    assert r["ablation_metric"] == "output" and r["ablation_baseline"] == 0.0
    effects = [h["ablation_effect"] for h in r["heads"]]
    assert len(effects) == 72 and min(effects) >= 0.0 and max(effects) > 0.1


def test_without_include_nothing_is_ablated(client: TestClient) -> None:
    r = heads(client, model="induction")
    assert r["ablation_metric"] is None and all(h["ablation_effect"] is None for h in r["heads"])


def test_the_ablation_count_is_bounded_and_include_is_strict(
    client: TestClient, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    bad = client.post("/api/heads", json={"model": "induction", "include": ["weights"]})
    assert bad.status_code == 422 and bad.json()["error"]["field"].startswith("include"), bad.text
    with make_client(models="induction", max_ablation_heads=4) as small:
        r = small.post("/api/heads", json={"model": "induction", "include": ["ablation_effect"]})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["field"] == "include" and "8 heads" in err["message"] and "ATTNLAB_MAX_ABLATION_HEADS" in err["message"]


def test_spearman_ranks_ties_and_refuses_what_it_cannot_rank() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert ranks([5.0, 1.0, 5.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, None, 4, 5], [1, 3, 2, None, 4]) == pytest.approx(1.0)  # pairs with a None are left out
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2], [1, 2]) is None
