"""Hostile requests at the server's edge (before any model runs): each is a 4xx in the one error shape that names
what was wrong, with the security headers every response carries; plus the edge's own promises: bounded metrics,
/metrics rendered off the event loop, HEAD on every GET route, a run whose client left stays "failed"."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from prometheus_client import Metric

from server.scheduling import MAX_DEPTH
from tests.helpers import assert_error, raw_post, until, uvicorn_here

MakeClient = Callable[..., AbstractContextManager[TestClient]]
JSON = {"content-type": "application/json"}
R = b'{"model": "random", "text": "a b"}'


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


def wide_heads(widths: list[int]) -> bytes:
    """Custom weights of two heads, split by `widths`."""
    w = [[1.0, 0.0], [0.0, 1.0]]
    body = {"x": w, "weights": {"w_q": w, "w_k": w, "w_v": w}, "heads": 2, "head_widths": widths}
    return json.dumps(body).encode()


# (name, method, path, headers, body, status, field, words in the message)
HOSTILE: list[tuple[str, str, str, dict[str, str], bytes, int, str | None, list[str]]] = [
    ("array 1000 deep", "POST", "/api/attention", JSON, nested(1000).encode(), 422, "body", ["1000", str(MAX_DEPTH)]),
    (
        "object 5000 deep",
        "POST",
        "/api/attention",
        JSON,
        ('{"a":' * 5000 + "1" + "}" * 5000).encode(),
        422,
        "body",
        ["5000", str(MAX_DEPTH)],
    ),
    (
        "a field 1000 deep",
        "POST",
        "/api/attention",
        JSON,
        f'{{"model": "random", "text": {nested(1000)}}}'.encode(),
        422,
        "body",
        ["1001", str(MAX_DEPTH)],
    ),
    (
        "one past the depth limit",
        "POST",
        "/api/compare",
        JSON,
        nested(MAX_DEPTH + 1).encode(),
        422,
        "body",
        [str(MAX_DEPTH + 1), str(MAX_DEPTH)],
    ),
    ("static name with NUL", "GET", "/static/js/main%00.js", {}, b"", 404, "path", ["no such file"]),
    ("static name 5000 long", "GET", "/static/" + "a" * 5000, {}, b"", 404, "path", ["5000 characters"]),
    ("static name NUL only", "GET", "/static/%00", {}, b"", 404, "path", ["no such file"]),
    ("static outside its folder", "GET", "/static/..%2f..%2fpyproject.toml", {}, b"", 404, "path", ["no such file"]),
    ("docs asset with NUL", "GET", "/vendor/docs/favicon.png%00", {}, b"", 404, "path", ["no such file"]),
    ("docs asset 5000 long", "GET", "/vendor/docs/" + "a" * 5000, {}, b"", 404, "path", ["5000 characters"]),
    ("POST with no content-type", "POST", "/api/attention", {}, R, 415, "content-type", ["application/json"]),
    (
        "POST as a form",
        "POST",
        "/api/attention",
        {"content-type": "application/x-www-form-urlencoded"},
        b"model=random&text=a",
        415,
        "content-type",
        ["application/json"],
    ),
    (
        "POST from another site",
        "POST",
        "/api/attention",
        {**JSON, "sec-fetch-site": "cross-site"},
        R,
        403,
        "sec-fetch-site",
        ["cross-site"],
    ),
    *(
        (
            f"GET of a {what} from another site",
            "GET",
            path,
            {"sec-fetch-site": "cross-site"},
            b"",
            403,
            "sec-fetch-site",
            ["cross-site"],
        )
        for what, path in (("tile", "/api/runs/a-kept-run/tiles/0/0/0/0/0"), ("row", "/api/runs/a-kept-run/rows/0/0/0"))
    ),
    ("bad Host", "GET", "/api/health", {"host": "evil.example"}, b"", 400, "host", ["ATTNLAB_ALLOWED_HOSTS"]),
    ("body too large", "POST", "/api/attention", JSON, b" " * 70_000, 413, "body", ["65536"]),
    *(
        (
            f"head width {w} past 64 bits",
            "POST",
            "/api/attention",
            JSON,
            wide_heads(w),
            422,
            f"head_widths[{i}]",
            [str(lim)],
        )
        for i, w, lim in [(0, [2**64, 1], 2**63 - 1), (1, [1, -(2**63) - 1], -(2**63))]
    ),
    (
        "export layer past 64 bits",
        "POST",
        "/api/export",
        JSON,
        b'{"model": "random", "layer": 18446744073709551616}',
        422,
        "layer",
        [str(2**63 - 1)],
    ),
    ("run name with ;x", "GET", "/api/runs/abcdefgh;x/rows/0/0/0", {}, b"", 422, "run", ["8,64"]),
    ("run name 200 long", "GET", "/api/runs/" + "a" * 200 + "/tiles/0/0/0/0/0", {}, b"", 422, "run", ["8,64"]),
    ("progress name with ;x", "GET", "/api/progress/abcdefgh;x", {}, b"", 422, "run", ["8,64"]),
    ("tile layer past 64 bits", "GET", f"/api/runs/abcdefgh/tiles/{2**64}/0/0/0/0", {}, b"", 422, "layer", []),
    # `final` runs every layer, whichever one the answer shows: the layer shown is still one of the model's
    (
        "layer past the last with final",
        "POST",
        "/api/attention",
        JSON,
        b'{"model": "textbook", "layer": 5, "include": ["final"]}',
        422,
        "layer",
        ["got layer 5", "0..0"],
    ),
    # the training lab: a run's id is hex, a body's integers 64-bit, and a run is read from its own id only
    ("train run id with ;x", "GET", "/api/train/abc;x", {}, b"", 422, "run_id", []),
    ("train run id with ../", "GET", "/api/train/..%2F..%2Fetc/export", {}, b"", 404, None, ["no such path"]),
    (
        "train steps past 64 bits",
        "POST",
        "/api/train",
        JSON,
        b'{"task": "copy", "steps": 18446744073709551616}',
        422,
        "steps",
        [str(2**63 - 1)],
    ),
    ("train body field unknown", "POST", "/api/train", JSON, b'{"task": "copy", "rm": "-rf"}', 422, "rm", []),
    ("train lr a string", "POST", "/api/train", JSON, b'{"task": "copy", "lr": "1e-3"}', 422, "lr", []),
    ("train export step negative", "GET", "/api/train/0123456789ab/export?step=-1", {}, b"", 422, "step", []),
    (
        "train cancel from another site",
        "POST",
        "/api/train/0123456789ab/cancel",
        {**JSON, "sec-fetch-site": "cross-site"},
        b"{}",
        403,
        "sec-fetch-site",
        [],
    ),
    ("train rename to nothing", "PATCH", "/api/train/0123456789ab", JSON, b'{"name": ""}', 422, "name", []),
    ("train check runs with ;x", "GET", "/api/train/experiments/no-causal/check?runs=ab;x", {}, b"", 422, "runs", []),
    ("train check of no experiment", "GET", "/api/train/experiments/%3Cb%3E/check?runs=ab", {}, b"", 404, "id", []),
    ("train model step negative", "GET", "/api/train/0123456789ab/model?step=-1", {}, b"", 422, "step", []),
]
SECURITY_HEADERS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


@pytest.mark.parametrize(
    ("name", "method", "path", "headers", "body", "status", "field", "words"), HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_hostile_request_gets_a_named_4xx_with_security_headers(
    shared_client: Callable[..., TestClient],
    name: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
    field: str | None,
    words: list[str],
) -> None:
    resp = shared_client(max_body_bytes=65536).request(method, path, content=body or None, headers=headers)
    assert_error(resp, status, field, *words)
    for header, value in SECURITY_HEADERS.items():
        assert resp.headers.get(header) == value, (header, dict(resp.headers))
    assert "default-src 'self'" in resp.headers.get("content-security-policy", ""), dict(resp.headers)
    assert len(resp.content) < 2000, "an error does not echo a hostile input back whole"


def test_brackets_inside_strings_are_not_nesting(client: TestClient) -> None:
    text = "a " + "[{" * 3000
    resp = client.post("/api/attention", content=json.dumps({"model": "random", "text": text}), headers=JSON)
    assert resp.status_code == 200, resp.text[:300]
    escaped = '{"model": "random", "text": "a \\"' + "[" * 3000 + '"}'  # an escaped quote does not end the string
    assert client.post("/api/attention", content=escaped, headers=JSON).status_code == 200


@pytest.mark.parametrize("site", ["same-origin", "none", "same-site"])
def test_posts_from_the_page_itself_or_a_script_are_computed(client: TestClient, site: str) -> None:
    resp = client.post("/api/attention", json={"model": "textbook"}, headers={"sec-fetch-site": site})
    assert resp.status_code == 200, resp.text[:300]


def test_invented_methods_leave_the_metrics_series_bounded(client: TestClient) -> None:
    for i in range(300):
        assert client.request(f"X-INVENTED-{i}", "/api/health").status_code == 405
    text = client.get("/metrics").text
    series = [line for line in text.splitlines() if line.startswith("attnlab_requests_total{")]
    methods = {line.split('method="')[1].split('"')[0] for line in series}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"}, methods
    assert len(series) < 10, series
    other = [line for line in series if 'method="other"' in line]
    assert other and float(other[0].rsplit(" ", 1)[1]) == 300, other


class Held:
    """A collector that holds the /metrics scrape until released, to see whether the event loop is free meanwhile."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        self.entered.set()
        self.release.wait(60)
        return iter([])


