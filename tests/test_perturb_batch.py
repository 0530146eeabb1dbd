"""/api/perturb on a batch (`texts` + `item`: batch independence, padding invariance) and across cross-attention
(`source` + `side`: the source boundary), with negative controls: a forward that mixes items, a padding mask that
is not applied and the classic bugs must each fail the check that claims otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from torch import Tensor

import engine.models.base
from engine.analysis.perturb import perturb
from engine.analysis.perturb_batch import PADDING_TOLERANCE
from engine.analysis.perturb_kernel import Case, Change, PerturbResult
from engine.masks import MaskSpec, eligibility
from engine.models import AttentionModel, load_models
from engine.models.run import RunInput
from engine.softmax import masked_softmax
from server.config import Settings
from tests.fixtures import make_app_client
from tests.helpers import assert_error

CPU = torch.device("cpu")
SENTENCE = "The animal didn't cross the street because it was too tired"
MINILM = [SENTENCE, "it was tired", "a cat"]
INDUCTION = ["red ball king river frog clock red ball king river frog clock", "red ball king red", "frog"]
TEXTS = {"minilm": MINILM, "induction": INDUCTION}
SOURCE = {"model": "random", "text": "the cat sat", "masks": {}}


@pytest.fixture(scope="module")
def models() -> dict[str, AttentionModel]:
    return load_models(["minilm", "induction", "random"])


@pytest.fixture(scope="module")
def trained() -> Iterator[TestClient]:
    settings = Settings(device="cpu", models="minilm,induction,random,textbook", allowed_hosts="testserver")
    with make_app_client(settings) as c:
        yield c


def batch(models: dict[str, AttentionModel], name: str, p: int, item: int, **kw: Any) -> PerturbResult:
    model, inp = models[name], RunInput(texts=TEXTS[name], masks=kw.pop("masks", MaskSpec(causal=True)))
    change = kw.pop("change", Change("direction"))
    return perturb(Case(model, inp, model.encode(inp), CPU, torch.float32), p, change, item=item, **kw)


def by_name(r: PerturbResult | dict[str, Any], name: str) -> Any:
    checks = r.checks if isinstance(r, PerturbResult) else r["checks"]
    (found,) = [c for c in checks if (c.name if isinstance(r, PerturbResult) else c["name"]) == name]
    return found


# ---- batch: every check holds on the engine, and the changed item matches it run alone ----------------------------


@pytest.mark.parametrize("name", ["minilm", "induction"])
def test_batch_claims_hold_and_the_item_moves_as_it_does_alone(models: dict[str, AttentionModel], name: str) -> None:
    item, p = 1, 3
    r = batch(models, name, p, item)
    assert [c.name for c in r.checks] == ["causal", "padding", "batch", "padding_invariance"]
    assert all(c.holds for c in r.checks if c.tested), r.checks
    assert r.item == item and r.reach > 1e-3 and r.padding_tolerance == PADDING_TOLERANCE[torch.float32]
    assert r.item_delta is not None and r.item_delta[item] > 0
    assert [d for j, d in enumerate(r.item_delta) if j != item] == [0.0, 0.0]  # exactly: items never mix
    assert by_name(r, "batch").protected == [0, 2] and by_name(r, "causal").protected == [0, 1, 2]
    assert by_name(r, "padding_invariance").max_delta < 1e-4
    # the batched item moves as the same change moves the text alone, at every real position and layer
    model = models[name]
    alone_inp = RunInput(text=TEXTS[name][item], masks=MaskSpec(causal=True))
    alone = perturb(Case(model, alone_inp, model.encode(alone_inp), CPU, torch.float32), p, Change("direction"))
    n = len(alone.tokens)
    assert r.tokens[:n] == alone.tokens and r.tokens[n:] == ["[PAD]"] * (len(r.tokens) - n)
    for got, want in zip([*r.layers, r.final_delta], [*alone.layers, alone.final_delta], strict=True):
        assert got[:n] == pytest.approx(want, abs=1e-4)
    assert r.verdict.startswith("Causal masking, batch independence and padding invariance hold"), r.verdict


def test_padding_invariance_within_float64_rounding(models: dict[str, AttentionModel]) -> None:
    model, inp = models["induction"], RunInput(texts=INDUCTION)
    r = perturb(Case(model, inp, model.encode(inp), CPU, torch.float64), 0, Change("direction"), item=2)
    check = by_name(r, "padding_invariance")
    assert check.holds and check.max_delta < 1e-12 and r.padding_tolerance == 1e-12


def test_a_padding_position_of_an_item_moves_nothing_else(models: dict[str, AttentionModel]) -> None:
    r = batch(models, "minilm", 8, 2)  # "a cat" is [CLS] a cat [SEP]: position 8 is padding
    assert r.tokens[8] == "[PAD]" and r.reach > 1e-3
    padding = by_name(r, "padding")
    assert padding.tested and padding.holds and 8 not in padding.protected
    assert all(row[q] == 0.0 for row in [*r.layers, r.final_delta] for q in padding.protected)


@pytest.mark.parametrize("kind", ["token", "value"])
def test_a_token_swap_and_a_value_move_stay_in_their_item(models: dict[str, AttentionModel], kind: str) -> None:
    change = Change("token", token="moon") if kind == "token" else Change("value")
    r = batch(models, "induction", 2, 1, change=change)
    assert r.item_delta is not None and r.item_delta[1] > 0 and r.item_delta[0] == r.item_delta[2] == 0.0
    assert all(c.holds for c in r.checks if c.tested), r.checks
    if kind == "token":
        assert r.tokens_after[2] == "moon" and r.tokens_after[:2] == r.tokens[:2]
        assert r.batch_tokens is not None and r.batch_tokens[1][2] == "king"


# ---- negative controls: a broken forward must fail the claim ---------------------------------------------------


def softmax_over_items(
    scores: Tensor, eligible: Tensor, v: Tensor, out: Tensor, *, every_row_keyed: bool
) -> tuple[Tensor, Tensor]:
    """A broken softmax: each weight also divided by that cell's sum over the batch axis, so items read each other."""
    weights = masked_softmax(scores, eligible, every_row_keyed=every_row_keyed)
    weights = weights / weights.sum(dim=0, keepdim=True).clamp_min(1e-30)
    return weights, weights @ v


