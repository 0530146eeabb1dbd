"""Gemma-2 and Gemma-3 checkpoints: local and global layers, softcaps, post-norms, per-layer rotary theta.

Each family's tiny random checkpoint (tests/checkpoints.py gemma_config: Gemma-2-2B's config at width 64,
Gemma-3-1B's at width 32 with 7 layers, both with a window of 4, shorter than the probe) is compared by the load's
reference check (engine/models/reference.py) with transformers' eager forward in float32: every layer's every
head's weights and the logits within 1e-5. The same comparison must fail (by more than 1e-3) with one piece
wrong: the attention softcap off, the final softcap off, the windows on the wrong layers, the post-norms moved
before their sublayer, one rotary theta for every layer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.decode import decode
from engine.long import long_run
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointModel, load_checkpoint
from engine.tiles import row
from tests.checkpoints import PROBE, make_checkpoint
from tests.fixtures import make_app_client
from tests.helpers import assert_error

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
FAMILIES = ("gemma2", "gemma3_text")
# each family's layer kinds in its tiny checkpoint: Gemma-2 alternates, Gemma-3 has 5 local layers to 1 global
KINDS = {
    "gemma2": ["local 4", "global", "local 4", "global"],
    "gemma3_text": ["local 4"] * 5 + ["global", "local 4"],
}


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Each family's checkpoint directory, made once for the module."""
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = make_checkpoint(family, tmp_path_factory.mktemp(family))
        return made[family]

    return get


@pytest.fixture(scope="module")
def loaded(directory: Callable[[str], Path]) -> Callable[[str], CheckpointModel]:
    """Each family's model, loaded (and compared with transformers) once for the module."""
    made: dict[str, CheckpointModel] = {}

    def get(family: str) -> CheckpointModel:
        if family not in made:
            made[family] = load_checkpoint(family, directory(family))
        return made[family]

    return get


