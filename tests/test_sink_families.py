"""Learned sink logits in the softmax, and the families that bring them or other per-layer kinds: gpt_oss, smollm3,
modernbert.

The sink piece first, against transformers' own gpt-oss eager attention: one logit per head joins every row's
softmax, takes weight and has no value; the dense pass, the long run's blockwise pass, the statistics and the
answer all read it. Then each family's tiny random checkpoint (tests/checkpoints.py sink_config: gpt-oss-20b's,
SmolLM3-3B's and ModernBERT-base's configs at width 64, each window shorter than the probe) against transformers'
eager forward in float32: every layer's every head's weights and the final output within 1e-5, and the same
comparison failing (by more than 1e-3) with one piece wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from torch import Tensor

from engine.analysis.decode import decode
from engine.attention import AttentionWeights, attention, expand_groups, from_concatenated
from engine.blockwise import BlockMask, weights
from engine.forward import layer_kinds
from engine.hooks import cache
from engine.long import long_run
from engine.masks import causal_mask, within_window
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointModel, load_checkpoint
from engine.stats import head_stats
from engine.tiles import row
from tests.checkpoints import PROBE, make_checkpoint
from tests.fixtures import make_app_client
from tests.helpers import assert_error

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
F32 = torch.float32


def layer(sinks: bool = True, seed: int = 0, d: int = 16, h: int = 4, g: int = 2, dh: int = 8) -> AttentionWeights:
    """A random layer of h heads over g K/V groups, with sink logits large enough to take a visible share."""
    gen = torch.Generator().manual_seed(seed)
    w = from_concatenated(
        0.3 * torch.randn(d, h * dh, generator=gen),
        0.3 * torch.randn(d, g * dh, generator=gen),
        0.3 * torch.randn(d, g * dh, generator=gen),
        0.3 * torch.randn(h * dh, d, generator=gen),
        h,
        g,
    )
    return replace(w, sinks=torch.randn(h, generator=gen) + 1.0 if sinks else None)


def transformers_sink_attention(a: Any, w: AttentionWeights, eligible: Tensor) -> tuple[Tensor, Tensor]:
    """transformers' gpt-oss eager attention on the engine's own q, k, v: (contexts (B, H, S, d_v), weights)."""
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    module = SimpleNamespace(sinks=w.sinks, num_key_value_groups=w.n_heads // w.n_kv_heads, training=False)
    mask = torch.where(eligible, 0.0, float("-inf"))[None, None]
    out, probs = eager_attention_forward(module, a.q, a.k, a.v, mask, scaling=a.scale_factor)  # type: ignore[arg-type]
    return out.transpose(1, 2), probs


@pytest.mark.parametrize("window", [None, 3])
def test_sink_softmax_matches_transformers_gpt_oss_attention(window: int | None) -> None:
    """The engine's weights and contexts equal gpt-oss's eager attention (sink logit concatenated, softmax, sink
    column dropped), and each row's weights over the keys sum to 1 minus its sink weight."""
    w = layer()
    x = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(1))
    eligible = within_window(causal_mask(9), window)
    a = attention(x, w, eligible)
    contexts, probs = transformers_sink_attention(a, w, eligible)
    assert a.sink_weight is not None and a.sink_weight.shape == (1, 4, 9)
    assert float((a.weights - probs).abs().max()) < 1e-6
    assert float((a.contexts - contexts).abs().max()) < 1e-5
    assert torch.allclose(a.weights.sum(-1) + a.sink_weight, torch.ones(1, 4, 9), atol=1e-6)
    assert float(a.sink_weight.mean()) > 0.05  # the sink takes a visible share, so the control below can fail


def test_sink_logits_dropped_fail_the_same_check() -> None:
    """The control: the same layer run without its sinks is far from gpt-oss's attention."""
    w = layer()
    x = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(1))
    eligible = causal_mask(9)
    dropped = attention(x, replace(w, sinks=None), eligible)
    _, probs = transformers_sink_attention(attention(x, w, eligible), w, eligible)
    assert dropped.sink_weight is None
    assert float((dropped.weights - probs).abs().max()) > WRONG