@pytest.mark.parametrize("name", ["minilm", "induction"])
def test_batch_check_fails_when_the_softmax_mixes_items(
    models: dict[str, AttentionModel], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules["engine.attention"], "softmax_contexts", softmax_over_items)
    r = batch(models, name, 3, 1)
    check = by_name(r, "batch")
    assert check.holds is False and check.max_delta > 0
    assert check.first_leak.item in (0, 2) and check.first_leak.layer == 0
    assert r.verdict.startswith("Leak: batch items are not independent"), r.verdict
    assert by_name(r, "causal").holds  # each item's own causal order survives the bug: only the batch check sees it


@pytest.mark.parametrize("name", ["minilm", "induction"])
def test_padding_invariance_fails_when_padding_keys_are_not_masked(
    models: dict[str, AttentionModel], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_padding(spec: MaskSpec, s: int, device: torch.device | None = None) -> Tensor:
        return eligibility(replace(spec, padding=None), s, device)

    monkeypatch.setattr(engine.models.base, "eligibility", no_padding)
    r = batch(models, name, 1, 1, masks=MaskSpec())  # no causal mask: padding comes after, so it would hide it
    check = by_name(r, "padding_invariance")
    assert check.holds is False and check.first_leak.layer == 0 and check.first_leak.item == 1
    assert check.max_delta > 1e-3
    assert by_name(r, "batch").holds  # the items still do not read each other
    assert r.verdict.startswith("Leak: padding is not invisible"), r.verdict


def test_padding_invariance_fails_under_norm_over_sequence(trained: TestClient) -> None:
    """The classic bug standardises over positions, padding included: each real row reads the padding's statistics."""
    body = {"model": "induction", "texts": INDUCTION, "masks": {"causal": True}, "item": 1, "position": 3}
    r = trained.post("/api/perturb", json={**body, "demo_bug": "norm_over_sequence"}).json()
    assert by_name(r, "padding_invariance")["holds"] is False and r["verdict"].startswith("Leak"), r["verdict"]
    fixed = trained.post("/api/perturb", json=body).json()
    assert by_name(fixed, "padding_invariance")["holds"] is True


# ---- through the API ---------------------------------------------------------------------------------------------


def test_perturb_batch_through_the_api(trained: TestClient) -> None:
    body = {"model": "minilm", "texts": MINILM, "masks": {"causal": True}, "item": 1, "position": 3}
    resp = trained.post("/api/perturb", json=body)
    assert resp.status_code == 200, resp.text
    r = resp.json()
    assert r["item"] == 1 and r["side"] == "query" and r["padding_tolerance"] == 1e-5
    assert r["batch_tokens"][1] == r["tokens"] and len(r["batch_tokens"]) == 3
    assert r["item_delta"][0] == r["item_delta"][2] == 0.0 and r["item_delta"][1] > 0
    assert [c["name"] for c in r["checks"]] == ["causal", "padding", "batch", "padding_invariance"]
    assert by_name(r, "batch")["protected"] == [0, 2] and by_name(r, "batch")["holds"] is True
    # without item, item 0 changes
    first = trained.post("/api/perturb", json={k: v for k, v in body.items() if k != "item"}).json()
    assert first["item"] == 0 and first["item_delta"][1] == first["item_delta"][2] == 0.0


# ---- cross-attention ---------------------------------------------------------------------------------------------


def test_a_query_change_moves_no_other_query(trained: TestClient) -> None:
    body = {**SOURCE, "source": {"text": "a dog ran far"}, "position": 1}
    r = trained.post("/api/perturb", json=body).json()
    (check,) = r["checks"]
    assert check["name"] == "source_boundary" and check["holds"] is True and check["protected"] == [0, 2]
    assert r["final_delta"][0] == r["final_delta"][2] == 0.0 and r["final_delta"][1] > 0
    assert r["source_tokens"] == ["a", "dog", "ran", "far"] and r["side"] == "query"


@pytest.mark.parametrize("bug", ["softmax_over_queries", "norm_over_sequence"])
def test_a_bug_that_mixes_queries_breaks_the_source_boundary(trained: TestClient, bug: str) -> None:
    body = {**SOURCE, "source": {"text": "a dog ran far"}, "position": 1, "demo_bug": bug}
    r = trained.post("/api/perturb", json=body).json()
    assert r["checks"][0]["holds"] is False and r["verdict"].startswith("Leak: the cross-attention boundary"), r


@pytest.mark.parametrize("kind", ["direction", "value", "token"])
def test_a_padding_source_key_reaches_no_query(trained: TestClient, kind: str) -> None:
    change = {"kind": kind, "token": "cow"} if kind == "token" else {"kind": kind}
    source = {"text": "a dog ran far", "padding": [True, True, False, True]}
    body = {**SOURCE, "source": source, "side": "source", "position": 2, "change": change}
    r = trained.post("/api/perturb", json=body).json()
    (check,) = r["checks"]
    assert check["holds"] is True and check["protected"] == [0, 1, 2] and r["reach"] > r["reach_threshold"]
    assert r["final_delta"] == [0.0, 0.0, 0.0]
    if kind == "token":
        assert r["source_tokens_after"] == ["a", "dog", "cow", "far"]
    # the control: the same key unmasked moves the queries, so the claim was one the run could break
    open_ = trained.post("/api/perturb", json={**body, "source": {"text": "a dog ran far"}}).json()
    assert open_["checks"][0]["tested"] is False and max(open_["final_delta"]) > 0
    # and a flipped mask attends to the padding key: the boundary check sees it
    flipped = trained.post("/api/perturb", json={**body, "demo_bug": "flipped_mask"}).json()
    assert flipped["checks"][0]["holds"] is False and flipped["verdict"].startswith("Leak"), flipped["verdict"]


def test_a_blocked_cell_protects_its_query_only(trained: TestClient) -> None:
    body = {**SOURCE, "source": {"text": "a dog ran far"}, "masks": {"blocked": [[0, 1]]}, "side": "source"}
    r = trained.post("/api/perturb", json={**body, "position": 1}).json()
    assert r["checks"][0]["protected"] == [0] and r["checks"][0]["holds"] is True
    assert r["final_delta"][0] == 0.0 and min(r["final_delta"][1:]) > 0


# ---- named 422s --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"model": "random", "text": "a b", "item": 0, "position": 0}, "item", "give texts"),
        ({"model": "random", "texts": ["a b", "c"], "item": 2, "position": 0}, "item", "items 0..1"),
        ({"model": "random", "texts": ["a b"], "item": "0", "position": 0}, "item", "integer"),
        ({"model": "random", "texts": ["a b"], "item": 1024, "position": 0}, "item", "1023"),
        ({"model": "random", "texts": ["a b", "c"], "position": 2}, "position", "padded to 2"),
        ({"model": "textbook", "texts": ["a"], "position": 0}, "texts", "no batch"),
        ({"model": "random", "text": "a b", "side": "source", "position": 0}, "side", "give source"),
        ({"model": "random", "text": "a b", "side": "keys", "position": 0}, "side", "'query' or 'source'"),
        ({**SOURCE, "source": {"text": "x y"}, "side": "source", "position": 2}, "position", "source has 2"),
        ({**SOURCE, "source": {"text": "x y"}, "position": 0, "change": {"kind": "value"}}, "change.kind", "side"),
        ({**SOURCE, "source": {"text": "x y"}, "texts": ["a"], "position": 0}, "texts", "a batch of texts"),
        ({"model": "minilm", "texts": ["a"], "source": {"text": "x"}, "position": 0}, "source", "cross-attention"),
    ],
)
def test_perturb_batch_and_source_bad_input_is_named(
    trained: TestClient, body: dict[str, Any], field: str, words: str
) -> None:
    assert_error(trained.post("/api/perturb", json=body), 422, field, words)