def diffs(model: CheckpointModel) -> dict[str, float]:
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    return dict(model.reference["max_abs_diff"])


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_transformers(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    model = loaded(family)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (family, d)
    assert [b.kind for b in model.net.net.blocks] == KINDS[family]
    assert model.info.family == family and model.capabilities.decode


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_with_cache_equals_full_pass(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    """Position by position through the KV cache, each local layer's window counted from the cache's length: every
    weight and layer output equal to the whole pass's, in float64 (float32's rounding, some 1e-5 on Gemma-3's
    residual stream, would hide nothing but would blur the check)."""
    model = loaded(family)
    inp = RunInput(text=PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float64)
    assert len(result.steps) > 3 * 4
    assert result.max_diff_vs_full < 1e-10, result.max_diff_vs_full


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_is_the_full_pass_of_what_it_generated(
    family: str, loaded: Callable[[str], CheckpointModel]
) -> None:
    """Greedy tokens generated past the window through the KV cache: each is the full pass's argmax at the
    position before it, and its weights in every layer (a local layer's inside its window) are the full pass's."""
    from engine.analysis.generate import Sampling

    model = loaded(family)
    inp = RunInput(text="The key opens the door")
    enc = model.encode(inp)
    result = decode(model, inp, enc, CPU, torch.float64, Sampling(tokens=8))
    assert result.generated is not None and len(result.generated) == 8
    tokens = [*enc.tokens, *(g.token for g in result.generated)]
    full = model.run(RunInput(tokens=tokens), CPU, torch.float64)
    assert full.logits is not None
    for g in result.generated:
        t = g.position
        assert g.id == int(full.logits[0, t - 1].argmax())
        for i, rows in enumerate(g.weights):
            want = full.layers[i].attn.weights[0, :, t, : t + 1]
            assert float((torch.tensor(rows, dtype=torch.float64) - want).abs().max()) < 1e-6, (t, i)  # sent as float32


def test_decode_with_the_window_counted_from_the_first_position_differs(
    loaded: Callable[[str], CheckpointModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: a local layer's window placed as if the decoded query stood at position 0
    (the cache's length ignored) breaks the equality."""
    import engine.forward

    def from_zero(eligible: torch.Tensor, window: int | None) -> torch.Tensor:
        q = torch.arange(eligible.shape[-2])[:, None]
        return eligible if window is None else eligible & ((q - torch.arange(eligible.shape[-1])).abs() < window)

    monkeypatch.setattr(engine.forward, "within_window", from_zero)
    model = loaded("gemma2")
    inp = RunInput(text=PROBE)
    assert decode(model, inp, model.encode(inp), CPU, torch.float64).max_diff_vs_full > WRONG


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_reports_the_eligibility_it_used(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    """A local layer's eligibility is the request's (causal) narrowed to its window, a global layer's the request's
    own; the weights are zero exactly off the layer's own eligibility."""
    model = loaded(family)
    run = model.run(RunInput(text=PROBE), CPU, torch.float32)
    s = len(run.tokens)
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    causal = k <= q
    for trace, kind in zip(run.layers, KINDS[family], strict=True):
        expected = causal & (q - k < 4) if kind.startswith("local") else causal
        assert torch.equal(trace.attn.eligible, expected), (trace.index, kind)
        w = trace.attn.weights[0]
        assert torch.all(w[:, ~expected] == 0) and torch.all(w[:, expected] > 0)
    assert torch.equal(run.eligible, causal)  # the request's own masks, as the answer's top-level grid


def test_batch_with_padding_equals_each_text_alone(loaded: Callable[[str], CheckpointModel]) -> None:
    """A batch pads the shorter text after its end: every layer of each item (local ones included) is the item
    run alone, on its real positions."""
    model = loaded("gemma2")
    texts = [PROBE, "The dog reads the key to the garden door."]
    batch = model.run(RunInput(texts=texts), CPU, torch.float32)
    for b, text in enumerate(texts):
        alone = model.run(RunInput(text=text), CPU, torch.float32)
        n = len(alone.tokens)
        for got, want in zip(batch.layers, alone.layers, strict=True):
            assert torch.allclose(got.attn.weights[b, :, :n, :n], want.attn.weights[0], atol=TOLERANCE)
        assert batch.logits is not None and alone.logits is not None
        assert torch.allclose(batch.logits[b, :n], alone.logits[0], atol=TOLERANCE)


@pytest.mark.parametrize("family", FAMILIES)
def test_long_run_rows_equal_the_dense_weights(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    """The blockwise long run (no S x S tensor) keeps each layer's own mask and softcap: every row of every head
    recomputed from Q, K and the row normalisers equals the dense pass's weights."""
    model = loaded(family)
    inp = RunInput(text=PROBE)
    dense = model.run(inp, CPU, torch.float32)
    run = long_run(model, inp, CPU, torch.float32, grid=8, pyramid_bytes=1 << 20)
    s = len(dense.tokens)
    worst = 0.0
    for keep, trace in zip(run.layers, dense.layers, strict=True):
        for h in range(trace.attn.weights.shape[1]):
            for query in (0, 5, s // 2, s - 1):
                worst = max(worst, float((row(keep, h, query) - trace.attn.weights[0, h, query]).abs().max()))
    assert worst < TOLERANCE, worst


# --- negative controls: the same comparison, one piece wrong, a difference far past the tolerance ---


@dataclass(frozen=True)
class Before:
    """A norm applied to what a sublayer reads, then the sublayer's own pre-norm: the post-norm moved before it."""

    moved: Any
    pre: Any

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.pre(self.moved(x))

    def to(self, device: torch.device | str, dtype: torch.dtype) -> Before:
        return Before(self.moved.to(device, dtype), self.pre.to(device, dtype))


def post_norms_moved_before(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gemma2 as gemma2

    original = gemma2.Block

    def moved(**kw: Any) -> Any:
        kw["ln_pre"] = Before(kw.pop("ln_post_attn"), kw["ln_pre"])
        kw["ln_pre_mlp"] = Before(kw.pop("ln_post_mlp"), kw["ln_pre_mlp"])
        return original(**kw)

    monkeypatch.setattr(gemma2, "Block", moved)


def attention_softcap_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gemma2 as gemma2

    original = gemma2.optional_number
    monkeypatch.setattr(
        gemma2, "optional_number", lambda c, n: None if n == "attn_logit_softcapping" else original(c, n)
    )


def final_softcap_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gemma2 as gemma2

    original = gemma2.optional_number
    monkeypatch.setattr(
        gemma2, "optional_number", lambda c, n: None if n == "final_logit_softcapping" else original(c, n)
    )


def windows_on_the_wrong_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gemma2 as gemma2
    import engine.models.families.gemma3_text as gemma3

    original = gemma2.layer_types
    swap = {gemma2.LOCAL: gemma2.GLOBAL, gemma2.GLOBAL: gemma2.LOCAL}
    for module in (gemma2, gemma3):
        monkeypatch.setattr(module, "layer_types", lambda c, every: [swap[k] for k in original(c, every)])


def one_theta_for_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gemma3_text as gemma3

    original = gemma3.rotaries

    def one(config: Any, d_head: int) -> Any:
        kinds = original(config, d_head)
        return {kind: kinds[gemma3.LOCAL] for kind in kinds}

    monkeypatch.setattr(gemma3, "rotaries", one)


CONTROLS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "attention softcap off": attention_softcap_off,
    "final softcap off": final_softcap_off,
    "windows on the wrong layers": windows_on_the_wrong_layers,
    "post-norms moved before the sublayer": post_norms_moved_before,
    "one theta for every layer": one_theta_for_every_layer,
}
CASES = [
    ("gemma2", "attention softcap off"),
    ("gemma2", "final softcap off"),
    ("gemma2", "windows on the wrong layers"),
    ("gemma2", "post-norms moved before the sublayer"),
    ("gemma3_text", "windows on the wrong layers"),
    ("gemma3_text", "post-norms moved before the sublayer"),
    ("gemma3_text", "one theta for every layer"),
]


@pytest.mark.parametrize(("family", "control"), CASES)
def test_wrong_piece_fails_the_comparison(
    family: str, control: str, directory: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    CONTROLS[control](monkeypatch)
    d = diffs(load_checkpoint(family, directory(family)))
    key = "output" if control == "final softcap off" else "weights"
    assert d[key] > WRONG, (control, d)


# --- the API: each layer's kind, each layer's eligibility, QK attribution refused through a softcap ---


@pytest.fixture(scope="module")
def client(directory: Callable[[str], Path]) -> Iterator[TestClient]:
    with make_app_client(models=f"induction,g2={directory('gemma2')}", reference=False) as c:
        yield c


def test_api_models_says_each_layers_kind(client: TestClient) -> None:
    entries = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    kinds = entries["g2"]["layer_kinds"]
    assert [k["kind"] for k in kinds] == ["local", "global", "local", "global"]
    assert [k["window"] for k in kinds] == [4, None, 4, None]
    assert {k["rope_theta"] for k in kinds} == {10_000.0} and {k["softcap"] for k in kinds} == {1.5}
    assert entries["induction"]["layer_kinds"] == [
        {"index": i, "kind": "global", "window": None, "rope_theta": None, "softcap": None} for i in range(2)
    ]


def test_api_attention_sends_each_local_layers_own_eligibility(client: TestClient) -> None:
    r = client.post("/api/attention", json={"model": "g2", "text": PROBE, "include": ["weights"]})
    assert r.status_code == 200, r.text
    body = r.json()
    s = len(body["tokens"])
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    causal = k <= q
    assert torch.equal(torch.tensor(body["eligible"]), causal)
    for layer in body["layers"]:
        local = layer["index"] % 2 == 0
        assert layer["window"] == (4 if local else None)
        if local:
            assert torch.equal(torch.tensor(layer["eligible"]), causal & (q - k < 4))
        else:
            assert layer["eligible"] is None  # the answer's top-level grid is the layer's


def test_qk_attribution_through_a_softcap_is_refused(client: TestClient) -> None:
    r = client.post(
        "/api/qk-attribution", json={"model": "g2", "text": PROBE, "layer": 1, "head": 0, "query": 3, "key": 1}
    )
    assert_error(r, 422, "layer", "softcaps its scores", "tanh")


def test_softcap_bounds_the_scores(loaded: Callable[[str], CheckpointModel]) -> None:
    """Every score of a softcapped layer lies inside (-cap, cap), and the logits inside the final cap."""
    model = loaded("gemma2")
    run = model.run(replace(RunInput(text=PROBE)), CPU, torch.float32)
    for trace in run.layers:
        assert float(trace.attn.scores.abs().max()) < 1.5
    assert run.logits is not None and float(run.logits.abs().max()) < 3.0


def test_api_stats_of_a_local_layer_read_its_own_eligibility(client: TestClient) -> None:
    """A local layer's statistics count the keys its window leaves: no masked weight anywhere, the masked share
    of each row is what the window and the causal mask removed together, and the eligible score range is over the
    window's cells."""
    r = client.post("/api/attention", json={"model": "g2", "text": PROBE, "include": ["scores", "stats"]})
    assert r.status_code == 200, r.text
    layer = r.json()["layers"][0]
    own = torch.tensor(layer["eligible"])
    for head in layer["heads"]:
        scores, stats = torch.tensor(head["scores"]), head["stats"]
        assert stats["eligible_score_max"] == pytest.approx(float(scores[own].max()), abs=1e-6)
        assert stats["eligible_score_min"] == pytest.approx(float(scores[own].min()), abs=1e-6)
        removed = torch.softmax(scores, dim=-1).masked_fill(own, 0).sum(-1)
        assert torch.allclose(torch.tensor(stats["masked_share"]), removed, atol=1e-5)


def test_api_audit_checks_a_softcapped_windowed_model_against_its_own_reference(client: TestClient) -> None:
    """The audit's reference contexts use each layer's own mask, declared scale and softcap: the engine agrees with
    it, where the plain 1 / sqrt(d_head) SDPA reference over the run's mask would call every layer wrong."""
    r = client.post("/api/attention", json={"model": "g2", "text": PROBE, "include": ["weights", "audit"]})
    assert r.status_code == 200, r.text
    audit = r.json()["audit"]
    assert audit["sdpa_max_diff"] < TOLERANCE, audit["sdpa_max_diff"]


def test_head_baselines_of_a_local_layer_shuffle_within_its_window(loaded: Callable[[str], CheckpointModel]) -> None:
    """A shuffled baseline moves each row's weight among the keys the layer could see: a local layer's mean
    attention distance over its shuffles stays inside its window (at most 3 back for a window of 4), where
    shuffles over the whole causal row put it some 8 positions back on this probe."""
    from engine.analysis.heads import head_type_scores

    model = loaded("gemma2")
    table = head_type_scores(model, CPU, torch.float32, inp=RunInput(text=PROBE), permutations=8, seed=0)
    for layer, rows in enumerate(table):
        means = [row["baselines"]["mean_distance"]["mean"] for row in rows]  # type: ignore[index]
        if KINDS["gemma2"][layer].startswith("local"):
            assert max(means) <= 3.0, (layer, means)
        else:
            assert min(means) > 6.0, (layer, means)


def test_a_row_only_a_local_layers_window_empties_is_refused_naming_the_layer(client: TestClient) -> None:
    """Query 10 keeps keys 0..6 under the request's masks but none in a local layer's window of 4: a 422 naming
    masks, the row, the layer and its window (the answer's own eligibility would show the row keyed)."""
    blocked = [[10, k] for k in range(7, 11)]
    body = {"model": "g2", "text": PROBE, "masks": {"causal": True, "blocked": blocked}}
    err = assert_error(
        client.post("/api/attention", json=body), 422, "masks", "query rows 10", "layer 0", "window of 4"
    )
    assert err["code"] == "no_eligible_key"
    ok = client.post("/api/attention", json={**body, "all_masked": "zero", "include": ["weights"]})
    assert ok.status_code == 200, ok.text
    assert all(w == 0 for head in ok.json()["layers"][0]["heads"] for w in head["weights"][10])