def test_a_row_with_no_key_gives_the_sink_everything() -> None:
    """all_masked "zero": a row with no eligible key has zero weights over the keys (not NaN), a zero context and
    sink weight 1."""
    w = layer()
    x = torch.randn(1, 5, 16, generator=torch.Generator().manual_seed(2))
    eligible = causal_mask(5).clone()
    eligible[2] = False
    a = attention(x, w, eligible, all_masked="zero")
    assert a.sink_weight is not None
    assert torch.all(a.weights[0, :, 2] == 0) and torch.all(a.contexts[0, :, 2] == 0)
    assert torch.allclose(a.sink_weight[0, :, 2], torch.ones(4))
    assert bool(torch.isfinite(a.weights).all())


@pytest.mark.parametrize("window", [None, 3])
def test_long_run_includes_the_sink_in_each_rows_normaliser(window: int | None) -> None:
    """The blockwise pass (no S x S tensor) takes the sink into each row's log-sum-exp: its contexts and every
    weight remade from the normalisers equal the dense pass's; the same pass with the sink left out of the
    normaliser (the control) does not."""
    w = layer(seed=3)
    s = 11
    x = torch.randn(1, s, 16, generator=torch.Generator().manual_seed(4))
    dense = attention(x, w, within_window(causal_mask(s), window))
    mask = BlockMask(s, s, causal=True, window=window)
    long = attention(x, w, mask)
    assert long.lse is not None
    remade = weights(long.q[0], long.k[0], long.lse[0], mask, long.scale_factor, (0, s), (0, s))
    assert float((remade - dense.weights[0]).abs().max()) < 1e-6
    assert float((long.contexts - dense.contexts).abs().max()) < 1e-5
    without = attention(x, replace(w, sinks=None), mask)
    assert without.lse is not None
    remade = weights(without.q[0], without.k[0], without.lse[0], mask, without.scale_factor, (0, s), (0, s))
    assert float((remade - dense.weights[0]).abs().max()) > WRONG


def test_stats_read_the_sink_as_one_more_outcome() -> None:
    """Rows over the keys sum to 1 - sink: with the sink weight the row-sum error is float rounding, the mean
    sink weight is reported, and the entropy counts the sink's term; read without it (the control) the rows look
    broken by the sink's share."""
    w = layer(seed=5)
    x = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(6))
    eligible = causal_mask(8)
    a = attention(x, w, eligible)
    assert a.sink_weight is not None
    sink = a.sink_weight[0]
    read = head_stats(a.scores[0], a.weights[0], eligible, w, sink_weight=sink)
    blind = head_stats(a.scores[0], a.weights[0], eligible, w)
    for h, (st, bl) in enumerate(zip(read, blind, strict=True)):
        assert st.max_row_sum_error < 1e-6 and bl.max_row_sum_error > WRONG
        assert st.mean_sink_weight == pytest.approx(float(sink[h].mean()), abs=1e-6)
        assert bl.mean_sink_weight is None
        whole = torch.cat([a.weights[0, h], sink[h, :, None]], dim=-1)
        entropy = -(whole * whole.log()).nan_to_num().sum(-1)
        assert st.entropy == pytest.approx(entropy.tolist(), abs=1e-5)


# --- the families: each checkpoint made and loaded (compared with transformers) once for the module ---


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = make_checkpoint(family, tmp_path_factory.mktemp(family))
        return made[family]

    return get


@pytest.fixture(scope="module")
def loaded(directory: Callable[[str], Path]) -> Callable[[str], CheckpointModel]:
    made: dict[str, CheckpointModel] = {}

    def get(family: str) -> CheckpointModel:
        if family not in made:
            made[family] = load_checkpoint(family, directory(family))
        return made[family]

    return get


def diffs(model: CheckpointModel) -> dict[str, float]:
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    return dict(model.reference["max_abs_diff"])


@pytest.fixture(scope="module")
def client(directory: Callable[[str], Path]) -> Iterator[TestClient]:
    """One app serving the three families' checkpoints (no reference check: the tests here make it)."""
    models = ",".join(f"{f}={directory(f)}" for f in ("gpt_oss", "smollm3", "modernbert"))
    with make_app_client(models=f"induction,{models}", reference=False) as c:
        yield c


