"""The streamed arrays form of /api/attention (Accept: application/vnd.attnlab.arrays-stream), on a real server: the
layer asked first comes first, made from the forward's first part; the frames make the arrays form's answer value for
value; one forward in all; errors before the first frame are plain errors, after it an error frame; a client that
goes away frees its compute slot."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.helpers import assert_error, serve
from wire.arrays import MEDIA_TYPE, STREAM_MEDIA_TYPE, StreamError, assemble, read_arrays, read_frames

SENTENCE = "the animal did not cross the street because it was too tired"
STREAM = {"accept": STREAM_MEDIA_TYPE}


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serve("textbook,random,minilm,induction", ATTNLAB_MAX_TOKENS="512") as url:
        yield url


def metric(base: str, name: str, label: str = "") -> float:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name + label)} ([0-9.e+-]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def forwards(base: str) -> float:
    return metric(base, "attnlab_run_cache_total", '{result="miss"}')


def streamed(base: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    with httpx.stream("POST", f"{base}/api/attention", json=body, headers=STREAM, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()[:300]
        assert resp.headers["content-type"].startswith(STREAM_MEDIA_TYPE)
        assert "content-length" not in resp.headers
        return list(read_frames(resp.iter_raw(4093)))  # chunks that cut frames anywhere


def whole(base: str, body: dict[str, Any]) -> Any:
    plain = {k: v for k, v in body.items() if k != "first_layer"}
    resp = httpx.post(f"{base}/api/attention", json=plain, headers={"accept": MEDIA_TYPE}, timeout=120)
    assert resp.status_code == 200, resp.text[:300]
    return read_arrays(resp.content)


MEASURED = {"peak_bytes", "tokens_per_s", "ms"}  # the audit's measurements: each run measures its own


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two answers differ (NumPy arrays by dtype, shape and value; the audit's measurements left out)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        ok = isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
        return [] if ok and np.array_equal(a, b, equal_nan=True) else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        skip = MEASURED if path.endswith("audit") else set()
        return [d for k in a if k not in skip for d in differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}.{i}")]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


INCLUDE = ["scores", "weights", "stats", "output"]
# each case its own input: each streams after a run cache miss, so its one forward is counted
CASES = {
    "minilm, layer 0 first": {"model": "minilm", "text": SENTENCE, "include": INCLUDE},
    "minilm, layer 3 first": {"model": "minilm", "text": SENTENCE + " too", "first_layer": 3, "precision": "float16"},
    "minilm, the last layer first, sinks": {
        "model": "minilm", "text": SENTENCE + " now", "first_layer": 5, "sinks": {"hide": "special"},
    },
    "induction, rollout and final": {
        "model": "induction", "text": "red ball king river frog red ball king", "first_layer": 1,
        "include": ["weights", "rollout", "final", "stats"],
    },
    "induction, dtype and audit": {
        "model": "induction", "text": "red ball king river", "dtype": "float64", "include": ["weights", "audit"],
    },
    "minilm, one layer": {"model": "minilm", "text": SENTENCE + " then", "layer": 2, "masks": {"window": 3}},
    "random, a batch": {"model": "random", "texts": ["a b c", "d e"], "include": ["weights", "stats"]},
    "random, a source": {
        "model": "random", "text": "a b c", "source": {"text": "x y z w", "padding": [True, True, True, False]},
    },
    "textbook": {"model": "textbook", "include": ["scores", "weights", "contexts", "qkv", "stats", "output"]},
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_the_frames_make_the_arrays_forms_answer(base: str, name: str) -> None:
    body = CASES[name]
    before = forwards(base)
    frames = streamed(base, body)
    ran = forwards(base) - before
    answer = whole(base, body)  # the run cache holds the streamed run's whole pass: no second forward
    assert forwards(base) - before == ran == (2 if "dtype" in body else 1)  # a dtype's float32 pass is one more
    kinds = [k for k, _ in frames]
    n = answer["config"]["n_layers"]
    first = body.get("layer", body.get("first_layer", 0))
    rest = [i for i in range(n) if i != first] if "layer" not in body else []
    assert kinds == ["head", *["layer"] * len(rest), "tail"]
    head = frames[0][1]
    assert [layer["index"] for layer in head["layers"]] == [first]
    assert [b["index"] for k, b in frames if k == "layer"] == rest
    assert differences(assemble(frames), answer) == []


def test_the_first_layer_goes_out_before_the_rest_is_computed(base: str) -> None:
    """The head is made from the forward's first part: its config says how many layers were computed when it was
    written; the tail gives the whole pass's."""
    frames = streamed(base, {"model": "minilm", "text": "a text no other test sends", "first_layer": 2})
    assert frames[0][1]["config"]["layers_computed"] == 3
    assert frames[-1][0] == "tail" and frames[-1][1]["config"]["layers_computed"] == 6
    # rollout reads every layer up to the last one: that pass runs whole before the head goes out
    body = {"model": "minilm", "text": "another text no other test sends", "first_layer": 2, "include": ["rollout"]}
    frames = streamed(base, body)
    assert frames[0][1]["config"]["layers_computed"] == 6


