"""The scaling argument on trained models: /api/scale-sweep's `models` against a direct NumPy computation on the
engine's own q and k (after rotary for pycode), and the refusals that name the model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.models import AttentionModel, RunInput
from server.analyses import sweep as scale_sweep_module
from tests.fixtures import make_app_client
from tests.helpers import assert_error

SMALL = {"widths": [8, 32], "samples": 20, "keys": 4}


@pytest.fixture(scope="module")
def app_client() -> Iterator[TestClient]:
    with make_app_client(models="textbook,random,custom,minilm,pycode") as client:
        yield client


def models_of(client: TestClient) -> dict[str, AttentionModel]:
    return client.app.state.models  # type: ignore[attr-defined, no-any-return]


def direct(q: np.ndarray, k: np.ndarray, eligible: np.ndarray) -> dict[str, float]:
    """One head's figures from q (S, d), k (S_k, d) and eligible (S, S_k), written out in NumPy."""
    raw = q @ k.T
    cells = raw[eligible]
    wq, wk = eligible.sum(1).astype(float), eligible.sum(0).astype(float)
    mq = (wq[:, None] * q).sum(0) / wq.sum()
    mk = (wk[:, None] * k).sum(0) / wk.sum()
    vq = (wq[:, None] * (q - mq) ** 2).sum(0) / wq.sum()
    vk = (wk[:, None] * (k - mk) ** 2).sum(0) / wk.sum()
    predicted = float(np.sqrt(np.sum(vq * vk + vq * mk**2 + mq**2 * vk)))
    d = q.shape[1]
    return {
        "d_k": d,
        "cells": int(eligible.sum()),
        "std_raw": float(cells.std()),
        "std_scaled": float(cells.std() / np.sqrt(d)),
        "predicted_std": predicted,
        "isotropic_std": float(np.sqrt(d * vq.mean() * vk.mean())),
        "ratio": float(cells.std()) / predicted,
    }


def engine_heads(model: AttentionModel, text: str) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray, Any]:
    """Every head's (q, k) as the scores read them, the eligibility grid, and the run."""
    with torch.inference_mode():
        run = model.run(RunInput(text=text), torch.device("cpu"), torch.float32)
    eligible = run.eligible.numpy().astype(bool)
    heads = []
    for trace in run.layers:
        q, k = trace.attn.q[0].double().numpy(), trace.attn.k[0].double().numpy()
        per = q.shape[0] // k.shape[0]
        heads += [(q[h], k[h // per]) for h in range(q.shape[0])]
    return heads, eligible, run


@pytest.mark.parametrize("name", ["minilm", "pycode"])
def test_each_heads_spread_matches_a_direct_computation(app_client: TestClient, name: str) -> None:
    model = models_of(app_client)[name]
    text = model.info.default_text
    assert text is not None
    body = app_client.post("/api/scale-sweep", json={**SMALL, "models": [name]}).json()
    [got] = body["trained"]
    assert got["model"] == name and got["text"] == text
    heads, eligible, run = engine_heads(model, text)
    assert got["tokens"] == len(run.tokens) and len(got["heads"]) == len(heads)
    for row, (q, k) in zip(got["heads"], heads, strict=True):
        want = direct(q, k, eligible)
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-4), (name, row["layer"], row["head"], key)
    # the measured spread is of the raw scores: the softmax's scores divided back by the run's factor
    trace = run.layers[-1]
    scaled = trace.attn.scores[0, -1].double().numpy()[eligible]
    assert got["heads"][-1]["std_raw"] == pytest.approx(float((scaled / trace.attn.scale_factor).std()), rel=1e-4)


def test_pycodes_scores_read_q_and_k_after_rotary(app_client: TestClient) -> None:
    """pycode rotates q and k: the spread is of the rotated ones, which differs from the unrotated q.k."""
    model = models_of(app_client)["pycode"]
    text = model.info.default_text
    assert text is not None
    with torch.inference_mode():
        run = model.run(RunInput(text=text), torch.device("cpu"), torch.float32)
    attn = run.layers[0].attn
    assert attn.q_pre_rotary is not None and attn.k_pre_rotary is not None
    eligible = run.eligible.numpy().astype(bool)
    q0, k0 = attn.q_pre_rotary[0, 0].double().numpy(), attn.k_pre_rotary[0, 0].double().numpy()
    unrotated = float((q0 @ k0.T)[eligible].std())
    body = app_client.post("/api/scale-sweep", json={**SMALL, "models": ["pycode"]}).json()
    first = body["trained"][0]["heads"][0]
    assert abs(first["std_raw"] - unrotated) > 1e-3 * unrotated


def test_trained_heads_sit_beside_the_random_sweep_on_a_given_text(app_client: TestClient) -> None:
    text = "def f(x):\n    return [x, (x)]"
    body = app_client.post("/api/scale-sweep", json={**SMALL, "models": ["pycode", "minilm"], "text": text}).json()
    assert [t["model"] for t in body["trained"]] == ["pycode", "minilm"]
    assert [w["d_k"] for w in body["widths"]] == SMALL["widths"]  # the random sweep is still there
    assert all(t["text"] == text for t in body["trained"])
    heads, eligible, _ = engine_heads(models_of(app_client)["minilm"], text)
    assert body["trained"][1]["heads"][0]["std_raw"] == pytest.approx(direct(*heads[0], eligible)["std_raw"], 1e-4)


def test_no_trained_models_asked_gives_an_empty_list(app_client: TestClient) -> None:
    assert app_client.post("/api/scale-sweep", json=SMALL).json()["trained"] == []


@pytest.mark.parametrize(
    ("models", "field", "words"),
    [
        (["minilm", "no-such-model"], "models[1]", "unknown model"),
        (["custom"], "models[0]", "no q or k of its own"),
    ],
)
def test_a_model_without_q_and_k_is_a_422_naming_it(
    app_client: TestClient, models: list[str], field: str, words: str
) -> None:
    assert_error(app_client.post("/api/scale-sweep", json={**SMALL, "models": models}), 422, field, words)


def test_too_many_models_and_a_long_text_are_refused(app_client: TestClient) -> None:
    assert_error(app_client.post("/api/scale-sweep", json={**SMALL, "models": ["minilm"] * 9}), 422, "models")
    long = {**SMALL, "models": ["minilm"], "text": "word " * 10_000}
    resp = app_client.post("/api/scale-sweep", json=long)
    assert resp.status_code == 413 and resp.json()["error"]["field"] == "text"


def test_a_refused_model_costs_no_sweep_and_no_other_models_run(
    app_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every model is checked before the random sweep or any model runs: a body whose second model is refused
    computes nothing (it computed the sweep and minilm's run, then refused)."""
    ran: list[str] = []
    sweep = scale_sweep_module.scale_sweep
    monkeypatch.setattr(scale_sweep_module, "scale_sweep", lambda *a: ran.append("sweep") or sweep(*a))
    minilm = models_of(app_client)["minilm"]
    monkeypatch.setattr(minilm, "run", lambda *a, **k: ran.append("minilm") or type(minilm).run(minilm, *a, **k))
    text = "a text no other test runs, so no cached run stands in"
    body = {**SMALL, "models": ["minilm", "no-such-model"], "text": text}
    assert_error(app_client.post("/api/scale-sweep", json=body), 422, "models[1]", "unknown model")
    assert ran == []
    # the negative control: the same body without the refused model runs both
    assert app_client.post("/api/scale-sweep", json={**body, "models": ["minilm"]}).status_code == 200
    assert ran == ["sweep", "minilm"]