def test_metrics_are_rendered_off_the_event_loop() -> None:
    with uvicorn_here("textbook") as (base, app):
        held = Held()
        app.state.metrics.registry.register(held)
        scraped: dict[str, int] = {}

        def scrape() -> None:
            scraped["status"] = httpx.get(f"{base}/metrics", timeout=60).status_code

        scraper = threading.Thread(target=scrape)
        scraper.start()
        try:
            assert held.entered.wait(30), "the scrape never reached the registry"
            # while the scrape is held, the event loop still answers
            assert httpx.get(f"{base}/api/health", timeout=10).status_code == 200
        finally:
            held.release.set()
            scraper.join(30)
        assert scraped == {"status": 200}


# a concrete path for each GET route that has parameters
GET_SAMPLES = {
    "/static/{name:path}": "/static/js/main.js",
    "/vendor/docs/{name}": "/vendor/docs/favicon.png",
    "/api/progress/{run}": "/api/progress/never-named-run",
    "/api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}": "/api/runs/never-made-run/tiles/0/0/0/0/0",
    "/api/runs/{run}/rows/{layer}/{head}/{query}": "/api/runs/never-made-run/rows/0/0/0",
    "/guide/{name:path}": "/guide/index.html",
    "/api/train/{run_id}": "/api/train/0123456789ab",
    "/api/train/{run_id}/events": "/api/train/0123456789ab/events",
    "/api/train/{run_id}/export": "/api/train/0123456789ab/export",
    "/api/train/experiments/{experiment_id}/check": "/api/train/experiments/no-causal/check?runs=ab,cd",
    "/api/train/{run_id}/model": "/api/train/0123456789ab/model?step=0",
    "/api/samples/{name}": "/api/samples/digit-3",
}


