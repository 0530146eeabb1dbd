"""The attnlab package: Client against a real `attnlab serve` on loopback, and attnlab.run against the same API.

Every number is checked against the JSON API's answer to the same request, never against a hard-coded value.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

import attnlab
from attnlab.arrays import read_arrays
from attnlab.local import loaded_models
from server.forms import ArraysResponse
from tests.fixtures import SERVERS
from tests.helpers import ROOT, free_port, until

MAX_TOKENS = int(SERVERS["full_length"].env["ATTNLAB_MAX_TOKENS"])  # the shared server's token limit
INDUCTION = "red ball king river red ball king river"
RANDOM = {
    "model": "random",
    "text": "the cat sat on the mat",
    "options": {"d_model": 16, "heads": 4, "kv_heads": 2, "seed": 3, "positions": True},
    "masks": {"causal": True, "window": 3, "blocked": [[4, 3]]},
}
# /api/attention bodies: each model's own path, a layer of a two-layer model, float16, contexts and q/k/v
ATTENTION = {
    "textbook": {"model": "textbook", "include": ["scores", "weights", "contexts", "qkv", "output", "stats"]},
    "random": RANDOM,
    "induction-layer-1": {"model": "induction", "text": INDUCTION, "layer": 1},
    "float16": {**RANDOM, "precision": "float16", "include": ["weights"]},
    "custom": {
        "x": [[1, 0], [0, 1], [1, 1]],
        "heads": 2,
        "scale": False,
        "weights": {"w_q": [[1, 0, 0, 1], [0, 1, 1, 0]], "w_k": [[1, 0, 0, 1], [0, 1, 1, 0]], "w_v": [[1, 2], [3, 4]]},
    },
}


@pytest.fixture(scope="module")
def base(full_length_server: str) -> str:
    """The session's server with every built-in model (tests/fixtures.py's full_length): the client's requests and
    the JSON API's are both sent to it, and compared."""
    return full_length_server


@pytest.fixture(scope="module")
def api(base: str) -> Iterator[attnlab.Client]:
    with attnlab.Client(base, timeout=60) as client:
        yield client


def raw(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
    """The JSON API itself, asked for JSON."""
    return httpx.request(method, f"{base}{path}", json=body, headers={"accept": "application/json"}, timeout=60)


VOLATILE = {"timings_ms"}  # measured per request, not computed from the input


def same(got: Any, want: Any, where: str = "", atol: float = 0.0) -> list[str]:
    """Where `got` (an answer with arrays) differs from `want` (the JSON API's, or another answer): [] when equal.

    An array equals its JSON when the JSON, read into the array's dtype, is the same numbers: bit for bit, or
    within `atol` (and so for every float)."""
    if isinstance(got, np.ndarray):
        if want is None:
            return [f"{where}: an array where JSON has null"]
        expected = np.asarray(want, dtype=got.dtype)
        if got.shape != expected.shape:
            return [f"{where}: shape {got.shape} vs {expected.shape}"]
        equal = np.allclose(got, expected, rtol=0, atol=atol, equal_nan=True) if atol else np.array_equal(got, expected)
        return [] if equal else [f"{where}: values differ"]
    if isinstance(got, dict) and isinstance(want, dict):
        if set(got) != set(want):
            return [f"{where}: keys {sorted(set(got) ^ set(want))}"]
        return [d for k in got if k not in VOLATILE for d in same(got[k], want[k], f"{where}.{k}", atol)]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items vs {len(want)}"]
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (g, w) in pairs for d in same(g, w, f"{where}[{i}]", atol)]
    if isinstance(got, float) and isinstance(want, float):
        equal = math.isclose(got, want, rel_tol=0, abs_tol=atol) or (math.isnan(got) and math.isnan(want))
        return [] if equal else [f"{where}: {got!r} vs {want!r}"]
    return [] if got == want and type(got) is type(want) else [f"{where}: {got!r} vs {want!r}"]


