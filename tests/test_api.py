"""The REST API against a real app (TestClient runs the lifespan), and one real `attnlab serve` process."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from engine.device import resolve_device
from engine.models.textbook import W_K, W_Q, W_V, X
from server.analyses import declared_limits
from server.config import Settings
from tests.fixtures import make_app_client
from tests.helpers import assert_error, occupy
from wire.arrays import read_arrays

MakeClient = Callable[..., AbstractContextManager[TestClient]]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app for the module: each test that takes it checks only the answers to its own requests, which read no
    state of the app (no metric, cache or slot count), so a fresh app for each test would check nothing more; a test
    that changes the app or pins a setting builds its own (make_client)."""
    with make_app_client() as c:
        yield c


def test_health_reports_device_and_versions(client: TestClient) -> None:
    body = client.get("/api/health").json()
    assert body["status"] == "ok" and body["device"] == "cpu" and body["dtype"] == "float32"
    assert body["torch"] == torch.__version__  # the torch this server runs, whatever version is installed
    assert set(body["models"]) == {"textbook", "random", "custom"}
    assert body["limits"]["max_tokens"] == Settings().max_tokens and body["limits"]["max_body_bytes"] > 0
    # every limit on what one request may ask for is told, with its value (the server's own capacity is not)
    asks = {name for name in Settings.model_fields if name.startswith("max_")} - {"max_concurrent", "max_connections"}
    declared = {limit.name: limit.default for limit in declared_limits()}  # ATTNLAB_MAX_SWEEP_VALUES and the like
    assert "max_sweep_values" in declared and "max_measure_flops" in declared
    assert body["limits"] == {**{name: getattr(Settings(), name) for name in asks}, **declared}


