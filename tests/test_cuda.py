"""The CUDA path: every shipped model's answers computed on a GPU equal the CPU's, for a run, an intervention and
a patching grid, and the lower precisions keep each row a distribution there too.

Run where torch sees a GPU: ATTNLAB_TEST_CUDA=1 pytest tests/test_cuda.py. Without ATTNLAB_TEST_CUDA these tests are
deselected (tests/conftest.py), never skipped and so never counted as passing; with it and no GPU they fail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.device import resolve_device
from tests.fixtures import make_app_client

pytestmark = pytest.mark.cuda

MODELS = "textbook,random,induction,pycode,digits"  # minilm's weights are a package the GPU machine lacks
BODIES = {
    "textbook": {"model": "textbook"},
    "random": {"model": "random", "text": "the cat sat on the mat because it was warm", "masks": {"causal": True}},
    "induction": {"model": "induction", "text": "red ball king river frog red ball king"},
    "pycode": {"model": "pycode", "text": "def f(x):\n    return [v * 2 for v in x]\n"},
    "digits": {"model": "digits", "sample": "digit-12"},
}
PATCH = {
    "clean": {"model": "induction", "text": "red ball king river frog red ball king"},
    "corrupted": {"model": "induction", "text": "red ball moon river frog red ball king"},
    "metric": {"kind": "logit_diff", "position": 7, "correct": "river", "wrong": "frog"},
}


@pytest.fixture(scope="module")
def apps() -> Iterator[dict[str, TestClient]]:
    with make_app_client(models=MODELS) as cpu, make_app_client(models=MODELS, device="cuda") as gpu:
        yield {"cpu": cpu, "cuda": gpu}


def both(apps: dict[str, TestClient], path: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    answers = []
    for client in (apps["cpu"], apps["cuda"]):
        r = client.post(path, json=body)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    return answers[0], answers[1]


def per_head(body: dict[str, Any], key: str) -> torch.Tensor:
    return torch.tensor([[head[key] for head in layer["heads"]] for layer in body["layers"]], dtype=torch.float64)


def test_auto_resolves_to_the_gpu_and_health_says_so(apps: dict[str, TestClient]) -> None:
    assert torch.cuda.is_available() and resolve_device("auto").type == "cuda"
    assert apps["cuda"].get("/api/health").json()["device"] == "cuda"
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("name", list(BODIES))
def test_every_layers_every_head_on_the_gpu_equals_the_cpu(apps: dict[str, TestClient], name: str) -> None:
    cpu, gpu = both(apps, "/api/attention", BODIES[name])
    assert cpu["tokens"] == gpu["tokens"]
    weights_c, weights_g = per_head(cpu, "weights"), per_head(gpu, "weights")
    assert weights_c.shape == weights_g.shape and weights_c.numel() > 0
    assert float((weights_c - weights_g).abs().max()) < 1e-4
    scores_c, scores_g = per_head(cpu, "scores"), per_head(gpu, "scores")
    finite = torch.isfinite(scores_c)  # masked cells are -inf on both
    assert torch.equal(finite, torch.isfinite(scores_g))
    assert float(((scores_c - scores_g).abs() / scores_c.abs().clamp(min=1))[finite].max()) < 1e-4


def test_an_ablation_on_the_gpu_costs_what_it_costs_on_the_cpu(apps: dict[str, TestClient]) -> None:
    body = {**BODIES["induction"], "ablate": [{"layer": 0, "head": 1}]}  # the previous-token head
    cpu, gpu = both(apps, "/api/intervene", body)
    assert cpu["loss_after"] - cpu["loss_before"] > 0.05  # the ablation matters here (0.105 nats on the CPU)
    assert gpu["loss_before"] == pytest.approx(cpu["loss_before"], abs=1e-4)
    assert gpu["loss_after"] == pytest.approx(cpu["loss_after"], abs=1e-4)


@pytest.mark.parametrize("hook", ["resid_pre", "z"])
def test_a_patching_grid_on_the_gpu_equals_the_cpus(apps: dict[str, TestClient], hook: str) -> None:
    cpu, gpu = both(apps, "/api/patch", {**PATCH, "hook": hook})
    assert cpu["changed_positions"] == gpu["changed_positions"] == [2]
    assert gpu["clean_metric"] == pytest.approx(cpu["clean_metric"], abs=1e-4)
    grid_c, grid_g = torch.tensor(cpu["recovered"]), torch.tensor(gpu["recovered"])
    assert float((grid_c - grid_g).abs().max()) < 1e-4


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_lower_precisions_on_the_gpu_keep_rows_distributions(dtype: str) -> None:
    with make_app_client(models="random", device="cuda", dtype=dtype) as gpu:
        body = gpu.post("/api/attention", json={**BODIES["random"]}).json()
    assert body["config"]["dtype"] == dtype
    weights = per_head(body, "weights")
    assert bool(torch.isfinite(weights).all())
    assert float((weights.sum(-1) - 1).abs().max()) < 1e-2
    assert float(weights[..., 0, 1:].abs().max()) == 0.0  # causal: the first token sees only itself