def heads_of(result: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for layer in result["layers"]:
        yield from layer["heads"]


# ---- the arrays form -------------------------------------------------------------------------------------------


def test_arrays_reader_reads_what_the_server_writes() -> None:
    rng = np.random.default_rng(0)
    body = {
        "tokens": ["a", "b", "c"],
        "eligible": rng.random((3, 3)) > 0.5,
        "layers": [{"index": 0, "heads": [{"weights": rng.random((3, 3), dtype=np.float32), "stats": {"e": 1.5}}]}],
        "half": rng.random((2, 5)).astype(np.float16),
        "double": rng.random(7),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "batch": rng.random((2, 3, 3), dtype=np.float32),
        "none": None,
    }
    data = bytes(ArraysResponse(body).body)
    for got in (read_arrays(data),):
        for path in (("eligible",), ("half",), ("double",), ("empty",), ("batch",)):
            a, b = got[path[0]], body[path[0]]
            assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path
        w = got["layers"][0]["heads"][0]
        assert np.array_equal(w["weights"], body["layers"][0]["heads"][0]["weights"]) and w["stats"] == {"e": 1.5}
        assert got["tokens"] == ["a", "b", "c"] and got["none"] is None
    assert read_arrays(bytearray(data))["double"].flags.writeable
    with pytest.raises(ValueError, match="ATNA"):
        read_arrays(b"NOPE" + data[4:])
    with pytest.raises(ValueError, match="header"):
        read_arrays(data[:20])


def test_arrays_form_stacks_what_a_list_of_items_shares() -> None:
    rng = np.random.default_rng(1)
    heads = [{"index": h, "kv_group": h // 2, "weights": rng.random((4, 4), dtype=np.float32)} for h in range(4)]
    with_stats = [{**h, "stats": {"entropy": float(h["index"])}} for h in heads]
    ragged = [{"w": rng.random((2, 2), dtype=np.float32)}, {"w": rng.random((3, 3), dtype=np.float32)}]
    only_arrays = [{"w": rng.random(3, dtype=np.float32)} for _ in range(3)]
    body = {"flat": heads, "nested": with_stats, "ragged": ragged, "only_arrays": only_arrays}
    data = bytes(ArraysResponse(body).body)
    header = json.loads(data[8 : 8 + int.from_bytes(data[4:8], "little")])
    # a list's shared matrices are named once, with the item count first; the flat fields go as columns
    assert header["flat"]["$columns"] == {"index": [0, 1, 2, 3], "kv_group": [0, 0, 1, 1]}
    assert header["flat"]["$stacked"]["weights"]["shape"] == [4, 4, 4]
    assert header["nested"]["$items"][2] == {"index": 2, "kv_group": 1, "stats": {"entropy": 2.0}}
    assert isinstance(header["ragged"], list)  # shapes differ: one array each
    got = read_arrays(data)
    for name, items in body.items():
        assert len(got[name]) == len(items), name
        for mine, theirs in zip(got[name], items, strict=True):
            assert set(mine) == set(theirs), name
            for k, v in theirs.items():
                if isinstance(v, np.ndarray):
                    assert mine[k].dtype == v.dtype and np.array_equal(mine[k], v), (name, k)
                else:
                    assert mine[k] == v, (name, k)


def test_same_tells_a_one_ulp_change() -> None:
    """The comparison every test below relies on can fail: one weight moved by one float32 ulp is a difference."""
    w = np.array([[0.25, 0.75]], dtype=np.float32)
    as_json = w.tolist()
    assert same({"w": w}, {"w": as_json}) == []
    moved = w.copy()
    moved[0, 1] = np.nextafter(moved[0, 1], np.float32(1))
    assert same({"w": moved}, {"w": as_json}) == [".w: values differ"]
    assert same({"w": w[:, :1]}, {"w": as_json}) != []


# ---- the client ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ATTENTION))
def test_client_attention_matches_the_json_api(api: attnlab.Client, base: str, name: str) -> None:
    body = ATTENTION[name]
    got = api.attention(**body)
    want = raw(base, "POST", "/api/attention", body).json()
    assert same(got, want) == []
    assert isinstance(got["eligible"], np.ndarray) and got["eligible"].dtype == bool
    dtype = np.float16 if body.get("precision") == "float16" else np.float32
    for head in heads_of(got):
        assert isinstance(head["weights"], np.ndarray) and head["weights"].dtype == dtype
        assert head["weights"].shape == (len(got["tokens"]), len(got["tokens"]))
        assert head["weights"].flags.writeable
    assert got["layers"][0]["index"] == body.get("layer", 0)


# the client method, its keyword arguments (the body), and the JSON API call it stands for
ENDPOINTS: list[tuple[str, dict[str, Any], str, str]] = [
    ("health", {}, "GET", "/api/health"),
    ("models", {}, "GET", "/api/models"),
    ("heads", {"model": "induction", "segment_len": 4}, "POST", "/api/heads"),
    (
        "heads",
        {"model": "induction", "probe": {"segment_lengths": [4, 6], "repeats": 3, "seed": 2}},
        "POST",
        "/api/heads",
    ),
    ("top_heads", {"model": "random", "text": "a b c d", "query": 3, "key": 1, "k": 3}, "POST", "/api/heads/top"),
    (
        "perturb",
        {"model": "random", "text": "a b c d", "masks": {"causal": True}, "position": 2},
        "POST",
        "/api/perturb",
    ),
    (
        "intervene",
        {
            "model": "induction",
            "text": INDUCTION,
            "ablate": [{"layer": 1, "head": 0}],
            "layer": 1,
            "include": ["weights"],
        },
        "POST",
        "/api/intervene",
    ),
    ("decode", {"model": "induction", "text": "red ball king red ball"}, "POST", "/api/decode"),
    ("cost", {"seq_len": 64, "heads": 4, "kv_heads": 2, "layers": 2}, "POST", "/api/cost"),
    ("scale_sweep", {"widths": [1, 4, 16], "samples": 50, "seed": 1}, "POST", "/api/scale-sweep"),
    (
        "patch_run",
        {
            "clean": {"model": "induction", "text": INDUCTION},
            "corrupted": {"model": "induction", "text": INDUCTION.replace("king", "moon", 1), "include": ["weights"]},
            "hook": "z",
            "cell": {"layer": 0, "column": 1},
        },
        "POST",
        "/api/patch/run",
    ),
]


@pytest.mark.parametrize(("method", "kwargs", "verb", "path"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS])
def test_client_round_trips_every_endpoint(
    api: attnlab.Client, base: str, method: str, kwargs: dict[str, Any], verb: str, path: str
) -> None:
    got = getattr(api, method)(**kwargs)
    want = raw(base, verb, path, kwargs if verb == "POST" else None)
    assert want.status_code == 200, want.text[:300]
    assert same(got, want.json()) == []
    if method == "intervene":
        for side in ("before", "after"):
            assert all(isinstance(h["weights"], np.ndarray) for h in heads_of(got[side]))
        assert max(got["final_delta"]) > 0  # the ablation did something, and the client carried it


def test_client_has_a_method_for_every_endpoint(api: attnlab.Client, base: str) -> None:
    """Every POST route of the API's own schema is a client method, named as GET /api/analyses says, and dir()
    lists it."""
    spec = httpx.get(f"{base}/openapi.json").json()
    # the training lab's runs are a resource, not an analysis: their POSTs are methods of their own
    training = {"/api/train": "train", "/api/train/{run_id}/cancel": "cancel_training"}
    assert all(callable(getattr(api, name, None)) for name in training.values())
    posts = sorted(
        p for p, ops in spec["paths"].items() if "post" in ops and p.startswith("/api/") and p not in training
    )
    assert len(posts) >= 10, posts
    declared = {a["path"]: a["client"] for a in httpx.get(f"{base}/api/analyses").json()["analyses"]}
    assert sorted(declared) == posts
    missing = [p for p in posts if not callable(getattr(api, declared[p], None))]
    assert missing == []
    assert {_method_name(p) for p in posts} <= set(dir(api))  # today's names, as scripts call them


def test_client_calls_a_declared_analysis_by_name(api: attnlab.Client, base: str) -> None:
    """call() reaches an analysis by its client name or its API name, as its method does; an undeclared name is an
    AttributeError naming the declared ones."""
    body = {"widths": [2, 8], "samples": 20}
    want = raw(base, "POST", "/api/scale-sweep", body).json()
    assert same(api.call("scale_sweep", **body), want) == []
    assert same(api.call("scale-sweep", **body), want) == []
    with pytest.raises(AttributeError, match="scale_sweep"):
        api.call("no_such_analysis")
    with pytest.raises(AttributeError, match="no_such_analysis"):
        api.no_such_analysis  # noqa: B018


def test_client_names_a_run_and_follows_its_progress(api: attnlab.Client) -> None:
    got = api.attention("random", text="one two three", run="client-run-01")
    assert got["tokens"] == ["one", "two", "three"]
    progress = api.progress("client-run-01")
    assert progress["run"] == "client-run-01" and progress["stage"] == "done" and progress["elapsed_ms"] > 0
    with pytest.raises(attnlab.ApiError) as e:
        api.progress("never-named-01")
    assert e.value.status == 404 and e.value.field == "run"
    with pytest.raises(attnlab.ApiError) as e:
        api.progress("never-named-01", wait_ms=20)
    assert e.value.status == 404 and "after waiting 20 ms" in str(e.value)
    assert api.progress("client-run-01", wait_ms=5000)["stage"] == "done"


def test_client_runs_a_long_input_and_reads_its_tiles_and_rows(api: attnlab.Client, base: str) -> None:
    """runs() names the run; tile() and row() read it as arrays, equal to the JSON the server answers; a run the
    server does not hold is an ApiError with code run_expired."""
    body = {"model": "random", "text": " ".join(f"w{i}" for i in range(600)), "options": {"heads": 2, "d_model": 16}}
    got = api.runs(run="client-run-01", **body)
    assert got["run"] == "client-run-01" and got["config"]["levels"] == 2
    assert isinstance(got["layers"][0]["heads"][1]["summary"]["max"], np.ndarray)
    t = api.tile("client-run-01", 0, 1, 2, 1, 1)
    want = httpx.get(f"{base}/api/runs/client-run-01/tiles/0/1/2/1/1", timeout=30).json()
    assert isinstance(t["weights"], np.ndarray) and same(t, want) == []
    r = api.row("client-run-01", 0, 0, 599)
    assert abs(float(r["weights"].sum()) - 1) < 1e-5 and r["top"][0]["key"] == int(r["weights"].argmax())
    with pytest.raises(attnlab.ApiError) as gone:
        api.row("never-made-01", 0, 0, 0)
    assert gone.value.code == "run_expired"


def _method_name(path: str) -> str:
    return {"/api/heads/top": "top_heads", "/api/patch/run": "patch_run"}.get(
        path, path.rsplit("/", 1)[-1].replace("-", "_")
    )


def test_client_export_gives_the_servers_html(api: attnlab.Client, base: str, tmp_path: Any) -> None:
    body = {"model": "random", "text": "one two three", "view": "all"}
    out = tmp_path / "view.html"
    page = api.export(**body, path=out)
    want = raw(base, "POST", "/api/export", body)
    assert want.status_code == 200 and page == want.text and out.read_text(encoding="utf-8") == page
    assert page.lstrip().lower().startswith("<!doctype html>")
    with pytest.raises(attnlab.ApiError) as err:
        api.export("random", text="one two", view="sideways")
    assert err.value.status == 422 and err.value.field == "view"


class Recording(httpx.HTTPTransport):
    """A real transport that notes each request's path and Accept, and the answer's content type."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        self.seen.append((request.url.path, request.headers["accept"], resp.headers["content-type"]))
        return resp


def test_client_asks_for_the_arrays_form_where_there_is_one(base: str) -> None:
    recording = Recording()
    with attnlab.Client(base, transport=recording) as api:
        api.attention("textbook")
        api.intervene("textbook", edit=[{"layer": 0, "head": 0, "query": 2, "key": 0, "weight": 0.9}])
        api.health()
        api.intervene("textbook")  # the declared analyses are read once per client
    arrays = "application/vnd.attnlab.arrays"
    assert [(path, kind) for path, _, kind in recording.seen] == [
        ("/api/attention", arrays),
        ("/api/analyses", "application/json"),
        ("/api/intervene", arrays),
        ("/api/health", "application/json"),
        ("/api/intervene", arrays),
    ]
    computed = [accept for path, accept, _ in recording.seen if path in ("/api/attention", "/api/intervene")]
    assert len(computed) == 3 and all(accept.startswith(arrays) for accept in computed)


def test_client_compare_gives_diffs_as_arrays(api: attnlab.Client, base: str) -> None:
    a = {"model": "random", "text": "a b c", "layer": 0}
    b = {**a, "masks": {"causal": True}}
    got = api.compare(a, b)
    assert same(got, raw(base, "POST", "/api/compare", {"a": a, "b": b}).json()) == []
    diff = got["layers"][0]["heads"][0]["diff"]
    assert isinstance(diff, np.ndarray) and diff.dtype == np.float32 and diff.shape == (3, 3)
    wa, wb = got["a"]["layers"][0]["heads"][0]["weights"], got["b"]["layers"][0]["heads"][0]["weights"]
    np.testing.assert_allclose(diff, wb - wa, atol=1e-6)


def test_client_sends_numpy_input(api: attnlab.Client, base: str) -> None:
    body = ATTENTION["custom"]
    as_numpy = {**body, "x": np.array(body["x"], dtype=np.float64), "heads": np.int64(2)}
    assert same(api.attention(**as_numpy), raw(base, "POST", "/api/attention", body).json()) == []


ERRORS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "unknown model": ("/api/attention", "attention", {"model": "nope", "text": "a b"}),
    "too many tokens": ("/api/attention", "attention", {"model": "random", "text": " ".join(["w"] * (MAX_TOKENS + 8))}),
    "bad field": ("/api/attention", "attention", {"model": "random", "text": "a", "masks": {"window": 0}}),
    "layer past the last": ("/api/intervene", "intervene", {"model": "induction", "text": "red", "layer": 5}),
    "probe too long": ("/api/heads", "heads", {"model": "induction", "segment_len": 40}),
    "cost": ("/api/cost", "cost", {"seq_len": 0}),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_client_raises_the_servers_error(api: attnlab.Client, base: str, case: str) -> None:
    path, method, body = ERRORS[case]
    want = raw(base, "POST", path, body)
    assert want.status_code >= 400
    with pytest.raises(attnlab.ApiError) as caught:
        getattr(api, method)(**body)
    err = caught.value
    assert (err.status, err.code, err.field, err.message, err.details) == tuple(
        want.json()["error"][k] for k in ("status", "code", "field", "message", "details")
    )
    assert err.field and err.field in err.message and err.message in str(err)


def test_client_names_the_limit_and_the_compare_side(api: attnlab.Client) -> None:
    with pytest.raises(attnlab.ApiError) as caught:
        api.attention("random", text=" ".join(["w"] * (MAX_TOKENS + 8)))
    assert (caught.value.status, caught.value.field) == (422, "text")
    assert f"limit {MAX_TOKENS}" in caught.value.message and "ATTNLAB_MAX_TOKENS" in caught.value.message
    with pytest.raises(attnlab.ApiError) as caught:
        api.compare({"model": "random", "text": "a b"}, {"model": "nope", "text": "a b"})
    assert (caught.value.code, caught.value.field) == ("unknown_model", "b.model")


def test_client_transport_errors_stay_httpx_errors() -> None:
    with attnlab.Client(f"http://127.0.0.1:{free_port()}", timeout=5) as nobody, pytest.raises(httpx.ConnectError):
        nobody.health()


def test_client_needs_only_numpy_and_httpx(base: str) -> None:
    """In a process where torch, the engine, the server, fastapi and pydantic cannot be imported."""
    script = f"""
import sys
for name in ("torch", "engine", "server", "fastapi", "pydantic", "orjson", "starlette"):
    sys.modules[name] = None
import numpy as np
import attnlab
with attnlab.Client({base!r}) as api:
    w = api.attention("textbook")["layers"][0]["heads"][0]["weights"]
    assert isinstance(w, np.ndarray) and w.shape == (5, 5), w
    try:
        api.attention("nope", text="a")
    except attnlab.ApiError as err:
        assert err.field == "model", err
    else:
        raise SystemExit("no ApiError")
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


# ---- attnlab.run -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ATTENTION))
def test_run_gives_the_apis_weights(api: attnlab.Client, name: str) -> None:
    body = dict(ATTENTION[name])
    local = attnlab.run(**body)
    remote = api.attention(**body)
    assert local["tokens"] == remote["tokens"] and local["masks"] == remote["masks"]
    assert np.array_equal(local["eligible"], remote["eligible"])
    assert len(local["layers"]) == len(remote["layers"])
    for mine, theirs in zip(heads_of(local), heads_of(remote), strict=True):
        for key in ("weights", "scores", "contexts", "q", "k", "v"):
            if key in theirs:
                assert mine[key].dtype == theirs[key].dtype and mine[key].shape == theirs[key].shape, key
                np.testing.assert_allclose(mine[key], theirs[key], rtol=0, atol=1e-6, err_msg=f"{name} {key}")
    # and everything else the same too: tokens, masks, reasons, config, shapes, stats
    assert same(local, remote, atol=1e-6) == []


def test_run_differs_when_the_request_does() -> None:
    """The negative control for the test above: other masks, other weights."""
    causal = attnlab.run(**RANDOM)["layers"][0]["heads"][0]["weights"]
    free = attnlab.run(**{**RANDOM, "masks": {}})["layers"][0]["heads"][0]["weights"]
    assert not np.allclose(causal, free, atol=1e-6)


def test_run_loads_each_model_once() -> None:
    attnlab.run("induction", text="red ball")
    model = loaded_models("induction")["induction"]
    attnlab.run("induction", text="red ball king")
    assert loaded_models("induction")["induction"] is model


@pytest.mark.parametrize(
    "body",
    [
        {"model": "induction", "text": "red ball", "layer": 5},
        {"model": "random", "text": "a", "masks": {"window": 0}},
        {"model": "random", "text": "a", "scale": "no"},
        {"model": "random", "text": "a b c", "masks": {"blocked": [[1, 0], [1, 1], [1, 2]]}},
    ],
    ids=["layer", "window", "strict-types", "all-masked"],
)
def test_run_raises_the_apis_error(base: str, body: dict[str, Any]) -> None:
    want = raw(base, "POST", "/api/attention", body).json()["error"]
    with pytest.raises(attnlab.ApiError) as caught:
        attnlab.run(**body)
    err = caught.value
    assert (err.status, err.code, err.field, err.message) == (
        want["status"],
        want["code"],
        want["field"],
        want["message"],
    )


def test_run_refuses_an_unknown_model_naming_the_known_ones() -> None:
    with pytest.raises(attnlab.ApiError) as caught:
        attnlab.run("nope", text="a")
    assert (caught.value.status, caught.value.code, caught.value.field) == (422, "unknown_model", "model")
    assert "random" in caught.value.message and "induction" in caught.value.message


def test_client_starts_follows_and_cancels_a_training_run(api: attnlab.Client) -> None:
    started = api.train("copy", layers=1, heads=2, width=16, positions=8, batch=2, steps=20_000, snapshot_every=10_000)
    assert started["status"] == "queued" and started["events"].endswith("/events")
    assert api.cancel_training(started["id"])["id"] == started["id"]
    assert started["id"] in {r["id"] for r in api.training_runs()}
    assert api.training_run(started["id"])["spec"]["task"] == "copy"
    # ended before the next test: the server trains one run at a time
    until(lambda: api.training_run(started["id"])["status"] == "cancelled", "the run cancelled")
    with pytest.raises(attnlab.ApiError) as refused:
        api.train("copy", heads=3, width=16)
    assert refused.value.field == "heads"