CASE_FIELDS = {"model", "inp", "enc", "encoded", "device", "dtype", "bug"}


def loose_case_parameters(module: Any) -> dict[str, list[str]]:
    """The functions of `module` that take two or more of a Case's fields as parameters of their own."""
    import inspect

    found = {}
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        if fn.__module__ != module.__name__:
            continue
        loose = sorted(CASE_FIELDS.intersection(inspect.signature(fn).parameters))
        if len(loose) > 1:
            found[name] = loose
    return found


@pytest.mark.parametrize("name", ["perturb", "perturb_kernel", "perturb_batch", "perturb_source", "audit"])
def test_the_perturbation_analyses_take_one_case(name: str) -> None:
    """perturb, its batch and source variants and the audit pass one Case (model, input, encoding, device, dtype,
    bug), never those fields one by one."""
    import importlib

    module = importlib.import_module(f"engine.analysis.{name}")
    assert loose_case_parameters(module) == {}
    # the negative control: a function that takes them loose is found
    namespace: dict[str, Any] = {}
    exec("def run(model, inp, enc, device, dtype): pass", namespace)
    fake = type(sys)("fake")
    namespace["run"].__module__ = "fake"
    fake.run = namespace["run"]  # type: ignore[attr-defined]
    assert loose_case_parameters(fake) == {"run": ["device", "dtype", "enc", "inp", "model"]}