def routes(found: list[Any]) -> Iterator[Any]:
    """Every route of the app, the included routers' ones too (their paths already carry their prefixes)."""
    for r in found:
        inner = getattr(r, "original_router", None)
        yield from routes(inner.routes) if inner is not None else [r]


def get_paths(app: Any) -> list[str]:
    paths = [r.path for r in routes(app.routes) if isinstance(r, APIRoute) and "GET" in (r.methods or ())]
    return [GET_SAMPLES.get(p, p) for p in paths] + ["/openapi.json", "/static/js/nope.js"]


def test_every_get_route_answers_head_with_the_same_headers_and_no_body(client: TestClient) -> None:
    paths = get_paths(client.app)
    assert {"/", "/api/health", "/metrics", "/docs", "/redoc", "/vendor/plotly.min.js"} <= set(paths), paths
    assert not [p for p in paths if "{" in p], "a GET route with parameters needs a sample in GET_SAMPLES"
    for path in paths:
        got = client.get(path)
        head = client.head(path)
        assert head.status_code == got.status_code, (path, head.status_code, got.status_code)
        assert head.content == b"", path
        same = ("content-type", "content-length", "cache-control", "etag", "content-security-policy")
        for name in same:
            if name == "content-length" and path == "/metrics":  # the scrape counts itself: a few bytes more
                continue
            assert head.headers.get(name) == got.headers.get(name), (path, name)


WORDS = " ".join(["the", "cat", "sat", "on", "a", "mat"] * 50)  # 302 minilm tokens: a pass of a second or so