def test_health_answers_from_a_checkout_that_was_never_installed(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run with PYTHONPATH pointing at a checkout (as on a GPU machine with no pip install), there is no package
    metadata: the version comes from the checkout's pyproject.toml, where a 500 came before."""
    from importlib.metadata import PackageNotFoundError

    from server.routes import health

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(health, "version", missing)
    health.attnlab_version.cache_clear()
    try:
        r = client.get("/api/health")
    finally:
        health.attnlab_version.cache_clear()
    assert r.status_code == 200, r.text
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'version = "{r.json()["version"]}"' in pyproject


def test_models_lists_each_loaded_model(client: TestClient) -> None:
    models = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert set(models) == {"textbook", "random", "custom"}
    tb = models["textbook"]
    assert (tb["layers"], tb["heads"], tb["d_model"], tb["d_head"], tb["d_v"]) == (1, 1, 4, 2, 3)
    assert tb["default_masks"] == {
        "causal": True,
        "padding": [True, True, True, True, False],
        "window": None,
        "blocked": [],
    }
    assert models["random"]["options"]["heads"] == 4


def test_textbook_response_can_be_checked_by_hand(client: TestClient) -> None:
    body = client.post(
        "/api/attention",
        json={"model": "textbook", "include": ["scores", "weights", "output", "contexts", "qkv", "stats"]},
    ).json()
    assert body["tokens"] == ["x1", "x2", "x3", "x4", "x5"]
    assert body["config"]["scale_factor"] == pytest.approx(1 / math.sqrt(2))
    assert body["shapes"]["q"] == [1, 5, 2] and body["shapes"]["v"] == [1, 5, 3] and body["shapes"]["output"] == [5, 3]
    head = body["layers"][0]["heads"][0]
    # Q K^T / sqrt(2) for the cell (query 3, key 1), by hand from the chapter's numbers
    q3 = [sum(X[2][t] * W_Q[t][j] for t in range(4)) for j in range(2)]
    k1 = [sum(X[0][t] * W_K[t][j] for t in range(4)) for j in range(2)]
    assert head["q"][2] == pytest.approx(q3, abs=1e-6) and head["k"][0] == pytest.approx(k1, abs=1e-6)
    assert head["scores"][2][0] == pytest.approx((q3[0] * k1[0] + q3[1] * k1[1]) / math.sqrt(2), abs=1e-6)
    # every cell's score is reported, masked or not; eligible says which are masked
    assert body["eligible"][0] == [True, False, False, False, False]
    assert all(isinstance(v, float) for row in head["scores"] for v in row)
    assert head["weights"][0] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert all(row[4] == 0.0 for row in head["weights"])  # position 5 is padding
    assert all(abs(sum(row) - 1) < 1e-6 for row in head["weights"])
    v = [[sum(X[i][t] * W_V[t][j] for t in range(4)) for j in range(3)] for i in range(5)]
    ctx = [sum(head["weights"][1][j] * v[j][c] for j in range(5)) for c in range(3)]
    assert head["contexts"][1] == pytest.approx(ctx, abs=1e-6)
    assert body["layers"][0]["output"][1] == pytest.approx(ctx, abs=1e-6)
    assert head["stats"]["max_masked_weight"] == 0.0 and head["stats"]["zero_rows"] == []


def test_explicit_masks_replace_the_defaults(client: TestClient) -> None:
    body = client.post("/api/attention", json={"model": "textbook", "masks": {}}).json()
    assert all(all(row) for row in body["eligible"])
    assert body["masks"] == {"causal": False, "padding": None, "window": None, "blocked": []}


def test_reasons_name_the_mask_behind_every_masked_cell(client: TestClient) -> None:
    masks = {"causal": True, "window": 2, "padding": [True, True, False, True, True], "blocked": [[4, 3]]}
    body = client.post("/api/attention", json={"model": "textbook", "masks": masks}).json()
    reasons = body["reasons"]
    assert set(reasons) == {"causal", "window", "padding", "blocked"}
    for q in range(5):
        for k in range(5):
            why = {name for name, grid in reasons.items() if grid[q][k]}
            expected = {"causal"} if k > q else set()
            expected |= {"window"} if abs(q - k) >= 2 else set()
            expected |= {"padding"} if k == 2 else set()
            expected |= {"blocked"} if (q, k) == (4, 3) else set()
            assert why == expected, (q, k)
            assert body["eligible"][q][k] == (not why)
    none = client.post("/api/attention", json={"model": "textbook", "masks": {}}).json()
    assert none["reasons"] == {}


def test_reasons_for_a_batch_are_each_items_own(client: TestClient) -> None:
    """A batch's grids are B x S x S: the second, shorter item is padded at key 2, the first is not."""
    req = {"model": "random", "texts": ["a b c", "d e"], "masks": {"causal": True, "blocked": [[2, 0]]}}
    body = client.post("/api/attention", json=req).json()
    reasons = body["reasons"]
    arrays = read_arrays(client.post("/api/attention", json=req, headers={"accept": ARRAYS}).content)
    assert {k: v.tolist() for k, v in arrays["reasons"].items()} == reasons  # the binary form holds the same grids
    assert set(reasons) == {"causal", "padding", "blocked"}
    assert body["batch_padding"] == [[True, True, True], [True, True, False]]
    for b in range(2):
        for q in range(3):
            for k in range(3):
                why = {name for name, grid in reasons.items() if grid[b][q][k]}
                expected = {"causal"} if k > q else set()
                expected |= {"padding"} if (b, k) == (1, 2) else set()
                expected |= {"blocked"} if (q, k) == (2, 0) else set()
                assert why == expected, (b, q, k)
                assert body["eligible"][b][q][k] == (not why)


def test_reasons_with_a_source_name_its_padding_and_blocked_cells(client: TestClient) -> None:
    """Cross-attention's grids are S_q x S_k: the source's padded key columns, and single blocked cells."""
    body = client.post(
        "/api/attention",
        json={
            "model": "random",
            "text": "a b",
            "source": {"text": "c d e", "padding": [True, False, True]},
            "masks": {"blocked": [[0, 2]]},
        },
    ).json()
    reasons = body["reasons"]
    assert set(reasons) == {"padding", "blocked"}
    for q in range(2):
        for k in range(3):
            why = {name for name, grid in reasons.items() if grid[q][k]}
            expected = ({"padding"} if k == 1 else set()) | ({"blocked"} if (q, k) == (0, 2) else set())
            assert why == expected, (q, k)
            assert body["eligible"][q][k] == (not why)


def test_padding_by_position_needs_no_token_count(client: TestClient) -> None:
    text = "the cat sat on the mat"
    flags = [True, True, False, True, False, True]
    by_flags = client.post("/api/attention", json={"model": "random", "text": text, "masks": {"padding": flags}})
    by_position = client.post("/api/attention", json={"model": "random", "text": text, "masks": {"padded": [4, 2]}})
    assert by_position.status_code == 200, by_position.text
    a, b = by_flags.json(), by_position.json()
    assert b["masks"]["padding"] == flags and b["eligible"] == a["eligible"]
    assert b["layers"][0]["heads"][0]["weights"] == a["layers"][0]["heads"][0]["weights"]
    both = {"padding": flags, "padded": [2]}
    assert_error(
        client.post("/api/attention", json={"model": "random", "text": text, "masks": both}), 422, "masks.padded"
    )
    outside = client.post("/api/attention", json={"model": "random", "text": text, "masks": {"padded": [1, 6]}})
    assert_error(outside, 422, "masks.padded[1]", "0..5")
    batch = client.post("/api/attention", json={"model": "random", "texts": ["a b", "c"], "masks": {"padded": [0]}})
    assert_error(batch, 422, "masks.padded", "batch")


def test_random_model_heads_and_grouped_kv(client: TestClient) -> None:
    req = {
        "model": "random",
        "text": "the cat sat on the mat",
        "options": {"d_model": 32, "heads": 8, "kv_heads": 2},
        "masks": {"causal": True, "window": 3, "blocked": [[5, 4]]},
    }
    body = client.post("/api/attention", json=req).json()
    assert body["tokens"] == ["the", "cat", "sat", "on", "the", "mat"]
    assert (body["config"]["n_heads"], body["config"]["n_kv_heads"], body["config"]["d_head"]) == (8, 2, 4)
    heads = body["layers"][0]["heads"]
    assert [h["kv_group"] for h in heads] == [0, 0, 0, 0, 1, 1, 1, 1]
    for h in heads:
        for q, row in enumerate(h["weights"]):
            for k, w in enumerate(row):
                if not body["eligible"][q][k]:
                    assert w == 0.0
    assert body["eligible"][5][4] is False and body["eligible"][5][3] is True and body["eligible"][5][2] is False
    assert len(body["layers"][0]["head_similarity"]) == 8


def test_qkv_of_every_head_and_its_kv_group(client: TestClient) -> None:
    req = {
        "model": "random",
        "text": "a b c",
        "options": {"d_model": 16, "heads": 4, "kv_heads": 2},
        "include": ["qkv", "scores"],
        "scale": False,
    }
    heads = client.post("/api/attention", json=req).json()["layers"][0]["heads"]
    assert [len(h["q"][0]) for h in heads] == [4, 4, 4, 4]
    assert heads[0]["k"] == heads[1]["k"] and heads[0]["k"] != heads[2]["k"]  # heads 0, 1 share K/V group 0
    for h in heads:  # unscaled scores are exactly q . k
        for i, qi in enumerate(h["q"]):
            for j, kj in enumerate(h["k"]):
                assert h["scores"][i][j] == pytest.approx(sum(a * b for a, b in zip(qi, kj, strict=True)), abs=1e-5)


def test_custom_x_and_weights_without_a_model(client: TestClient) -> None:
    req = {
        "x": [[1, 0], [0, 1], [1, 1]],
        "weights": {"w_q": [[1, 0, 0, 1], [0, 1, 1, 0]], "w_k": [[1, 0], [0, 1]], "w_v": [[1, 2], [3, 4]]},
        "heads": 2,
        "kv_heads": 1,
        "scale": False,
        "include": ["scores"],
    }
    body = client.post("/api/attention", json=req).json()
    assert body["model"] == "custom" and body["config"]["n_heads"] == 2 and body["config"]["n_kv_heads"] == 1
    # head 0: q = x[:, :2] @ [[1,0],[0,1]] = x, k = x @ [[1,0],[0,1]] = x: scores = x x^T
    assert body["layers"][0]["heads"][0]["scores"] == [[1, 0, 1], [0, 1, 1], [1, 1, 2]]
    assert "weights" not in body["layers"][0]["heads"][0]


def test_all_masked_zero_policy_returns_zero_rows(client: TestClient) -> None:
    req = {
        "model": "random",
        "text": "a b c",
        "masks": {"blocked": [[1, 0], [1, 1], [1, 2]]},
        "all_masked": "zero",
        "include": ["weights", "contexts", "stats"],
    }
    body = client.post("/api/attention", json=req).json()
    for h in body["layers"][0]["heads"]:
        assert h["weights"][1] == [0.0, 0.0, 0.0] and all(v == 0.0 for v in h["contexts"][1])
        assert h["stats"]["zero_rows"] == [1]


def test_window_wider_than_any_sequence_is_no_window(client: TestClient) -> None:
    for window in (4, 2**62, 2**63 - 1):
        resp = client.post("/api/attention", json={"model": "random", "text": "a b c", "masks": {"window": window}})
        assert resp.status_code == 200, resp.text[:300]
        body = resp.json()
        assert body["masks"]["window"] == window and all(all(row) for row in body["eligible"])


def test_layer_index_selects_one_layer(client: TestClient) -> None:
    body = client.post("/api/attention", json={"model": "random", "text": "a b", "layer": 0}).json()
    assert [layer["index"] for layer in body["layers"]] == [0]
    assert_error(
        client.post("/api/attention", json={"model": "random", "text": "a b", "layer": 1}), 422, "layer", "layers 0..0"
    )


def test_limits_come_from_settings(make_client: MakeClient) -> None:
    with make_client(max_tokens=4, max_heads=2, max_width=16, max_result_values=50) as c:
        assert_error(
            c.post("/api/attention", json={"model": "random", "text": "a b c d e"}),
            422,
            "text",
            "got 5 tokens, limit 4",
        )
        assert_error(
            c.post("/api/attention", json={"model": "random", "text": "a", "options": {"heads": 4}}),
            422,
            "options.heads",
            "limit 2",
        )
        assert_error(
            c.post("/api/attention", json={"model": "random", "text": "a", "options": {"d_model": 32}}),
            422,
            "options.d_model",
            "limit 16",
        )
        assert_error(
            c.post(
                "/api/attention", json={"model": "random", "text": "a b c d", "options": {"d_model": 16, "heads": 2}}
            ),
            422,
            "include",
            "limit 50",
        )


def test_a_result_over_the_limit_is_refused_before_the_model_runs(make_client: MakeClient) -> None:
    with make_client(max_result_values=100) as c:
        model = c.app.state.models["random"]  # type: ignore[attr-defined]
        runs: list[int] = []
        real_run = model.run

        def counted(*args: Any, **kwargs: Any) -> Any:
            runs.append(1)
            return real_run(*args, **kwargs)

        model.run = counted
        # 8 heads x 3 x 3 cells x (scores + weights) = 144 numbers before any stats: over 100
        req = {"model": "random", "text": "a b c", "options": {"d_model": 16, "heads": 8}}
        assert_error(c.post("/api/attention", json=req), 422, "include", "limit 100")
        assert runs == []
        ok = c.post("/api/attention", json={**req, "include": ["weights"]})  # 72 numbers (+ eligible) fit
        assert ok.status_code == 200 and runs == [1]


def test_body_size_limit_is_a_413(make_client: MakeClient) -> None:
    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit must hold while streaming
        yield b'{"model": "random", "text": "'
        for _ in range(100):
            yield b"a " * 50
        yield b'"}'

    with make_client(max_body_bytes=2048) as c:
        assert_error(
            c.post("/api/attention", content=chunked(), headers={"content-type": "application/json"}),
            413,
            "body",
            "2048",
        )
        small = c.post(
            "/api/attention",
            content=iter([b'{"model": "random", ', b'"text": "a b"}']),
            headers={"content-type": "application/json"},
        )
        assert small.status_code == 200 and small.json()["tokens"] == ["a", "b"]
        assert_error(c.post("/api/attention", json={"model": "random", "text": "a " * 2000}), 413, "body", "2048")


def test_busy_server_answers_503_not_a_hang(make_client: MakeClient) -> None:
    with make_client(max_concurrent=1, queue_timeout_s=0.05) as c:
        with occupy(c.app.state.pool):  # type: ignore[attr-defined]
            busy = c.post("/api/attention", json={"model": "random", "text": "a b"})
            assert_error(busy, 503, None, "busy")
            assert busy.headers["retry-after"] == "1"
        assert c.post("/api/attention", json={"model": "random", "text": "a b"}).status_code == 200


def test_openapi_documents_the_attention_endpoint(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "/api/attention" in spec["paths"] and "AttentionRequest" in spec["components"]["schemas"]
    assert client.get("/docs").status_code == 200


def test_real_server_process_answers_over_http(live_server: str) -> None:
    """End to end: `attnlab serve` on a free loopback port, as a script would call it."""
    assert httpx.get(f"{live_server}/api/health", timeout=10).json()["status"] == "ok"
    r = httpx.post(f"{live_server}/api/attention", json={"model": "textbook"}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json()["layers"][0]["heads"][0]["weights"][0][0] == 1.0
    assert_error(
        httpx.post(f"{live_server}/api/attention", json={"model": "nope", "text": "a"}, timeout=10),
        422,
        "model",
        "unknown model 'nope'",
    )


def test_npz_form_holds_the_same_numbers_as_json(client: TestClient) -> None:
    req = {
        "model": "random",
        "text": "one two three two",
        "options": {"heads": 2, "d_model": 8},
        "masks": {"causal": True},
        "include": ["scores", "weights", "output", "stats"],
    }
    as_json = client.post("/api/attention", json=req).json()
    resp = client.post("/api/attention", json=req, headers={"accept": "application/x-npz"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-npz"
    archive = np.load(io.BytesIO(resp.content), allow_pickle=False)
    meta = json.loads(archive["meta.json"].tobytes())
    assert meta["tokens"] == as_json["tokens"] and meta["config"] == as_json["config"]
    assert archive["eligible"].dtype == np.bool_ and archive["eligible"].tolist() == as_json["eligible"]
    w = archive["layers.0.heads.1.weights"]
    assert w.dtype == np.float32 and meta["layers"][0]["heads"][1]["weights"] == {"$array": "layers.0.heads.1.weights"}
    np.testing.assert_array_equal(w, np.array(as_json["layers"][0]["heads"][1]["weights"], dtype=np.float32))


ARRAYS = "application/vnd.attnlab.arrays"


def _matrices(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every matrix of a result (JSON lists or NumPy arrays), by its path."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("scores", "weights", "q", "k", "v", "contexts", "output") and path != ".shapes":
                yield f"{path}.{k}", v
            else:
                yield from _matrices(v, f"{path}.{k}")
    elif isinstance(node, list) and node and isinstance(node[0], dict):
        for i, v in enumerate(node):
            yield from _matrices(v, f"{path}.{i}")


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_arrays_form_holds_the_json_numbers(client: TestClient, precision: str) -> None:
    req = {
        "model": "random",
        "text": "one two three two one",
        "options": {"heads": 3, "kv_heads": 1, "d_model": 12},
        "masks": {"causal": True, "padded": [3]},
        "include": ["scores", "weights", "qkv", "contexts", "output", "stats"],
        "precision": precision,
    }
    as_json = client.post("/api/attention", json=req).json()
    resp = client.post("/api/attention", json=req, headers={"accept": ARRAYS})
    assert resp.status_code == 200 and resp.headers["content-type"] == ARRAYS
    decoded = read_arrays(resp.content)
    assert decoded["tokens"] == as_json["tokens"] and decoded["config"] == as_json["config"]
    assert decoded["config"]["precision"] == precision
    assert decoded["eligible"].dtype == np.bool_ and decoded["eligible"].tolist() == as_json["eligible"]
    assert {k: v.tolist() for k, v in decoded["reasons"].items()} == as_json["reasons"]
    assert decoded["layers"][0]["heads"][2]["stats"] == as_json["layers"][0]["heads"][2]["stats"]
    pairs = dict(_matrices(as_json))
    got = dict(_matrices(decoded))
    assert set(got) == set(pairs) and len(got) == 3 * 6 + 1  # 3 heads x (scores weights q k v contexts) + output
    for path, value in got.items():
        assert value.dtype == np.dtype(precision), path
        np.testing.assert_array_equal(value, np.array(pairs[path], dtype=value.dtype), err_msg=path)
    full = client.post("/api/attention", json={**req, "precision": "float32"}).json()
    for path, value in got.items():  # float16 keeps about 3 significant digits of the float32 numbers
        exact = np.array(dict(_matrices(full))[path])
        np.testing.assert_allclose(value.astype(np.float64), exact, rtol=1e-3, atol=1e-4, err_msg=path)


def test_float16_arrays_take_about_two_bytes_a_value(client: TestClient) -> None:
    req = {"model": "random", "text": " ".join(["w"] * 64), "options": {"heads": 8}, "include": ["weights"]}
    sizes = {}
    for precision in ("float32", "float16"):
        resp = client.post("/api/attention", json={**req, "precision": precision}, headers={"accept": ARRAYS})
        assert resp.status_code == 200
        sizes[precision] = len(resp.content) / (8 * 64 * 64)
    assert sizes["float16"] <= 2.2 and sizes["float32"] <= 4.3, sizes
    npz = client.post("/api/attention", json={**req, "precision": "float16"}, headers={"accept": "application/x-npz"})
    archive = np.load(io.BytesIO(npz.content), allow_pickle=False)
    assert archive["layers.0.heads.7.weights"].dtype == np.float16


def test_float16_refuses_numbers_it_cannot_hold(client: TestClient) -> None:
    big_x = [[300.0 * (i + 1) * (j % 2 * 2 - 1) for j in range(4)] for i in range(5)]
    resp = client.post("/api/attention", json={"model": "textbook", "x": big_x, "precision": "float16"})
    assert_error(resp, 422, "precision", "float16", "float32")
    assert client.post("/api/attention", json={"model": "textbook", "x": big_x}).status_code == 200
    heads = client.post(
        "/api/heads/top", json={"model": "random", "text": "a b", "query": 1, "key": 0, "precision": "float16"}
    )
    assert_error(heads, 422, "precision")


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_other_dtypes_keep_rows_summing_to_one(make_client: MakeClient, dtype: str) -> None:
    with make_client(dtype=dtype) as c:
        body = c.post("/api/attention", json={"model": "random", "text": "a b c d", "masks": {"causal": True}}).json()
    assert body["config"]["dtype"] == dtype
    tol = 1e-9 if dtype == "float64" else 1e-2
    for h in body["layers"][0]["heads"]:
        assert all(abs(sum(row) - 1) < tol for row in h["weights"])
        assert h["weights"][0][1:] == [0.0, 0.0, 0.0]


def test_device_choice_is_explicit() -> None:
    assert resolve_device("cpu").type == "cpu"
    if torch.cuda.is_available():
        assert resolve_device("auto").type == "cuda"
    else:
        assert resolve_device("auto").type == "cpu"
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_hosts_outside_the_allow_list_are_refused(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    with make_client(allowed_hosts="localhost,127.0.0.1,*.example.org") as c:
        assert c.get("/api/health", headers={"host": "localhost:8000"}).status_code == 200
        assert c.get("/api/health", headers={"host": "class.example.org"}).status_code == 200
        err = assert_error(c.get("/api/health", headers={"host": "evil.test"}), 400, "host", "ATTNLAB_ALLOWED_HOSTS")
        assert err["code"] == "bad_host"
        assert c.get("/", headers={"host": "attacker.example.com"}).status_code == 400
    with make_client(allowed_hosts="*") as c:
        assert c.get("/api/health", headers={"host": "anything.test"}).status_code == 200


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    page = client.get("/", headers={"accept": "text/html"})
    csp = page.headers["content-security-policy"]
    # scripts: the page's own files, and its import map by hash; no inline script otherwise, no eval
    assert re.search(r"script-src 'self' 'sha256-[A-Za-z0-9+/=]{44}';", csp), csp
    assert "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp and "unsafe-inline'; style" not in csp
    assert "script-src 'self';" in client.get("/api/health").headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-store"
    assert client.post("/api/attention", json={"model": "textbook"}).headers["cache-control"] == "no-store"
    assert "max-age" in client.get("/vendor/plotly.min.js").headers["cache-control"]
    docs = client.get("/docs")
    assert "/vendor/docs/swagger-ui-bundle.js" in docs.text and "cdn" not in docs.text
    docs_scripts = docs.headers["content-security-policy"].split("script-src")[1].split(";")[0]
    assert docs_scripts.strip() == "'self'", docs_scripts  # Swagger UI starts from a file, not an inline script
    assert "cdn" not in client.get("/redoc").text and client.get("/vendor/docs/redoc.standalone.js").status_code == 200
    assert client.get("/vendor/docs/../app.py").status_code == 404


@pytest.mark.parametrize(
    ("env", "args", "words"),
    [
        ({"ATTNLAB_PORT": "abc"}, [], "ATTNLAB_PORT: Input should be a valid integer"),
        ({"ATTNLAB_MAX_TOKENS": "0"}, [], "ATTNLAB_MAX_TOKENS: Input should be greater than or equal to 1"),
        ({}, ["--port", "99999"], "--port: Input should be less than or equal to 65535"),
        ({"ATTNLAB_MAX_SWEEP_VALUES": "0"}, [], "attnlab: ATTNLAB_MAX_SWEEP_VALUES is 0: at least 1\n"),
    ],
)
def test_invalid_settings_stop_the_server_with_one_line_each(env: dict[str, str], args: list[str], words: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "server", "serve", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_mistyped_serve_is_refused_before_the_engine_or_any_analysis_is_imported() -> None:
    """`attnlab serve --port 99999` answers from its arguments and settings alone: neither torch, the engine's
    models nor the analyses are imported (python -X importtime names every module the process imports)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "server", "serve", "--port", "99999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "attnlab: --port: Input should be less than or equal to 65535" in out.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert {"server.cli", "server.config", "pydantic"} <= imported  # the listing holds what was imported
    assert not {"torch", "engine.models", "server.analyses", "server.app"} & imported, sorted(imported)


def test_page_files_go_out_gzipped_with_validators(client: TestClient) -> None:
    for path, cache in (("/static/js/main.js", "no-cache"), ("/vendor/plotly.min.js", "public, max-age=86400")):
        plain = client.get(path, headers={"accept-encoding": "identity"})
        zipped = client.get(path, headers={"accept-encoding": "gzip"})
        assert plain.status_code == zipped.status_code == 200
        assert zipped.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
        assert zipped.content == plain.content  # httpx undoes the gzip
        assert int(zipped.headers["content-length"]) < len(plain.content) / 2
        assert zipped.headers["cache-control"] == cache and zipped.headers["etag"] == plain.headers["etag"]
        again = client.get(path, headers={"if-none-match": zipped.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    assert client.get("/static/js/nope.js").status_code == 404
    assert client.get("/static/../server/app.py").status_code == 404
    assert client.get("/static/%2e%2e/server/app.py").status_code == 404


def test_the_guide_documents_every_setting() -> None:
    readme = (Path(__file__).resolve().parents[1] / "docs" / "settings.md").read_text()
    names = [n for n in Settings.model_fields if n != "declared"] + [limit.name for limit in declared_limits()]
    missing = [name for name in names if f"ATTNLAB_{name.upper()}" not in readme]
    assert missing == []
