"""Work and memory sized by the client are bounded before anything is allocated or computed.

Each row of HOSTILE is a small body that used to cost seconds, gigabytes or a 500 (a scale sweep of 20,000 x 256 x
4096 floats, a measured float16 layer on a CPU, 65,536 tokens embedded before the token limit, a 457 MB answer from
a 2.6 kB body). Each must now be a 4xx in the one error shape, naming the field, the limit and its ATTNLAB_*
setting, and the expensive step it guards (embedding, the forward pass, the measured layer, the sweep's draws) must
never have run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

import engine.analysis.cost as cost_module
import server.analyses.cost as cost_analysis
import server.analyses.runs as runs_analysis
import server.analyses.sweep as sweep_analysis
from engine.analysis.cost import CostQuery, measure_cost
from engine.analysis.sweep import scale_sweep
from engine.models.base import AttentionModel
from engine.stop import Stopped, stop_when
from tests.helpers import assert_error

ARRAYS = {"accept": "application/vnd.attnlab.arrays"}
LONG = " ".join(["the"] * 510)  # 512 minilm tokens with [CLS] and [SEP]
FIGURE = {"widths": [1, 4, 16, 64, 256]}  # the chapter's Figure 21.5 at the default samples and keys

# the steps a refusal must come before
SWEEP, MEASURE, ENCODE, RUN, LONG_RUN = "sweep", "measure", "encode", "run", "long_run"
BEFORE_ALL = (SWEEP, MEASURE, ENCODE, RUN, LONG_RUN)
BEFORE_RUN = (SWEEP, MEASURE, RUN, LONG_RUN)  # the answer's size needs the token count, never a forward pass


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


WEIGHTS_60 = {"model": "random", "text": words(60), "include": ["weights"]}
PATCH_RUN = {
    "clean": {"model": "random", "text": words(60)},
    "corrupted": {**WEIGHTS_60, "text": f"{words(59)} zz"},
    "hook": "resid_pre",
    "cell": {"layer": 0, "column": 1},
}

# (id, path, body, headers, settings overrides, status, field, words of the message, steps that must not run)
HOSTILE: list[tuple[str, str, dict[str, Any], dict[str, str], dict[str, Any], int, str, tuple[str, ...], tuple]] = [
    (
        "sweep-wide-rows",
        "/api/scale-sweep",
        {"widths": [32], "samples": 20000, "keys": 256},
        {},
        {},
        422,
        "widths",
        ("163,840,000", "limit 64,000,000", "ATTNLAB_MAX_SWEEP_VALUES"),
        BEFORE_ALL,
    ),
    (
        "sweep-4096",
        "/api/scale-sweep",
        {"widths": [4096]},
        {},
        {},
        422,
        "widths",
        ("131,072,000", "ATTNLAB_MAX_SWEEP_VALUES"),
        BEFORE_ALL,
    ),
    (
        "sweep-256-wide",
        "/api/scale-sweep",
        {"widths": [256], "samples": 20000, "keys": 256},
        {},
        {},
        422,
        "widths",
        ("ATTNLAB_MAX_SWEEP_VALUES",),
        BEFORE_ALL,
    ),
    (
        "cost-measure-flops",
        "/api/cost",
        {"seq_len": 512, "d_model": 1024, "heads": 1, "batch": 16, "measure": True},
        {},
        {},
        422,
        "measure",
        ("85,899,345,920 FLOPs", "ATTNLAB_MAX_MEASURE_FLOPS", "leave measure off"),
        BEFORE_ALL,
    ),
    (
        "cost-measure-scores",
        "/api/cost",
        {"seq_len": 512, "heads": 64, "d_model": 1024, "batch": 16, "measure": True},
        {},
        {},
        422,
        "seq_len",
        ("batch x heads x seq_len^2", "ATTNLAB_MAX_RESULT_VALUES"),
        BEFORE_ALL,
    ),
    (
        "tokens-list",
        "/api/attention",
        {"model": "random", "tokens": [f"t{i}" for i in range(65_536)], "options": {"d_model": 1024}},
        {},
        {},
        422,
        "tokens",
        ("65536 tokens", "limit 512", "ATTNLAB_MAX_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "tokens-text",
        "/api/attention",
        {"model": "random", "text": words(600)},
        {},
        {},
        422,
        "text",
        ("600 tokens", "ATTNLAB_MAX_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "tokens-batch",
        "/api/attention",
        {"model": "random", "texts": ["a b", words(3000)], "options": {"d_model": 1024}},
        {},
        {},
        422,
        "texts[1]",
        ("3000 tokens", "ATTNLAB_MAX_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "tokens-source",
        "/api/attention",
        {"model": "random", "text": "a b", "source": {"text": words(700)}},
        {},
        {},
        422,
        "source.text",
        ("700 tokens", "ATTNLAB_MAX_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "tokens-minilm-wordpiece",
        "/api/attention",
        {"model": "minilm", "text": "unbelievably " * 200},  # 200 words, 5 WordPiece tokens each
        {},
        {"models": "minilm"},
        422,
        "text",
        ("1002 tokens", "ATTNLAB_MAX_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "answer-json-every-layer",
        "/api/attention",
        {"model": "minilm", "text": LONG},
        {},
        {"models": "minilm"},
        422,
        "include",
        ("bytes as JSON", "ATTNLAB_MAX_RESULT_BYTES", "application/vnd.attnlab.arrays", "float16"),
        BEFORE_RUN,
    ),
    (
        "answer-masks-only",
        "/api/attention",
        {"model": "random", "texts": [words(500)] * 16, "include": ["eligibility"]},
        {},
        {"max_result_bytes": 10_000_000},
        422,
        "include",
        ("bytes as JSON", "limit 10,000,000", "ATTNLAB_MAX_RESULT_BYTES"),
        BEFORE_RUN,
    ),
    (
        "decode-rows",  # decode refuses include: its refusal names the input to shorten
        "/api/decode",
        {"model": "random", "text": words(12), "masks": {"causal": True}},
        {},
        {"max_result_values": 100},
        422,
        "text",
        ("312 numbers", "limit 100", "ATTNLAB_MAX_RESULT_VALUES", "decode a shorter sequence"),
        BEFORE_RUN,
    ),
    (
        "work-float64-batch",  # a 47 kB body that peaked at +9.9 GB, its answer a few kilobytes
        "/api/attention",
        {"model": "minilm", "texts": [LONG] * 16, "dtype": "float64", "include": []},
        {},
        {"models": "minilm"},
        413,
        "dtype",
        ("in float64", "6 layers x 16 x 12 heads x 512 x 512", "ATTNLAB_MAX_WORK_BYTES", "ask for float32"),
        BEFORE_RUN,
    ),
    (
        "work-float32-batch",
        "/api/attention",
        {"model": "minilm", "texts": [LONG] * 2, "include": []},
        {},
        {"models": "minilm", "max_work_bytes": 100_000_000},
        413,
        "texts",
        ("in float32", "limit 100,000,000", "ATTNLAB_MAX_WORK_BYTES", "fewer or shorter texts"),
        BEFORE_RUN,
    ),
    (
        "heads-probe-total",  # six lengths that each fit, 2,430 positions together: six forward passes
        "/api/heads",
        {"model": "random", "probe": {"segment_lengths": [200, 201, 202, 203, 204, 205]}},
        {},
        {},
        422,
        "probe.segment_lengths",
        ("2,430 positions", "limit 2,048", "ATTNLAB_MAX_PROBE_TOKENS"),
        BEFORE_ALL,
    ),
    (
        "heads-probe-length",  # a length that would draw 10^9 words
        "/api/heads",
        {"model": "random", "probe": {"segment_lengths": [17, 10**9]}},
        {},
        {},
        422,
        "probe.segment_lengths[1]",
        ("limit of 512", "ATTNLAB_MAX_TOKENS", "at most 256"),
        BEFORE_ALL,
    ),
    (
        "heads-probe-repeats",  # 100 words six times
        "/api/heads",
        {"model": "random", "probe": {"segment_lengths": [24, 100], "repeats": 6}},
        {},
        {},
        422,
        "probe.segment_lengths[1]",
        ("6 x 100 tokens", "ATTNLAB_MAX_TOKENS", "at most 85"),
        BEFORE_ALL,
    ),
    # the bound holds for the form the answer goes out in, whatever Accept names: a form the analysis lacks (patch/run,
    # intervene have no streamed one) is answered as JSON, and bounded as JSON (it was counted at 4 bytes a value)
    *(
        (
            f"answer-{path.removeprefix('/api/').replace('/', '-')}-{form}",
            path,
            body,
            {"accept": media} if media else {},
            {"max_result_bytes": limit},
            422,
            field,
            (f"bytes as {said}", "ATTNLAB_MAX_RESULT_BYTES"),
            BEFORE_RUN,
        )
        for path, body, field in (
            ("/api/patch/run", PATCH_RUN, "corrupted.include"),
            ("/api/intervene", {**WEIGHTS_60, "ablate": [{"layer": 0, "head": 0}]}, "include"),
        )
        for form, media, limit, said in (
            ("json", None, 100_000, "JSON"),
            ("stream", "application/vnd.attnlab.arrays-stream", 100_000, "JSON"),
            ("arrays", "application/vnd.attnlab.arrays", 30_000, "the arrays form"),
            ("npz", "application/x-npz", 30_000, ".npz"),
        )
    ),
    (
        "runs-work",  # one layer of 64 heads at 32,768 tokens held a compute slot for 203 s
        "/api/runs",
        {"model": "random", "text": words(32_768), "options": {"d_model": 1024, "heads": 64}},
        {},
        {},
        422,
        "text",
        ("1,099,511,627,776 q.k products", "limit 300,000,000,000", "ATTNLAB_MAX_RUN_WORK"),
        BEFORE_ALL,
    ),
    (
        "runs-work-set-lower",
        "/api/runs",
        {"model": "random", "text": words(2048), "options": {"d_model": 1024, "heads": 64}},
        {},
        {"max_run_work": 10**9},
        422,
        "text",
        ("4,294,967,296 q.k products", "limit 1,000,000,000", "ATTNLAB_MAX_RUN_WORK"),
        BEFORE_ALL,
    ),
    (
        "runs-kept-bytes",  # a 24-layer checkpoint at 8,192 tokens was refused after its whole forward (24.9 s)
        "/api/runs",
        {"model": "random", "text": words(4096), "options": {"d_model": 256, "heads": 4}},
        {},
        {"run_bytes": 4 << 20},
        413,
        "text",
        ("would keep 9,502,720 bytes", "ATTNLAB_RUN_BYTES = 4,194,304"),
        BEFORE_ALL,
    ),
    (
        "answer-attention-stream",
        "/api/attention",
        WEIGHTS_60,
        {"accept": "application/vnd.attnlab.arrays-stream"},
        {"max_result_bytes": 30_000},
        422,
        "include",
        ("bytes as the streamed arrays form", "ATTNLAB_MAX_RESULT_BYTES"),
        BEFORE_RUN,
    ),
]


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count calls of each expensive step a refusal must come before (the real step still runs when called)."""
    calls = dict.fromkeys(BEFORE_ALL, 0)

    def spy(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    monkeypatch.setattr(sweep_analysis, "scale_sweep", spy(SWEEP, sweep_analysis.scale_sweep))
    monkeypatch.setattr(cost_analysis, "measure_cost", spy(MEASURE, cost_analysis.measure_cost))
    monkeypatch.setattr(AttentionModel, "encode", spy(ENCODE, AttentionModel.encode))
    monkeypatch.setattr(AttentionModel, "run", spy(RUN, AttentionModel.run))
    monkeypatch.setattr(runs_analysis, "long_run", spy(LONG_RUN, runs_analysis.long_run))
    return calls


@pytest.mark.parametrize(
    ("path", "body", "headers", "overrides", "status", "field", "message", "never"),
    [row[1:] for row in HOSTILE],
    ids=[row[0] for row in HOSTILE],
)
def test_hostile_input_is_refused_before_the_work(
    shared_client: Callable[..., TestClient],
    spies: dict[str, int],
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    overrides: dict[str, Any],
    status: int,
    field: str,
    message: tuple[str, ...],
    never: tuple[str, ...],
) -> None:
    client = shared_client(**overrides)
    assert_error(client.post(path, json=body, headers=headers), status, field, *message)
    assert {name: spies[name] for name in never} == dict.fromkeys(never, 0)


# ---- what still passes ---------------------------------------------------------------------------------------------


def test_the_figure_and_the_default_sweep_pass(client: TestClient) -> None:
    figure = client.post("/api/scale-sweep", json=FIGURE)
    assert figure.status_code == 200, figure.text
    assert [r["d_k"] for r in figure.json()["widths"]] == FIGURE["widths"]
    assert client.post("/api/scale-sweep", json={}).status_code == 200


def test_the_pages_own_request_passes_and_json_says_what_would(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """The page asks minilm at 512 tokens for every layer in the arrays form at float16 (static/js/effects.js)."""
    include = ["scores", "weights", "stats", "output"]
    page = {"model": "minilm", "text": LONG, "include": include, "precision": "float16"}
    with make_client(models="minilm") as client:
        r = client.post("/api/attention", json=page, headers=ARRAYS)
        assert r.status_code == 200, r.text[:300]
        err = assert_error(client.post("/api/attention", json=page), 422, "include", "ATTNLAB_MAX_RESULT_BYTES")
    assert err["code"] == "too_large"  # what the page's isTooLarge reads: code too_large on field include
    assert len(r.content) < 256 * 1024 * 1024


# ---- the sweep: bounded memory, and it stops --------------------------------------------------------------------


def test_sweep_draws_in_bounded_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The largest sweep the default limit allows never draws more than a chunk's floats at once."""
    from engine.analysis import sweep

    drawn: list[int] = []
    real = torch.randn

    def counting(*shape: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*shape, **kwargs)
        drawn.append(out.numel())
        return out

    monkeypatch.setattr(torch, "randn", counting)
    rows = scale_sweep([64], samples=20_000, keys=32)  # 41M q.k products, one width
    assert max(drawn) <= sweep.CHUNK_VALUES < 20_000 * 32 * 64
    assert rows[0].std_unscaled == pytest.approx(8.0, rel=0.02)  # sigma^2 sqrt(64)
    assert rows[0].std_scaled == pytest.approx(1.0, rel=0.02)


def test_sweep_stops_between_chunks_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.analysis import sweep

    stop = threading.Event()
    chunks = 0
    real = sweep.draw_dots

    def then_stop(*args: Any, **kwargs: Any) -> torch.Tensor:
        nonlocal chunks
        chunks += 1
        stop.set()  # the client goes away during the first chunk
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep, "draw_dots", then_stop)
    with stop_when(stop), pytest.raises(Stopped):
        scale_sweep([1, 4, 16, 64, 256])
    assert chunks == 1


# ---- a long run: it stops inside its one layer -----------------------------------------------------------------------


@pytest.mark.parametrize("masks", [{"causal": True}, {"causal": True, "window": 64}], ids=["fused", "blockwise"])
def test_a_one_layer_long_run_stops_inside_its_layer(monkeypatch: pytest.MonkeyPatch, masks: dict[str, Any]) -> None:
    """The client leaves while the first part of the layer is computed: the run stops at the next part (a head of
    torch's flash kernel, a query block of the blockwise pass), not after the whole layer and its summaries."""
    from engine import blockwise
    from engine.long import long_run
    from engine.masks import MaskSpec
    from engine.models import load_models
    from engine.models.base import RunInput

    monkeypatch.setattr(blockwise, "CALL_SCORES", 1, raising=False)  # one head per call of the flash kernel
    gone = threading.Event()
    parts = 0
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    scores = blockwise._scores

    def leave_during(real: Callable[..., Any]) -> Callable[..., Any]:
        def part(*args: Any, **kwargs: Any) -> Any:
            nonlocal parts
            parts += 1
            gone.set()  # the client goes away during the first part
            return real(*args, **kwargs)

        return part

    monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", leave_during(kernel))
    monkeypatch.setattr(blockwise, "_scores", leave_during(scores))
    model = load_models(["random"])["random"]
    inp = RunInput(text=words(1024), options={"heads": 8, "d_model": 64}, masks=MaskSpec(**masks))
    with stop_when(gone), pytest.raises(Stopped):
        long_run(model, inp, torch.device("cpu"), torch.float32, 64, 1 << 20)
    assert parts == 1


def test_a_long_runs_kept_bytes_are_known_before_it_runs() -> None:
    """What ATTNLAB_RUN_BYTES is checked against before the forward is what the run keeps once made."""
    from engine.long import long_run, run_shape
    from engine.masks import MaskSpec
    from engine.models import load_models
    from engine.models.base import RunInput

    model, cpu = load_models(["random"])["random"], torch.device("cpu")
    for s, options, grid, pyramid in [
        (300, {"heads": 4, "d_model": 32}, 16, 1 << 20),
        (1000, {"heads": 6, "kv_heads": 2, "d_model": 48}, 256, 64 << 20),
        (777, {"heads": 2, "d_model": 16}, 8, 4096),
    ]:
        inp = RunInput(text=words(s), options=options, masks=MaskSpec(causal=True))
        run = long_run(model, inp, cpu, torch.float32, grid, pyramid)
        assert run_shape(model, inp, s, cpu, torch.float32).kept_bytes(grid, pyramid) == run.nbytes


# ---- the measured cost ---------------------------------------------------------------------------------------------


def test_cost_measures_half_precision_in_float32_on_cpu(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[torch.dtype] = []
    real = cost_module.attention

    def recording(x: torch.Tensor, w: Any) -> Any:
        seen.append(x.dtype)
        return real(x, w)

    monkeypatch.setattr(cost_module, "attention", recording)
    body = {"seq_len": 64, "heads": 4, "d_model": 64, "layers": 2, "dtype": "float16", "measure": True}
    r = client.post("/api/cost", json=body).json()
    m = r["measured"]
    assert seen and set(seen) == {torch.float32}
    assert m["measured_dtype"] == "float32" and "float16" in m["note"] and "float32" in m["note"]
    assert m["tokens_per_s"] > 0 and m["tokens_per_s"] == r["tokens_per_s"]
    assert r["bytes_per_value"] == 2  # the formulas stay float16's


def test_cost_measure_stops_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = cost_module.attention

    def counted(x: torch.Tensor, w: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(x, w)

    monkeypatch.setattr(cost_module, "attention", counted)
    gone = threading.Event()
    gone.set()
    with stop_when(gone), pytest.raises(Stopped):
        measure_cost(CostQuery(seq_len=32, heads=2, d_model=16, layers=1), torch.device("cpu"))
    assert calls == 0


def test_a_batch_without_grids_answers_without_its_masks(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """`eligible` and `reasons` (B x S x S booleans: 46 MB as JSON for 16 texts of 510 words) come with the grids
    they describe or with `eligibility`, not with an answer of none: the masks-only answer the row above refuses
    at 10 MB is now a few bytes a token."""
    batch = [words(500)] * 16
    with make_client(models="random", max_result_bytes=10_000_000) as client:
        resp = client.post("/api/attention", json={"model": "random", "texts": batch, "include": []})
        assert resp.status_code == 200, resp.text[:300]
        answer = resp.json()
        assert answer["eligible"] is None and answer["reasons"] is None
        tokens = sum(len(t) for t in answer["batch_tokens"])
        assert tokens == 16 * 500 and len(resp.content) < 40 * tokens  # each token's label, flag and config
        small = {"model": "random", "texts": ["a b c d", "a b"], "masks": {"causal": True}}
        asked = client.post("/api/attention", json={**small, "include": ["eligibility"]}).json()
        shown = client.post("/api/attention", json={**small, "include": ["weights"]}).json()
    assert asked["eligible"] == shown["eligible"] and asked["reasons"] == shown["reasons"]
    assert set(asked["reasons"]) == {"causal", "padding"} and asked["reasons"]["padding"][1][0] == [
        False,
        False,
        True,
        True,
    ]
    assert "weights" not in asked["layers"][0]["heads"][0]
