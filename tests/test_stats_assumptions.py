"""A statistic declares what it assumes (engine/stats.py ASSUMES); a model declares which assumptions do not hold
for it (AttentionModel.breaks); there the statistic is null with the reason, never a number about the wrong thing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import ClassVar

import pytest
import torch
from fastapi.testclient import TestClient

import engine.models
from engine.models import FAMILIES, RunInput
from engine.models.random_layer import RandomModel
from engine.stats import ASSUMES, ASSUMPTIONS, FIXED_QK, head_stats

CPU = torch.device("cpu")
WHY = "rotary embeddings rotate q and k by their positions"


class RotaryLike(RandomModel):
    """The random layer, declared as a model whose scores depend on position (as rotary embeddings make them)."""

    name = "rotary-like"
    breaks: ClassVar[Mapping[str, str]] = {FIXED_QK.name: WHY}
    info = replace(RandomModel.info, name=name)


def test_a_stat_whose_assumption_fails_is_null_with_the_reason() -> None:
    run = RotaryLike().run(RunInput(text="a b c"), CPU, torch.float64)
    t = run.layers[0]
    holds = head_stats(t.attn.scores[0], t.attn.weights[0], run.eligible, t.weights)
    fails = head_stats(t.attn.scores[0], t.attn.weights[0], run.eligible, t.weights, broken=run.breaks)
    assert run.breaks == {"fixed_qk": WHY}
    for h, (a, b) in enumerate(zip(holds, fails, strict=True)):
        assert a.qk_rank == 16 and a.qk_rank_max == 16 and a.qk_symmetric is False and a.refused == {}, h
        assert b.qk_rank is None and b.qk_rank_max is None and b.qk_symmetric is None, h
        assert set(b.refused) == {"qk_rank", "qk_rank_max", "qk_symmetric"}
        assert all("one fixed bilinear form W_Q W_K^T" in r and WHY in r for r in b.refused.values())
        assert a.mean_entropy == b.mean_entropy  # the statistics that assume nothing are unchanged


def test_the_answer_says_why_the_qk_stats_are_null(
    make_client: Callable[..., AbstractContextManager[TestClient]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(engine.models.FAMILIES, RotaryLike.name, RotaryLike)
    monkeypatch.setitem(engine.models.BUILDERS, RotaryLike.name, RotaryLike.build)
    with make_client(models=f"random,{RotaryLike.name}") as client:
        body = {"text": "a b c", "include": ["stats", "weights"]}
        plain = client.post("/api/attention", json={**body, "model": "random"})
        rotary = client.post("/api/attention", json={**body, "model": RotaryLike.name})
        entries = client.get("/api/models").json()["models"]
    names = [m["name"] for m in entries]
    assert [m["breaks"] for m in entries] == [{}, {"fixed_qk": WHY}]
    assert plain.status_code == rotary.status_code == 200, rotary.text[:300]
    assert names == ["random", RotaryLike.name]
    for a, b in zip(plain.json()["layers"][0]["heads"], rotary.json()["layers"][0]["heads"], strict=True):
        assert a["stats"]["qk_rank"] == 16 and a["stats"]["refused"] == {}
        assert b["stats"]["qk_rank"] is None and b["stats"]["qk_symmetric"] is None
        assert WHY in b["stats"]["refused"]["qk_rank"]
        assert a["weights"] == b["weights"]  # the same layer: only the declaration differs


def test_every_declared_break_names_an_assumption_a_statistic_makes() -> None:
    assert set(ASSUMES.values()) <= set(ASSUMPTIONS.values())
    for name, family in FAMILIES.items():
        assert set(family.breaks) <= set(ASSUMPTIONS), name
    with pytest.raises(AssertionError, match="no statistic makes"):
        head_stats(torch.zeros(1, 2, 2), torch.full((1, 2, 2), 0.5), torch.ones(2, 2, dtype=torch.bool),
                   broken={"no_such_assumption": "x"})  # fmt: skip
