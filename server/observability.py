"""Metrics in the Prometheus format and one JSON log line per request, each with a request id.

Every app has its own registry (tests build several apps in one process). GET /metrics exposes:
    attnlab_requests_total{method, route, status}   requests answered (method: one of METHODS, else "other")
    attnlab_request_seconds{route}                   latency histogram
    attnlab_errors_total{route, status}              answers of 4xx and 5xx
    attnlab_queue_depth                              computations waiting for a compute slot
    attnlab_busy_slots                               compute slots in use
    attnlab_abandoned_total{stage}                   computations whose client went away (waiting, running,
                                                     streaming: after a streamed answer's first frame)
    attnlab_write_timeouts_total                     connections cut off because their client read nothing of
                                                     the answer for ATTNLAB_WRITE_TIMEOUT_S (server/transport.py)
    attnlab_run_cache_total{result}                  forward passes found in the run cache (hit) or not (miss)
    attnlab_run_cache_bytes                          bytes the run cache holds
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
access_log = logging.getLogger("attnlab.access")
SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# The methods a label may name: any other (a client may send any token) counts as "other", so that invented methods
# cannot grow the number of series, and with it each scrape's size and time, without bound.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "attnlab_requests", "Requests answered", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "attnlab_request_seconds",
            "Time to answer a request",
            ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.errors = Counter("attnlab_errors", "Answers of 4xx and 5xx", ["route", "status"], registry=self.registry)
        self.queue_depth = Gauge("attnlab_queue_depth", "Computations waiting for a slot", registry=self.registry)
        self.busy_slots = Gauge("attnlab_busy_slots", "Compute slots in use", registry=self.registry)
        self.cache = Counter(
            "attnlab_run_cache", "Forward passes looked up in the run cache", ["result"], registry=self.registry
        )
        self.cache_bytes = Gauge("attnlab_run_cache_bytes", "Bytes the run cache holds", registry=self.registry)
        self.abandoned = Counter(
            "attnlab_abandoned",
            "Computations whose client went away: withdrawn while waiting, stopped while running or while streaming",
            ["stage"],
            registry=self.registry,
        )
        self.write_timeouts = Counter(
            "attnlab_write_timeouts",
            "Connections cut off because their client read nothing of the answer for ATTNLAB_WRITE_TIMEOUT_S",
            registry=self.registry,
        )


class Observe:
    """Give each request an id (the client's X-Request-ID when it is a plain token), count and time it, and log
    one JSON line for it. The id goes back in the X-Request-ID header and into every log line of the request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = given if SAFE_ID.match(given) else uuid.uuid4().hex[:16]
        token = request_id.set(rid)
        status = 500
        start = time.perf_counter()

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            seconds = time.perf_counter() - start
            found = scope.get("route")
            route = getattr(found, "path", None) or ("static" if scope["path"].startswith("/static/") else "unmatched")
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(route).observe(seconds)
            if status >= 400:
                self.metrics.errors.labels(route, str(status)).inc()
            access_log.info(
                "%s %s %d",
                scope["method"],
                scope["path"],
                status,
                extra={
                    "http": {
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "ms": round(seconds * 1000, 2),
                    }
                },
            )
            request_id.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, and any `http` fields."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": request_id.get(),
        }
        http = getattr(record, "http", None)
        if http:
            line["http"] = http
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def json_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
