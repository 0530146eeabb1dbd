"""Generating tokens through the KV cache (engine/analysis/generate.py, /api/decode `generate`): greedy is the full
pass's argmax at every step, a generated token's attention row is the full pass's row on the extended sequence, and
sampling is the same from the same seed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.decode import decode
from engine.analysis.generate import GeneratedToken, Sampling
from engine.models.base import ModelRun, RunInput
from engine.models.induction import InductionModel
from tests.fixtures import make_app_client
from tests.helpers import assert_error

CPU = torch.device("cpu")
PROMPT = "red ball king river frog clock red ball"


@pytest.fixture(scope="module")
def induction() -> InductionModel:
    return InductionModel()


def generated(model: InductionModel, spec: Sampling, dtype: torch.dtype = torch.float64) -> list[GeneratedToken]:
    inp = RunInput(text=PROMPT)
    result = decode(model, inp, model.encode(inp), CPU, dtype, spec)
    assert result.generated is not None
    return result.generated


def full_pass(model: InductionModel, tokens: list[str], dtype: torch.dtype = torch.float64) -> ModelRun:
    return model.run(RunInput(tokens=tokens), CPU, dtype)


def row_diff(token: GeneratedToken, full: ModelRun) -> float:
    t = token.position
    return max(
        float((torch.tensor(rows, dtype=torch.float64) - full.layers[i].attn.weights[0, :, t, : t + 1]).abs().max())
        for i, rows in enumerate(token.weights)
    )


@pytest.mark.parametrize(
    "spec",
    [Sampling(tokens=10), Sampling(tokens=10, sampling="sample", seed=7, temperature=1.5, top_k=20)],
    ids=["greedy", "sample"],
)
def test_generated_rows_are_the_full_pass_rows(induction: InductionModel, spec: Sampling) -> None:
    new = generated(induction, spec)
    s = len(PROMPT.split())
    assert [g.position for g in new] == list(range(s, s + spec.tokens))
    full = full_pass(induction, [*PROMPT.split(), *(g.token for g in new)])
    for g in new:
        assert [len(rows[0]) for rows in g.weights] == [g.position + 1] * 2
        assert row_diff(g, full) <= 1e-5
        p = torch.softmax(full.logits[0, g.position - 1].double(), dim=-1)  # type: ignore[index]
        assert g.p == pytest.approx(float(p[g.id]), abs=1e-6)


def test_greedy_is_the_argmax_of_the_full_pass_at_every_step(induction: InductionModel) -> None:
    new = generated(induction, Sampling(tokens=12), torch.float32)
    tokens = [*PROMPT.split(), *(g.token for g in new)]
    full = full_pass(induction, tokens, torch.float32)
    assert full.logits is not None
    best = full.logits[0].argmax(-1)
    for g in new:
        assert g.id == int(best[g.position - 1])
        assert g.token == induction.vocab[g.id]
    # the induction head carries the repeat on: king river frog clock after "red ball"
    assert [g.token for g in new[:4]] == ["king", "river", "frog", "clock"]


def test_a_row_checked_against_another_token_differs(induction: InductionModel) -> None:
    """Control: the full pass with the last generated token swapped for another word gives another row there, so
    the row check can fail."""
    new = generated(induction, Sampling(tokens=4))
    tokens = [*PROMPT.split(), *(g.token for g in new)]
    tokens[-1] = "moon" if tokens[-1] != "moon" else "duck"
    assert row_diff(new[-1], full_pass(induction, tokens)) > 1e-2


def test_sampling_is_the_same_from_the_same_seed(induction: InductionModel) -> None:
    def draw(seed: int) -> list[int]:
        return [g.id for g in generated(induction, Sampling(tokens=12, sampling="sample", seed=seed, temperature=3))]

    assert draw(11) == draw(11)
    assert draw(11) != draw(12)
    cold = Sampling(tokens=12, sampling="sample", seed=5, temperature=5e-324)  # no inf / inf: the argmax
    assert [g.id for g in generated(induction, cold)] == [g.id for g in generated(induction, Sampling(tokens=12))]
    one = Sampling(tokens=12, sampling="sample", seed=5, temperature=3, top_k=1)
    assert [g.id for g in generated(induction, one)] == [g.id for g in generated(induction, Sampling(tokens=12))]


# ---- /api/decode ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[TestClient]:
    from server.config import Settings

    settings = Settings(device="cpu", models="induction,minilm,random", allowed_hosts="testserver")
    with make_app_client(settings) as client:
        yield client


def test_decode_generates_with_rows(served: TestClient) -> None:
    body = {"model": "induction", "text": PROMPT, "generate": {"tokens": 5}}
    r = served.post("/api/decode", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [g["token"] for g in out["generated"][:4]] == ["king", "river", "frog", "clock"]
    assert [len(g["weights"][1][3]) for g in out["generated"]] == [9, 10, 11, 12, 13]
    assert all(abs(sum(g["weights"][0][0]) - 1) < 1e-5 for g in out["generated"])
    plain = served.post("/api/decode", json={"model": "induction", "text": PROMPT}).json()
    assert plain["generated"] is None and plain["steps"] == out["steps"]
    sampled = {**body, "generate": {"tokens": 8, "sampling": "sample", "seed": 3, "temperature": 2.0}}
    first, again = (served.post("/api/decode", json=sampled).json()["generated"] for _ in range(2))
    assert [g["id"] for g in first] == [g["id"] for g in again]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"model": "minilm", "text": "a b", "masks": {"causal": True}, "generate": {"tokens": 2}},
            "generate",
            "encoder",
        ),
        (
            {"model": "random", "text": "a b", "masks": {"causal": True}, "generate": {"tokens": 2}},
            "generate",
            "predict",
        ),
        ({"model": "induction", "text": PROMPT, "generate": {"tokens": 65}}, "generate.tokens", "ATTNLAB_MAX_GENERATE"),
        ({"model": "induction", "text": PROMPT, "generate": {"tokens": 60}}, "generate.tokens", "at most 56"),
        ({"model": "induction", "text": PROMPT, "generate": {"tokens": 0}}, "generate.tokens", None),
        (
            {"model": "induction", "text": PROMPT, "generate": {"tokens": 2, "temperature": 0}},
            "generate.temperature",
            None,
        ),
        (
            {"model": "induction", "text": PROMPT, "generate": {"tokens": 2, "sampling": "beam"}},
            "generate.sampling",
            None,
        ),
        ({"model": "induction", "text": PROMPT, "generate": {"tokens": 2, "top_k": 0}}, "generate.top_k", None),
    ],
)
def test_generate_refusals_name_the_field(served: TestClient, body: dict[str, Any], field: str, words: str) -> None:
    assert_error(served.post("/api/decode", json=body), 422, field, *([words] if words else []))


def test_the_generate_limit_is_the_servers(make_client: Callable[..., AbstractContextManager[TestClient]]) -> None:
    with make_client(models="induction", max_generate_tokens=3) as client:
        body = {"model": "induction", "text": PROMPT, "generate": {"tokens": 4}}
        assert_error(client.post("/api/decode", json=body), 422, "generate.tokens", "limit 3")
        body["generate"] = {"tokens": 3}
        assert len(client.post("/api/decode", json=body).json()["generated"]) == 3
        assert client.get("/api/health").json()["limits"]["max_generate_tokens"] == 3


# ---- checkpoints ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from engine.models.checkpoint import load_checkpoint
    from tests.checkpoints import make_checkpoint

    return {
        family: load_checkpoint(family, make_checkpoint(family, tmp_path_factory.mktemp(family)), reference=False)
        for family in ("gpt2", "llama", "mistral")
    }


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])  # learned positions; rotary; a 4-key window
@pytest.mark.parametrize("sampling", ["greedy", "sample"])
def test_a_checkpoint_generates_its_full_pass(checkpoints: dict[str, Any], family: str, sampling: str) -> None:
    model = checkpoints[family]
    inp = RunInput(text="The key opens 你 the door")
    enc = model.encode(inp)
    spec = Sampling(tokens=8, sampling=sampling, seed=4, temperature=2.0)  # type: ignore[arg-type]
    result = decode(model, inp, enc, CPU, torch.float32, spec)
    assert result.generated is not None and result.max_diff_vs_full < 1e-5
    tokens = [*enc.tokens, *(g.token for g in result.generated)]
    full = model.run(RunInput(tokens=tokens), CPU, torch.float32)
    assert full.tokens == tokens  # the labels read back to the same pieces
    assert full.logits is not None
    for g in result.generated:
        assert row_diff(g, full) <= 1e-5
        assert g.special == model.pieces.is_special(g.id)
        if sampling == "greedy":
            assert g.id == int(full.logits[0, g.position - 1].argmax())


def test_decode_says_which_tokens_are_special(
    make_client: Callable[..., AbstractContextManager[TestClient]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.checkpoints import make_checkpoint

    directory = make_checkpoint("llama", tmp_path_factory.mktemp("llama"))
    with make_client(models=f"mine={directory}") as client:
        body = {"model": "mine", "text": "the key", "generate": {"tokens": 3}}
        r = client.post("/api/decode", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["tokens"][0] == "<s>" and out["special"] == [True] + [False] * (len(out["tokens"]) - 1)
        assert all(isinstance(g["special"], bool) for g in out["generated"])