@pytest.mark.parametrize(
    ("body", "headers", "field", "words"),
    [
        ({"model": "minilm", "text": "a", "first_layer": 1}, {"accept": MEDIA_TYPE}, "first_layer", ["streamed"]),
        ({"model": "minilm", "text": "a", "first_layer": 1}, {}, "first_layer", ["Accept"]),
        ({"model": "minilm", "text": "a", "first_layer": 1, "layer": 2}, STREAM, "first_layer", ["leave out"]),
        ({"model": "minilm", "text": "a", "first_layer": 6}, STREAM, "first_layer", ["0..5"]),
        ({"model": "minilm", "text": "a", "first_layer": -1}, STREAM, "first_layer", []),
        ({"model": "minilm", "text": "a", "first_layer": True}, STREAM, "first_layer", []),
        ({"model": "nope", "text": "a"}, STREAM, "model", ["unknown"]),
        ({"model": "minilm", "text": "a", "layer": 9}, STREAM, "layer", ["0..5"]),
    ],
)
def test_what_fails_before_the_first_frame_is_a_plain_error(
    base: str, body: dict[str, Any], headers: dict[str, str], field: str, words: list[str]
) -> None:
    resp = httpx.post(f"{base}/api/attention", json=body, headers=headers, timeout=60)
    assert resp.headers["content-type"].startswith("application/json")
    assert_error(resp, 422, field, *words)


@pytest.mark.parametrize("path", ["/api/heads", "/api/perturb"])
def test_first_layer_is_refused_where_nothing_is_streamed(base: str, path: str) -> None:
    body = {"model": "induction", "text": "red ball king", "first_layer": 1}
    if path == "/api/perturb":
        body |= {"position": 1, "change": {"kind": "shift", "amount": 1.0}}
    assert_error(httpx.post(f"{base}{path}", json=body, headers=STREAM, timeout=60), 422, "first_layer")


def test_a_client_that_asks_for_both_forms_gets_the_stream_where_there_is_one(base: str) -> None:
    both = {"accept": f"{STREAM_MEDIA_TYPE}, {MEDIA_TYPE};q=0.9"}
    resp = httpx.post(f"{base}/api/attention", json={"model": "textbook"}, headers=both, timeout=60)
    assert resp.headers["content-type"].startswith(STREAM_MEDIA_TYPE)
    pair = {"a": {"model": "textbook"}, "b": {"model": "textbook", "scale": False}}
    resp = httpx.post(f"{base}/api/compare", json=pair, headers=both, timeout=60)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith(MEDIA_TYPE + "")
    assert not resp.headers["content-type"].startswith(STREAM_MEDIA_TYPE)
    resp = httpx.post(f"{base}/api/compare", json=pair, headers=STREAM, timeout=60)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")


def test_a_client_that_leaves_after_the_first_frame_frees_its_slot(base: str) -> None:
    words = " ".join(["the", "cat", "sat", "on", "a", "mat"] * 85)  # 512 minilm tokens
    body = orjson.dumps({"model": "minilm", "text": words, "precision": "float16"})
    port = int(base.rsplit(":", 1)[1])
    left = metric(base, "attnlab_abandoned_total", '{stage="streaming"}')
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        head = "POST /api/attention HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        head += f"Accept: {STREAM_MEDIA_TYPE}\r\n"
        s.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    deadline = time.monotonic() + 60
    while metric(base, "attnlab_busy_slots") != 0:
        assert time.monotonic() < deadline, "the slot of a stream nobody reads was never freed"
        time.sleep(0.05)
    assert metric(base, "attnlab_abandoned_total", '{stage="streaming"}') == left + 1
    resp = httpx.post(f"{base}/api/attention", json={"model": "textbook"}, headers=STREAM, timeout=60)
    assert [k for k, _ in read_frames([resp.content])][-1] == "tail"
    assert metric(base, "attnlab_abandoned_total", '{stage="streaming"}') == left + 1  # one read to its end is not


def test_the_reader_says_when_a_stream_is_cut_short() -> None:
    from wire.arrays import write_frame

    parts = [
        b"".join(bytes(p) for p in write_frame(k, b))
        for k, b in [("head", {"layers": [{"index": 0}]}), ("layer", {"index": 1})]
    ]
    frames = list(read_frames([parts[0], parts[1][:7], parts[1][7:]]))
    assert [k for k, _ in frames] == ["head", "layer"]
    with pytest.raises(ValueError, match="before its tail"):
        assemble(frames)
    with pytest.raises(ValueError, match="inside a frame"):
        list(read_frames([parts[0], parts[1][:-1]]))
    error = b"".join(bytes(p) for p in write_frame("error", {"status": 500, "code": "x", "message": "it broke"}))
    with pytest.raises(StreamError, match="it broke"):
        assemble(read_frames([parts[0], error]))
    with pytest.raises(ValueError, match="one of"):
        write_frame("other", {})