DECODERS = ("gpt_oss", "smollm3")
# each family's layer kinds in its tiny checkpoint
KINDS = {"gpt_oss": ["local 4", "global"], "smollm3": ["global"] * 4}


@pytest.mark.parametrize("family", DECODERS)
def test_family_matches_transformers(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    model = loaded(family)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (family, d)
    assert [b.kind for b in model.net.net.blocks] == KINDS[family]
    assert model.info.family == family and model.capabilities.decode


@pytest.mark.parametrize("family", DECODERS)
def test_decode_with_cache_equals_full_pass(family: str, loaded: Callable[[str], CheckpointModel]) -> None:
    """Position by position through the KV cache (each local window counted from the cache's length, each row's
    sink in its softmax): every weight and layer output equal to the whole pass's, in float64."""
    model = loaded(family)
    inp = RunInput(text=PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float64)
    assert len(result.steps) > 3 * 4  # past every window
    assert result.max_diff_vs_full < 1e-10, result.max_diff_vs_full


def test_gpt_oss_run_shows_each_rows_sink_and_each_positions_experts(loaded: Callable[[str], CheckpointModel]) -> None:
    """Every layer's rows over the keys sum to 1 minus the sink weight, which the hook cache names; the top 2 of
    8 experts each position used are there too, their weights summing to 1."""
    model = loaded("gpt_oss")
    run = model.run(RunInput(text=PROBE), CPU, F32)
    hooks = cache(run.result)
    for i, trace in enumerate(run.layers):
        sink = hooks[f"blocks.{i}.attn.sink_weight"]
        assert sink is trace.attn.sink_weight and float(sink.min()) > 0
        assert torch.allclose(hooks[f"blocks.{i}.attn.hook_pattern"].sum(-1) + sink, torch.ones_like(sink), atol=1e-6)
        experts = hooks[f"blocks.{i}.mlp.hook_expert_indices"]
        assert experts.shape[-1] == 2 and int(experts.max()) < 8
        assert torch.allclose(hooks[f"blocks.{i}.mlp.hook_expert_weights"].sum(-1), torch.ones(experts.shape[:-1]))


def test_gpt_oss_long_run_rows_equal_the_dense_weights(loaded: Callable[[str], CheckpointModel]) -> None:
    """The blockwise long run keeps each layer's window and each head's sink in its normalisers: every row of
    every head remade from Q, K and them equals the dense pass's weights."""
    model = loaded("gpt_oss")
    inp = RunInput(text=PROBE)
    dense = model.run(inp, CPU, F32)
    run = long_run(model, inp, CPU, F32, grid=8, pyramid_bytes=1 << 20)
    s = len(dense.tokens)
    worst = 0.0
    for keep, trace in zip(run.layers, dense.layers, strict=True):
        for h in range(trace.attn.weights.shape[1]):
            for query in (0, 5, s // 2, s - 1):
                worst = max(worst, float((row(keep, h, query) - trace.attn.weights[0, h, query]).abs().max()))
    assert worst < TOLERANCE, worst


def test_api_attention_sends_each_heads_sink_weight(client: TestClient) -> None:
    """Each head of a sink layer carries its sink weight per query beside its weights; the rows plus the sink make
    1, the stats read the sink (mean_sink_weight, a row-sum error of float rounding) and the audit's reference
    puts the sink in the softmax too. A model without sinks sends null."""
    body = {"model": "gpt_oss", "text": PROBE, "include": ["weights", "stats", "audit"]}
    r = client.post("/api/attention", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    models = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert models["gpt_oss"]["sinks"] is True and models["smollm3"]["sinks"] is False
    for layer in answer["layers"]:
        for head in layer["heads"]:
            weights, sink = torch.tensor(head["weights"]), torch.tensor(head["sink"])
            assert sink.shape == (len(answer["tokens"]),)
            assert torch.allclose(weights.sum(-1) + sink, torch.ones_like(sink), atol=1e-5)
            assert head["stats"]["mean_sink_weight"] == pytest.approx(float(sink.mean()), abs=1e-5)
            assert head["stats"]["max_row_sum_error"] < 1e-5
    audit = answer["audit"]
    assert audit["sdpa_max_diff"] < TOLERANCE and audit["max_row_sum_error"] < 1e-5
    assert audit["softmax_axis"]["measured"] == "keys"
    body = {"model": "induction", "text": "red ball king red ball king", "include": ["weights", "stats"]}
    plain = client.post("/api/attention", json=body)
    assert plain.status_code == 200, plain.text
    head = plain.json()["layers"][0]["heads"][0]
    assert head.get("sink") is None and head["stats"]["mean_sink_weight"] is None


def test_smollm3_every_fourth_layer_has_no_rotary(loaded: Callable[[str], CheckpointModel]) -> None:
    """Layer 3 (no_rope_layers 0) scores its projected queries and keys as they are: no rotary, no theta in its
    kind, and its scores are q . k of the projections themselves; the others rotate with theta 5,000,000."""
    model = loaded("smollm3")
    kinds = layer_kinds(model.net.net)
    assert [k.rope_theta for k in kinds] == [5_000_000.0] * 3 + [None]
    assert [k.kind for k in kinds] == ["global"] * 3 + ["no_positions"]  # as /api/models says it
    run = model.run(RunInput(text=PROBE), CPU, F32)
    a = run.layers[3].attn
    assert a.q_pre_rotary is None
    q, k = a.q, expand_groups(a.k, a.q.shape[1])
    assert torch.allclose(a.scores, q @ k.transpose(-1, -2) * a.scale_factor, atol=1e-5)


def test_modernbert_matches_transformers(loaded: Callable[[str], CheckpointModel]) -> None:
    """The encoder's every head and its last hidden state (after the final norm) equal ModernBertModel's; layer 0
    and every third are global with theta 160,000, the rest local with theta 10,000 and a window of 4 keys each
    side (local_attention 8)."""
    model = loaded("modernbert")
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d
    kinds = layer_kinds(model.net.net)
    assert [(k.kind, k.window, k.rope_theta) for k in kinds] == [
        ("global", None, 160_000.0),
        ("local", 5, 10_000.0),
        ("local", 5, 10_000.0),
        ("global", None, 160_000.0),
    ]
    assert not model.sizes.decoder and model.info.family == "modernbert"


def test_modernbert_local_layer_sees_both_sides(loaded: Callable[[str], CheckpointModel]) -> None:
    """A local layer's eligibility is |q - k| <= 4, as many keys after the query as before it; a global layer's
    is every key. The weights are zero exactly off it."""
    model = loaded("modernbert")
    run = model.run(RunInput(text=PROBE), CPU, F32)
    s = len(run.tokens)
    assert s > 2 * 5
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    for trace in run.layers:
        expected = (q - k).abs() <= 4 if trace.window is not None else torch.ones(s, s, dtype=torch.bool)
        assert torch.equal(trace.attn.eligible, expected), trace.index
        w = trace.attn.weights[0]
        assert torch.all(w[:, ~expected] == 0) and torch.all(w[:, expected] > 0)


@pytest.mark.parametrize(("family", "extra"), [("gpt_oss", 1), ("smollm3", 0)])
def test_the_answer_count_holds_each_heads_sink_weight(
    family: str, extra: int, loaded: Callable[[str], CheckpointModel]
) -> None:
    """The answer's size, counted from the run, holds each head's sink weight per query beside its weights in a
    model with sinks, and nothing more in one without (the size limit reads this count)."""
    from server.serialize import answer_count, run_shape

    run = loaded(family).run(RunInput(text=PROBE), CPU, F32)
    layers = list(range(len(run.layers)))
    every, _ = answer_count(["weights"], run_shape(run, layers, ["weights"]))
    h, s = run.layers[0].attn.weights.shape[1:3]
    assert every.floats == len(layers) * h * s * (s + extra)


@pytest.mark.parametrize("family", ["gpt_oss", "smollm3", "modernbert"])
def test_every_route_answers_on_the_family(family: str, client: TestClient) -> None:
    """Head types, an ablation, patching, QK attribution and decoding answer as for a LLaMA checkpoint; an
    encoder's decoding, and QK attribution through its final norm, are a 422 that says why."""
    body = {"model": family, "text": PROBE}
    answer = client.post("/api/attention", json={**body, "include": ["weights", "final"]})
    assert answer.status_code == 200, answer.text[:300]
    tokens = answer.json()["tokens"]
    for path, extra in [("/api/heads", {}), ("/api/intervene", {"ablate": [{"layer": 1, "head": 0}]})]:
        r = client.post(path, json={**body, **extra})
        assert r.status_code == 200, (path, r.text[:300])
    corrupted = [*tokens[:3], tokens[5], *tokens[4:]]
    patch = {"clean": {"model": family, "tokens": tokens}, "corrupted": {"model": family, "tokens": corrupted}}
    grid = client.post("/api/patch", json={**patch, "hook": "resid_pre", "metric": {"kind": "output_distance"}})
    assert grid.status_code == 200, grid.text[:300]
    cell = {"layer": 1, "head": 0, "query": 5, "key": 2}
    attributed = client.post("/api/qk-attribution", json={**body, **cell})
    if family == "modernbert":  # its final norm ends the last block: the stream after it is no sum of writes
        assert_error(attributed, 422, "model", "normalises the residual stream after adding to it")
    else:
        assert attributed.status_code == 200, attributed.text[:300]
    decoded = client.post("/api/decode", json={**body, "generate": {"tokens": 3}})
    if family == "modernbert":
        assert_error(decoded, 422, "generate", "does not decode")
    else:
        assert decoded.status_code == 200, decoded.text[:300]
        assert decoded.json()["max_diff_vs_full"] < WRONG and len(decoded.json()["generated"]) == 3


# --- negative controls: the same comparison with one piece wrong, a difference far past the tolerance ---


def sinks_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gpt_oss as gpt_oss

    original = gpt_oss.Block

    def without(**kw: Any) -> Any:
        return original(**{**kw, "attn": replace(kw["attn"], sinks=None)})

    monkeypatch.setattr(gpt_oss, "Block", without)


def top_1_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.gpt_oss as gpt_oss

    original = gpt_oss.need
    monkeypatch.setattr(gpt_oss, "need", lambda c, n, *a: 1 if n == "num_experts_per_tok" else original(c, n, *a))


def rotary_on_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.smollm3 as smollm3

    original = smollm3.rope_layers
    monkeypatch.setattr(smollm3, "rope_layers", lambda c: [True for _ in original(c)])


def windows_on_the_wrong_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.modernbert as modernbert

    original = modernbert.layer_types
    swap = {modernbert.LOCAL: modernbert.GLOBAL, modernbert.GLOBAL: modernbert.LOCAL}
    monkeypatch.setattr(modernbert, "layer_types", lambda c: [swap[k] for k in original(c)])


def one_sided_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local layer's window counted as a causal one is: the query and the window - 1 keys before it only."""
    import engine.forward

    def before_only(eligible: Tensor, window: int | None) -> Tensor:
        if window is None:
            return eligible
        q, k = torch.arange(eligible.shape[-2])[:, None], torch.arange(eligible.shape[-1])[None, :]
        return eligible & (q - k >= 0) & (q - k < window)

    monkeypatch.setattr(engine.forward, "within_window", before_only)


CONTROLS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "sink logits dropped": sinks_dropped,
    "top-1 routing instead of top-k": top_1_routing,
    "rotary on every layer": rotary_on_every_layer,
    "windows on the wrong layers": windows_on_the_wrong_layers,
    "one-sided windows": one_sided_windows,
}
CASES = [
    ("gpt_oss", "sink logits dropped", "weights"),
    ("gpt_oss", "top-1 routing instead of top-k", "output"),
    ("smollm3", "rotary on every layer", "weights"),
    ("modernbert", "windows on the wrong layers", "weights"),
    ("modernbert", "one-sided windows", "weights"),
]


@pytest.mark.parametrize(("family", "control", "key"), CASES)
def test_wrong_piece_fails_the_comparison(
    family: str, control: str, key: str, directory: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    CONTROLS[control](monkeypatch)
    d = diffs(load_checkpoint(family, directory(family)))
    assert d[key] > WRONG, (control, d)
