"""POST /api/runs and its tiles and rows, through the real app: every tile of every level, a row and the summaries
equal a dense float64 NumPy computation from the run's own Q and K (asked of /api/attention with include qkv);
names, eviction, ETags and refusals."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.test_blockwise import fold

S = 600  # three levels of 256 x 256 tiles, the last ones cut at S
WORDS = [f"w{i % 97}" for i in range(S)]
BODY: dict[str, Any] = {
    "model": "random",
    "text": " ".join(WORDS),
    "options": {"heads": 2, "kv_heads": 1, "d_model": 16, "seed": 3, "positions": True},
    "masks": {"causal": True, "padded": [5, S - 1]},
}
NAME = "zoom-run-0001"


@pytest.fixture(scope="module")
def app64() -> Iterator[TestClient]:
    from server.app import create_app
    from server.config import Settings

    settings = Settings(device="cpu", models="random", allowed_hosts="testserver", dtype="float64", max_tokens=1024)
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(scope="module")
def dense(app64: TestClient) -> np.ndarray:
    """(H, S, S) float64 weights from the run's q and k, the masks applied here."""
    r = app64.post("/api/attention", json={**BODY, "include": ["qkv"]})
    assert r.status_code == 200, r.text
    heads = r.json()["layers"][0]["heads"]
    q = np.array([h["q"] for h in heads])
    k = np.array([h["k"] for h in heads])
    s = (q @ k.transpose(0, 2, 1)) / math.sqrt(q.shape[-1])
    allowed = np.tril(np.ones((S, S), dtype=bool))
    allowed[:, [5, S - 1]] = False
    s = np.where(allowed, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def posted(app64: TestClient) -> dict[str, Any]:
    r = app64.post("/api/runs", json={**BODY, "grid": 32}, headers={"X-Attnlab-Run": NAME})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_run_answers_its_name_shape_and_summaries(posted: dict[str, Any], dense: np.ndarray) -> None:
    assert posted["run"] == NAME and len(posted["tokens"]) == S
    c = posted["config"]
    assert (c["seq_len"], c["n_heads"], c["levels"], c["tile"], c["block"]) == (S, 2, 2, 256, 32)
    for h, head in enumerate(posted["layers"][0]["heads"]):
        np.testing.assert_allclose(np.array(head["summary"]["max"]), fold(dense[h], 32, "max"), atol=1e-6)
        np.testing.assert_allclose(np.array(head["summary"]["mean"]), fold(dense[h], 32, "mean"), atol=1e-6)
        assert head["sink_mass"] == pytest.approx(dense[h][:, 0].mean(), abs=1e-6)


def test_every_tile_equals_the_dense_weights(app64: TestClient, posted: dict[str, Any], dense: np.ndarray) -> None:
    for z in range(3):
        span = 256 * 2 ** (2 - z)
        for x in range(math.ceil(S / span)):
            for y in range(math.ceil(S / span)):
                for agg in ("max", "mean"):
                    r = app64.get(f"/api/runs/{NAME}/tiles/0/1/{z}/{x}/{y}", params={"agg": agg})
                    assert r.status_code == 200, r.text
                    t = r.json()
                    assert (t["q0"], t["k0"], t["cell"]) == (y * span, x * span, 2 ** (2 - z))
                    part = dense[1, t["q0"] : t["q0"] + span, t["k0"] : t["k0"] + span]
                    np.testing.assert_allclose(np.array(t["weights"]), fold(part, t["cell"], agg), atol=1e-6)


def test_a_row_is_exact_and_names_its_top_keys(app64: TestClient, posted: dict[str, Any], dense: np.ndarray) -> None:
    r = app64.get(f"/api/runs/{NAME}/rows/0/0/{S - 2}")
    assert r.status_code == 200, r.text
    body = r.json()
    np.testing.assert_allclose(np.array(body["weights"]), dense[0, S - 2], atol=1e-7)
    want = np.argsort(-dense[0, S - 2])[:10]
    assert [t["key"] for t in body["top"]] == [int(k) for k in want]
    assert body["top"][0]["token"] == WORDS[int(want[0])]


def test_an_unchanged_tile_is_a_304_and_a_new_run_of_the_same_name_changes_its_etag(
    app64: TestClient, posted: dict[str, Any]
) -> None:
    url = f"/api/runs/{NAME}/tiles/0/0/1/1/1"
    first = app64.get(url)
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "private, no-cache"
    assert app64.get(url, headers={"If-None-Match": etag}).status_code == 304
    other = {**BODY, "options": {**BODY["options"], "seed": 4}}
    assert app64.post("/api/runs", json=other, headers={"X-Attnlab-Run": "other-run-01"}).status_code == 200
    assert app64.get(url, headers={"If-None-Match": etag}).status_code == 304  # the other name left this run alone
    assert app64.post("/api/runs", json=BODY, headers={"X-Attnlab-Run": NAME}).status_code == 200
    again = app64.get(url, headers={"If-None-Match": etag})
    assert again.status_code == 200 and again.headers["etag"] != etag


@pytest.mark.parametrize("path", ["tiles/0/0/1/1/1", f"rows/0/1/{S - 2}"], ids=["tile", "row"])
def test_if_none_match_any_or_a_weak_tag_is_a_304(app64: TestClient, posted: dict[str, Any], path: str) -> None:
    """RFC 9110's If-None-Match on a GET: `*` matches the kept run's representation, tags compare weakly."""
    url = f"/api/runs/{NAME}/{path}"
    etag = app64.get(url).headers["etag"]
    for given in ("*", f"W/{etag}", f'"elsewhere", W/{etag}', etag):
        r = app64.get(url, headers={"If-None-Match": given})
        assert (r.status_code, r.content, r.headers["etag"]) == (304, b"", etag), given
    assert app64.get(url, headers={"If-None-Match": 'W/"elsewhere"'}).status_code == 200
    gone = app64.get(f"/api/runs/never-made-run/{path}", headers={"If-None-Match": "*"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "run_expired"  # no representation: no 304
    assert app64.get(url, headers={"sec-fetch-site": "same-origin"}).status_code == 200  # the page's own GETs


def test_refusals_name_their_field(app64: TestClient, posted: dict[str, Any]) -> None:
    def bad(r: Any, status: int, field: str) -> None:
        assert r.status_code == status, r.text
        assert r.json()["error"]["field"] == field, r.text

    bad(app64.post("/api/runs", json={**BODY, "demo_bug": "flipped_mask"}), 422, "demo_bug")
    bad(app64.post("/api/runs", json={**BODY, "include": ["weights"]}), 422, "include")
    bad(app64.post("/api/runs", json={**BODY, "grid": 4}), 422, "grid")
    blocked = {**BODY, "masks": {"blocked": [[S, 0]]}}
    bad(app64.post("/api/runs", json=blocked), 422, "masks.blocked[0]")
    bad(app64.get(f"/api/runs/{NAME}/tiles/0/0/3/0/0"), 422, "z")
    bad(app64.get(f"/api/runs/{NAME}/tiles/0/0/2/3/0"), 422, "x")
    bad(app64.get(f"/api/runs/{NAME}/tiles/1/0/0/0/0"), 422, "layer")
    bad(app64.get(f"/api/runs/{NAME}/tiles/0/2/0/0/0"), 422, "head")
    bad(app64.get(f"/api/runs/{NAME}/rows/0/0/{S}"), 422, "query")
    bad(app64.get("/api/runs/never-made-01/rows/0/0/0"), 404, "run")
    assert app64.get("/api/runs/never-made-01/rows/0/0/0").json()["error"]["code"] == "run_expired"


def test_past_max_run_tokens_is_a_422_and_the_oldest_run_is_evicted_past_run_bytes(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    body = {"model": "random", "text": " ".join(WORDS[:300]), "options": {"heads": 1, "d_model": 8}}
    with make_client(models="random", max_run_tokens=299) as c:
        r = c.post("/api/runs", json=body)
        assert r.status_code == 422 and "ATTNLAB_MAX_RUN_TOKENS" in r.json()["error"]["message"]
    with make_client(models="random", run_bytes=40_000) as c:
        sizes = []
        for name in ("first-run-01", "second-run-01"):
            r = c.post("/api/runs", json=body, headers={"X-Attnlab-Run": name})
            assert r.status_code == 200, r.text
            sizes.append(r.json()["config"]["bytes"])
        assert 20_000 < sizes[0] == sizes[1] <= 40_000  # one run fits, two do not
        assert c.get("/api/runs/first-run-01/rows/0/0/0").json()["error"]["code"] == "run_expired"
        assert c.get("/api/runs/second-run-01/rows/0/0/0").status_code == 200


def test_a_run_past_the_attention_token_limit_is_served(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """4,096 tokens, eight times ATTNLAB_MAX_TOKENS: the run keeps O(S d), and a deepest tile is exact weights."""
    n = 4096
    body = {"model": "random", "text": " ".join(f"t{i}" for i in range(n)), "options": {"heads": 2, "d_model": 16}}
    with make_client(models="random", max_tokens=512) as c:
        assert c.post("/api/attention", json=body).status_code == 413  # past ATTNLAB_MAX_TEXT_CHARS already
        r = c.post("/api/runs", json={**body, "masks": {"causal": True}}, headers={"X-Attnlab-Run": "long-run-001"})
        assert r.status_code == 200, r.text
        cfg = r.json()["config"]
        # q, k and the normalisers (O(S d)), the summaries and a pyramid of 4 x 4 blocks: a sixteenth of S x S
        assert cfg["levels"] == 4 and cfg["fine"] == 4
        assert cfg["bytes"] <= 4 * n * (2 * 8 + 2 * 8 + 2) + 2 * 8 * (n // 4) ** 2 + 2 * 8 * 256**2
        t = c.get("/api/runs/long-run-001/tiles/0/1/4/15/15").json()
        w = np.array(t["weights"])
        assert w.shape == (256, 256) and np.allclose(np.tril(w).sum(), w.sum())  # causal within the diagonal tile
        row = np.array(c.get(f"/api/runs/long-run-001/rows/0/1/{n - 1}").json()["weights"])
        assert row.shape == (n,) and abs(row.sum() - 1) < 1e-5
        np.testing.assert_allclose(w[-1], row[n - 256 :], atol=1e-6)


def test_a_rotary_checkpoint_runs_long_through_the_same_forward(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """pycode (rotary, RMSNorm, SwiGLU, grouped K/V, 4 layers): every layer's row from the long run equals
    /api/attention's weights for the same code; past its configured positions the run is refused by name."""
    code = "def area(width, height):\n    return width * height\n" * 6
    with make_client(models="pycode") as c:
        dense = c.post("/api/attention", json={"model": "pycode", "text": code})
        assert dense.status_code == 200, dense.text
        layers = dense.json()["layers"]
        s = len(dense.json()["tokens"])
        r = c.post("/api/runs", json={"model": "pycode", "text": code}, headers={"X-Attnlab-Run": "pycode-run-1"})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == dense.json()["tokens"] and r.json()["config"]["n_layers"] == len(layers)
        for layer in range(len(layers)):
            for head in (0, 3):
                got = c.get(f"/api/runs/pycode-run-1/rows/{layer}/{head}/{s - 1}").json()["weights"]
                want = layers[layer]["heads"][head]["weights"][s - 1]
                np.testing.assert_allclose(got, want, atol=2e-6)
        positions = c.get("/api/models").json()
        limit = next(m for m in positions["models"] if m["name"] == "pycode")["max_positions"]
        too_long = {"model": "pycode", "text": "x " * (limit + 10)}
        refused = c.post("/api/runs", json=too_long)
        assert refused.status_code == 422, refused.text
