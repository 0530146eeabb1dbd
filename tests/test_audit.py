"""The audit's measured parts: the softmax axis read off the weights (under every mask and each classic bug), each
head's own projection shapes and scale with unequal widths, a batch's padding masks and per-text verdicts, and
repeated weight rows. Each has a control the same check must reject."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.weight_checks import REPEATED_EXAMPLES, repeated_rows, softmax_axis
from engine.masks import MaskSpec, eligibility
from engine.softmax import buggy_softmax, masked_softmax
from server.app import create_app
from server.config import Settings

IND = {"model": "induction", "text": "red ball king river frog clock seed moon"}
S = 7
MASKS = {
    "none": MaskSpec(),
    "causal": MaskSpec(causal=True),
    "window": MaskSpec(window=2),
    "padding": MaskSpec(padding=(True,) * 5 + (False,) * 2),
    "causal, padding, blocked": MaskSpec(causal=True, padding=(True,) * 6 + (False,), blocked=((3, 1), (6, 0))),
    "blocked column": MaskSpec(blocked=tuple((q, 2) for q in range(S))),
}


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    settings = Settings(device="cpu", models="induction,random,custom", allowed_hosts="testserver")
    with TestClient(create_app(settings)) as c:
        yield c


def audit_of(api: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = api.post("/api/attention", json={**body, "include": ["audit"]})
    assert resp.status_code == 200, resp.text[:500]
    audit: dict[str, Any] = resp.json()["audit"]
    return audit


# ---- the softmax axis, measured ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", MASKS.values(), ids=MASKS.keys())
def test_softmax_axis_reads_keys_on_the_engine_and_queries_under_the_bug(mask: MaskSpec) -> None:
    scores = torch.randn(2, 3, S, S, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    eligible = eligibility(mask, S, torch.device("cpu"))
    right = softmax_axis([masked_softmax(scores, eligible)])
    assert right["measured"] == "keys" and right["row_sum_error"] < 1e-12, right
    wrong = softmax_axis([buggy_softmax(scores, eligible, "softmax_over_queries")])
    assert wrong["measured"] == "queries" and wrong["column_sum_error"] < 1e-12, wrong
    assert wrong["row_sum_error"] > 0.05 and right["column_sum_error"] > 0.05
    # flipped_mask still normalises over keys (its rows left with no key are zeros, as a masked row is)
    flipped = softmax_axis([buggy_softmax(scores, eligible, "flipped_mask")])
    assert flipped["measured"] == ("keys" if flipped["row_sum_error"] is not None else "neither"), flipped
    assert right["declared"] == wrong["declared"] == "keys"


def test_softmax_axis_reads_neither_when_no_axis_sums_to_one() -> None:
    scores = torch.randn(1, 2, S, S, generator=torch.Generator().manual_seed(2))
    halved = masked_softmax(scores, eligibility(MaskSpec(causal=True), S, torch.device("cpu"))) * 0.5
    axis = softmax_axis([halved])
    assert axis["measured"] == "neither" and axis["row_sum_error"] == pytest.approx(0.5)
    # and one layer wrong among right ones is enough
    right = masked_softmax(scores, torch.ones(S, S, dtype=torch.bool))
    assert softmax_axis([right, halved])["measured"] == "neither"
    assert softmax_axis([right, right])["measured"] == "keys"


def test_softmax_axis_tolerance_follows_the_dtype() -> None:
    scores = torch.randn(1, 4, 64, 64, generator=torch.Generator().manual_seed(3))
    for dtype in (torch.float16, torch.bfloat16):
        w = masked_softmax(scores, torch.ones(64, 64, dtype=torch.bool)).to(dtype)
        axis = softmax_axis([w])
        assert axis["measured"] == "keys" and axis["tolerance"] == torch.finfo(dtype).eps, axis


@pytest.mark.parametrize("bug", [None, "softmax_over_queries", "flipped_mask", "norm_over_sequence"])
def test_the_audit_measures_the_softmax_axis_of_the_code_that_ran(api: TestClient, bug: str | None) -> None:
    """Negative control: under softmax_over_queries the audit reads "queries"; on the engine's code "keys"."""
    body = {**IND, "all_masked": "zero", **({"demo_bug": bug} if bug else {})}
    axis = audit_of(api, body)["softmax_axis"]
    want = "queries" if bug == "softmax_over_queries" else "keys"
    assert axis["measured"] == want and axis["declared"] == "keys", axis
    off = axis["column_sum_error"] if want == "keys" else axis["row_sum_error"]
    assert off > 0.1, axis


# ---- heads of unequal widths ---------------------------------------------------------------------------------------


