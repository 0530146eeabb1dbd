"""Metrics in the Prometheus format, request ids, and one JSON log line per request."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

from fastapi.testclient import TestClient

from server.observability import JsonFormatter
from tests.helpers import occupy

MakeClient = Callable[..., AbstractContextManager[TestClient]]


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text, 0 when absent."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m and ",".join(sorted((m.group(1) or "").split(","))) == want:
            return float(m.group(2))
    return 0.0


def test_metrics_count_requests_errors_and_latency(client: TestClient) -> None:
    for _ in range(3):
        assert client.post("/api/attention", json={"model": "textbook"}).status_code == 200
    assert client.post("/api/attention", json={"model": "nope", "text": "a"}).status_code == 422
    text = client.get("/metrics").text
    ok = {"method": "POST", "route": "/api/attention", "status": "200"}
    assert sample(text, "attnlab_requests_total", **ok) == 3
    assert sample(text, "attnlab_requests_total", method="POST", route="/api/attention", status="422") == 1
    assert sample(text, "attnlab_errors_total", route="/api/attention", status="422") == 1
    assert sample(text, "attnlab_request_seconds_count", route="/api/attention") == 4
    assert sample(text, "attnlab_queue_depth") == 0 and sample(text, "attnlab_busy_slots") == 0


def test_busy_slots_and_queue_depth_are_reported(make_client: MakeClient) -> None:
    with make_client(max_concurrent=2) as c:
        with occupy(c.app.state.pool):  # type: ignore[attr-defined]
            assert sample(c.get("/metrics").text, "attnlab_busy_slots") == 1
        assert sample(c.get("/metrics").text, "attnlab_busy_slots") == 0


def test_each_response_carries_a_request_id(client: TestClient) -> None:
    given = client.get("/api/health", headers={"x-request-id": "class-7.run_2"})
    assert given.headers["x-request-id"] == "class-7.run_2"
    made = client.get("/api/health", headers={"x-request-id": "<script>"})  # not a plain token: a fresh one
    assert re.fullmatch(r"[0-9a-f]{16}", made.headers["x-request-id"])
    assert client.get("/api/health").headers["x-request-id"] != made.headers["x-request-id"]


def test_one_json_log_line_per_request_with_its_id(client: TestClient) -> None:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Collect()
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("attnlab.access")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        resp = client.post("/api/attention", json={"model": "textbook"}, headers={"x-request-id": "abc123"})
    finally:
        log.removeHandler(handler)
    (line,) = [json.loads(x) for x in lines]
    assert line["request_id"] == "abc123" == resp.headers["x-request-id"]
    assert line["http"]["status"] == 200 and line["http"]["path"] == "/api/attention" and line["http"]["ms"] > 0
    assert line["level"] == "INFO" and line["logger"] == "attnlab.access"