def test_a_run_whose_client_left_stays_failed() -> None:
    with uvicorn_here("textbook,minilm", max_concurrent=1, cache_bytes=0) as (base, app):
        run = "left-early-0001"
        registry = app.state.metrics.registry
        body = json.dumps({"model": "minilm", "text": WORDS, "include": ["weights"]}).encode()

        def progress() -> dict[str, Any]:
            resp = httpx.get(f"{base}/api/progress/{run}", timeout=10)
            return resp.json() if resp.status_code == 200 else {}

        with raw_post(int(base.rsplit(":", 1)[1]), body, {"X-Attnlab-Run": run}):
            until(lambda: progress().get("stage") == "layers" and progress()["done"] >= 1, "the run is mid-pass")
        # the client is gone mid-pass: the run stops at its next layer, and its thread frees its slot
        until(lambda: registry.get_sample_value("attnlab_abandoned_total", {"stage": "running"}) == 1, "abandoned")
        until(lambda: registry.get_sample_value("attnlab_busy_slots") == 0, "the compute thread is done")
        got = progress()
        assert got["stage"] == "failed", got
        # and a later run of the same name starts afresh
        with httpx.Client(base_url=base, timeout=60) as c:
            again = c.post("/api/attention", json={"model": "textbook"}, headers={"x-attnlab-run": run})
            assert again.status_code == 200
        assert progress()["stage"] == "done"


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_the_docs_bundles_name_no_other_server(client: TestClient, encoding: str) -> None:
    bundle = client.get("/vendor/docs/redoc.standalone.js", headers={"accept-encoding": encoding})
    assert bundle.status_code == 200 and b"redoc" in bundle.content
    assert b"cdn.redoc.ly" not in bundle.content  # its logo, rewritten to data:, as it is served
    for page in ("/docs", "/redoc"):
        resp = client.get(page)
        scripts = resp.headers["content-security-policy"].split("script-src")[1].split(";")[0].strip()
        assert scripts == "'self'" and "<script>" not in resp.text, (page, scripts)


def _unbounded(node: Any, where: str, schemas: dict[str, Any], seen: set[str]) -> Iterator[str]:
    """Where an integer in this schema (its references followed) has no minimum or no maximum, or a string's
    pattern is not anchored at both ends (a path's pattern is searched for, so an unanchored one lets ';x' by)."""
    if isinstance(node, list):
        for item in node:
            yield from _unbounded(item, where, schemas, seen)
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        if name not in seen:
            seen.add(name)
            yield from _unbounded(schemas[name], name, schemas, seen)
        return
    if node.get("type") == "integer" and ("minimum" not in node or "maximum" not in node):
        yield f"{where}: {node}"
    pattern = node.get("pattern")
    if isinstance(pattern, str) and not (pattern.startswith("^") and pattern.endswith("$")):
        yield f"{where}: pattern {pattern!r}"
    for key, value in node.items():
        yield from _unbounded(value, f"{where}.{key}", schemas, seen)


def test_every_integer_a_request_carries_is_bounded(client: TestClient) -> None:
    """Every integer a body, path or query can carry has both bounds in the schema, so a number past 64 bits is a
    422 naming its field, never a 500 from orjson, torch or NumPy further in; and every path's pattern is anchored."""
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    found = [
        gap
        for path, operations in doc["paths"].items()
        for method, op in operations.items()
        for gap in _unbounded(
            [*(p.get("schema") for p in op.get("parameters", [])), op.get("requestBody")],
            f"{method} {path}",
            schemas,
            set(),
        )
    ]
    assert found == []


def _exchange(port: int, request: bytes) -> tuple[int, bytes, bytes]:
    """Send `request` on a socket of its own, read to the close: (status, head, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), head.lower(), body


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_request_head_past_its_bounds_is_a_431_and_never_read_whole() -> None:
    """A head is bounded in bytes and lines (a 1 GB block of headers was read whole, answered 200, and kept +987
    MB): past either, a 431 in the one error shape with the security headers, and the connection closed with the
    rest of the block unread."""
    with uvicorn_here("textbook", read_timeout_s=120) as (base, _):
        port = int(base.rsplit(":", 1)[1])
        start = b"GET /api/health HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        many = b"".join(b"x-pad-%d: 1\r\n" % i for i in range(150))
        wide = b"x-pad: " + b"a" * 70_000 + b"\r\n"
        for block, words in [(many, ["152 lines", "limit 100", "ATTNLAB_MAX_HEAD_LINES"]), (wide, ["65,536"])]:
            status, head, body = _exchange(port, start + block + b"\r\n")
            assert status == 431, (head, body)
            error = json.loads(body)["error"]
            assert error["field"] == "headers" and all(w in error["message"] for w in words), error
            assert b"x-content-type-options: nosniff" in head and b"default-src 'self'" in head, head
        line = b"x-pad: " + b"a" * 1000 + b"\r\n"
        chunk, chunks = line * 64, 1024  # 64 MB of headers, never ended
        before, sent = _rss(), 0
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            try:
                s.sendall(start)
                for _ in range(chunks):
                    s.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed by the server: what is asked
            grown = _rss() - before
        assert sent < chunks * len(chunk) // 2, f"{sent:,} bytes of headers were read"
        assert grown < chunks * len(chunk) // 4, f"the server grew by {grown:,} bytes"
        assert httpx.get(f"{base}/api/health").status_code == 200
        ok = _exchange(port, start + b"".join(b"x-pad-%d: 1\r\n" % i for i in range(90)) + b"connection: close\r\n\r\n")
        assert ok[0] == 200, ok