def unequal_body(widths: list[int], scale: bool = True) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    cols = sum(widths)
    weights = {"w_q": (6, cols), "w_k": (6, cols), "w_v": (6, cols), "w_o": (cols, 3)}
    return {
        "x": rng.normal(size=(5, 6)).tolist(),
        "weights": {k: rng.normal(size=shape).tolist() for k, shape in weights.items()},
        "heads": len(widths),
        "head_widths": widths,
        "scale": scale,
    }


def test_unequal_heads_report_their_own_projection_shapes_and_scales(api: TestClient) -> None:
    a = audit_of(api, unequal_body([2, 4]))
    p = a["projections"]
    assert (p["W_Q"], p["W_K"], p["W_V"], p["W_O"]) == ([6, 6], [6, 6], [6, 6], [6, 3])  # the matrices as typed
    assert [(h["W_Q"], h["W_K"], h["W_V"], h["W_O"]) for h in p["per_head"]] == [
        ([6, 2], [6, 2], [6, 2], [2, 3]),
        ([6, 4], [6, 4], [6, 4], [4, 3]),
    ]
    assert a["scale"]["per_head"] == pytest.approx([1 / math.sqrt(2), 1 / 2]) and a["scale"]["factor"] is None
    assert a["d_k"] is None and a["d_v"] is None
    # torch's SDPA with each head's own factor agrees with the engine (the widest head's factor for all did not)
    assert a["sdpa_max_diff"] < 1e-5
    off = audit_of(api, unequal_body([2, 4], scale=False))
    assert off["scale"]["per_head"] == [1.0, 1.0] and off["scale"]["factor"] == 1.0 and off["sdpa_max_diff"] < 1e-5


def test_equal_heads_keep_one_factor_and_one_shape_each(api: TestClient) -> None:
    a = audit_of(api, {"model": "random", "text": "a b c"})
    assert a["scale"]["factor"] == pytest.approx(1 / math.sqrt(a["d_k"]))
    assert a["scale"]["per_head"] == [a["scale"]["factor"]] * a["heads"]
    assert all(h["W_Q"] == [a["d_model"], a["d_k"]] for h in a["projections"]["per_head"])
    assert a["projections"]["W_Q"] == [a["d_model"], a["heads"] * a["d_k"]]


# ---- a batch -------------------------------------------------------------------------------------------------------

BATCH = {"model": "random", "texts": ["a b c d e", "x y", "p q r"], "masks": {"causal": True}}


def test_a_batch_audit_reports_each_texts_padding_and_verdicts(api: TestClient) -> None:
    a = audit_of(api, BATCH)
    assert a["masks"]["padding"] == [[True] * 5, [True] * 2 + [False] * 3, [True] * 3 + [False] * 2]
    got = {(p["item"], p["mask"]): p for p in a["perturbation"]}
    assert set(got) == {(0, "causal"), (1, "causal"), (1, "padding"), (2, "causal"), (2, "padding")}
    assert [got[(i, "causal")]["position"] for i in range(3)] == [4, 1, 2]  # each text's last real position
    assert got[(1, "padding")]["position"] == 2 and got[(2, "padding")]["position"] == 3
    assert all(p["holds"] is True for p in a["perturbation"]), a["perturbation"]
    # each verdict is the one /api/perturb gives for that text and position
    p = got[(1, "padding")]
    r = api.post("/api/perturb", json={**BATCH, "item": 1, "position": p["position"]}).json()
    assert p["verdict"] == r["verdict"]


def test_a_batch_audit_catches_the_bug_in_every_text(api: TestClient) -> None:
    """Negative control: softmax over queries lets a later token reach an earlier one in each text."""
    a = audit_of(api, {**BATCH, "demo_bug": "softmax_over_queries"})
    causal = [p for p in a["perturbation"] if p["mask"] == "causal"]
    assert [p["item"] for p in causal] == [0, 1, 2]
    assert all(p["holds"] is False and p["verdict"].startswith("Leak") for p in causal), causal
    assert a["softmax_axis"]["measured"] == "queries"


# ---- repeated rows -------------------------------------------------------------------------------------------------


def test_repeated_rows_are_counted_and_named_within_bounds() -> None:
    w = torch.softmax(torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(4)), dim=-1)
    assert repeated_rows([w]) == {"count": 0, "heads": 0, "examples": []}
    w[0, 1, 5] = w[0, 1, 2]
    w[1, 2, 10:] = w[1, 2, 9]  # ten more copies of one row
    got = repeated_rows([w, w], batch=True)
    assert got["count"] == 2 * (1 + 10) and got["heads"] == 2 * 2
    assert len(got["examples"]) == REPEATED_EXAMPLES
    assert got["examples"][0] == {"layer": 0, "head": 1, "item": 0, "queries": [2, 5]}
    assert all(e["queries"][0] < e["queries"][1] for e in got["examples"])
    # a padding query's row and a row with no weight at all are not counted
    real = torch.ones(2, 20, dtype=torch.bool)
    real[1, 10:] = False
    w[0, 1, 5] = 0.0
    assert repeated_rows([w], real, batch=True)["count"] == 0


def test_the_audit_flags_repeated_rows_of_repeated_tokens(api: TestClient) -> None:
    """The random model has no positions: a repeated word makes identical rows in every head; distinct words none."""
    a = audit_of(api, {"model": "random", "text": "a b a b c"})
    heads = a["heads"] * a["layers"]
    assert a["repeated_rows"]["count"] == 2 * heads and a["repeated_rows"]["heads"] == heads
    assert {tuple(e["queries"]) for e in a["repeated_rows"]["examples"]} == {(0, 2), (1, 3)}
    assert audit_of(api, {"model": "random", "text": "a b c d e"})["repeated_rows"]["count"] == 0


# ---- a batch audit's bound on its perturbations --------------------------------------------------------------------


@pytest.fixture
def counted_audit(monkeypatch: pytest.MonkeyPatch, make_client: Callable[..., Any]) -> Iterator[Any]:
    """An audit under the given settings (e.g. max_audit_runs), with the forward passes its perturbations ran
    (every model.run made inside engine.analysis.audit's perturb) counted."""
    import engine.analysis.audit as audit_module

    counts = {"inside": 0, "runs": 0}
    perturb = audit_module.perturb

    def counting_perturb(*args: Any, **kwargs: Any) -> Any:
        counts["inside"] += 1
        try:
            return perturb(*args, **kwargs)
        finally:
            counts["inside"] -= 1

    monkeypatch.setattr(audit_module, "perturb", counting_perturb)
    with ExitStack() as stack:

        def run(body: dict[str, Any], **limits: int) -> tuple[dict[str, Any], int, TestClient]:
            client = stack.enter_context(make_client(models="random", **limits))
            model = client.app.state.models["random"]
            forward = model.run

            def counting_run(*args: Any, **kwargs: Any) -> Any:
                counts["runs"] += counts["inside"] > 0
                return forward(*args, **kwargs)

            monkeypatch.setattr(model, "run", counting_run)
            counts["runs"] = 0
            return audit_of(client, body), counts["runs"], client

        yield run


def test_a_batch_audit_runs_at_most_its_bound_and_names_the_texts_left(counted_audit: Any) -> None:
    """Text 0 (the longest) costs 2 passes, texts 1 and 2 (causal and padding at two positions) 4 each: a bound of 6
    checks texts 0 and 1 and leaves text 2, counted before any perturbation runs."""
    a, runs, client = counted_audit(BATCH, max_audit_runs=6)
    assert runs <= 6, f"the audit's perturbations ran {runs} forward passes past ATTNLAB_MAX_AUDIT_RUNS=6"
    assert runs == 6
    assert a["perturbation_unchecked"] == [2]
    assert sorted({p["item"] for p in a["perturbation"]}) == [0, 1]
    note = a["perturbation_note"]
    assert "texts 0-1 of 3" in note and "text 2 not checked" in note and "ATTNLAB_MAX_AUDIT_RUNS (6" in note
    assert "/api/perturb" in note and "`item`" in note
    for p in a["perturbation"]:  # each checked verdict is /api/perturb's for that text and position
        r = client.post("/api/perturb", json={**BATCH, "item": p["item"], "position": p["position"]})
        assert r.status_code == 200, r.text[:300]
        got = r.json()
        assert p["verdict"] == got["verdict"]
        assert p["holds"] == next(c["holds"] for c in got["checks"] if c["name"] == p["mask"])
    # a bound under the first text's two passes checks no text, and says so
    none, runs, _ = counted_audit(BATCH, max_audit_runs=1)
    assert runs == 0 and none["perturbation"] == [] and none["perturbation_unchecked"] == [0, 1, 2]
    assert none["perturbation_note"].startswith("verdicts for no text of 3; texts 0-2 not checked")


def test_the_default_bound_checks_every_text_of_a_small_batch_and_every_sequence(counted_audit: Any) -> None:
    a, runs, _ = counted_audit(BATCH)
    assert {(p["item"], p["mask"]) for p in a["perturbation"]} == {
        (0, "causal"),
        (1, "causal"),
        (1, "padding"),
        (2, "causal"),
        (2, "padding"),
    }
    assert runs == 10 and a["perturbation_unchecked"] == [] and a["perturbation_note"] is None
    # one sequence is not bounded: its one to three positions always run (one pass each)
    one, runs, _ = counted_audit(
        {"model": "random", "text": "a b c d e f", "masks": {"causal": True, "window": 2}}, max_audit_runs=1
    )
    assert [p["mask"] for p in one["perturbation"]] == ["causal", "window"] and runs == 2
    assert one["perturbation_unchecked"] == [] and one["perturbation_note"] is None
