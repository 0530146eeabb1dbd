"""A Python client for the attnlab REST API: one method per endpoint, NumPy arrays out, one exception type.

Needs only httpx and NumPy (not torch, not the server). The analyses' methods come from the server: GET
/api/analyses names each analysis's path, client method and answer forms (read once per client), so
`api.perturb(...)`, `api.scale_sweep(...)` or the method of an analysis added later is `api.call(name, ...)`.
Matrices come as NumPy arrays: an analysis that answers in the arrays form (/api/attention, /api/intervene,
/api/compare) is asked for it (`Accept: application/vnd.attnlab.arrays`); the others return their JSON as dicts.
An error answer raises attnlab.ApiError; a transport failure (no server, a timeout) stays an httpx.TransportError.
An `image` given as a local file (a pathlib.Path) or as bytes, at the top of the body or in a nested one
(`clean={"image": Path("a.png")}`), is sent as a file part of a multipart/form-data request; as a str it is base64.

    with attnlab.Client("http://127.0.0.1:8000") as api:
        r = api.attention("random", text="the cat sat", masks={"causal": True})
        r["layers"][0]["heads"][0]["weights"]  # (S, S) float32
        api.scale_sweep(widths=[1, 4, 16])       # POST /api/scale-sweep, as GET /api/analyses declares it
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from attnlab.arrays import MEDIA_TYPE, attention_arrays, jsonable, read_arrays
from attnlab.errors import ApiError

ARRAYS_ACCEPT = f"{MEDIA_TYPE}, application/json;q=0.5"


class Client:
    """attnlab's REST API at `url`. Keyword arguments are the request body's fields, named as in the API
    (text, tokens, x, masks, options, layer, include, position, change, ablate, edit, ...)."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        timeout: float | httpx.Timeout | None = 60.0,
        *,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers, transport=transport)
        self._analyses: dict[str, dict[str, Any]] | None = None  # GET /api/analyses by client name, once read

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"attnlab.Client({self.url!r})"

    # ---- endpoints -----------------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """GET /api/health: status, version, device, dtype, models."""
        return self._call("GET", "/api/health")

    def models(self) -> dict[str, Any]:
        """GET /api/models: `models` (name, family, n_layers, n_heads, widths, vocab_size, max_positions, a
        checkpoint's `reference` match to transformers and `card`, default text and masks...) and `unavailable`
        ({name, reason}: a checkpoint that did not load says why)."""
        return self._call("GET", "/api/models")

    def attention(self, model: str | None = None, *, run: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/attention. `tokens`, `eligible` (S x S bool), `reasons`, `layers[i]["heads"][h]["weights"]` and
        `["scores"]` (S x S arrays; a batch adds a leading axis), stats, config, shapes, timings. `run` names the run
        (8 to 64 letters, digits, - or _) so that another thread can follow it with `progress(run)`."""
        headers = {"x-attnlab-run": run} if run is not None else None
        return self._call("POST", "/api/attention", _body(model, fields), arrays=True, headers=headers)

    def progress(self, run: str, *, wait_ms: int = 0) -> dict[str, Any]:
        """GET /api/progress/{run}: where a named run is: `stage` (queued, layers, writing, done, failed), `ahead`
        (while queued: how many requests wait before it), `done` of `total` layers, `elapsed_ms`. `wait_ms` (up to
        10000): how long the server waits for a run it has not received yet before the 404 (asked from another
        thread just after the run was sent, the ask can arrive first)."""
        query = f"?wait_ms={wait_ms}" if wait_ms else ""
        return self._call("GET", f"/api/progress/{run}{query}")

    def runs(self, model: str | None = None, *, run: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/runs: a long run (up to the server's ATTNLAB_MAX_RUN_TOKENS) kept under the name `run` (8 to 64
        letters, digits, - or _; the server picks one without it); `run`, `tokens`, `config` (seq_len, levels,
        block...) and per layer and head `summary` {`max`, `mean`: arrays of block maxima and means}, `sink_mass`.
        Ask for its parts with tile() and row()."""
        headers = {"x-attnlab-run": run} if run is not None else None
        return self._call("POST", "/api/runs", _body(model, fields), arrays=True, headers=headers)

    def tile(self, run: str, layer: int, head: int, z: int, x: int, y: int, agg: str = "max") -> dict[str, Any]:
        """GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}: `weights` (an array of up to 256 x 256 cells, exact
        weights at the deepest level, block maxima or means above), `q0`, `k0`, `cell`. A run the server no longer
        holds raises ApiError with code run_expired: post it again with runs()."""
        return self._call("GET", f"/api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}?agg={agg}", arrays=True)

    def row(self, run: str, layer: int, head: int, query: int) -> dict[str, Any]:
        """GET /api/runs/{run}/rows/{layer}/{head}/{query}: that query's exact `weights` over every key (an array)
        and `top`, its largest keys with their tokens."""
        return self._call("GET", f"/api/runs/{run}/rows/{layer}/{head}/{query}", arrays=True)

    def compare(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """POST /api/compare: two /api/attention bodies; `a` and `b` results and per layer and head `diff` (B - A
        weights, an array) and `max_abs`."""
        result: dict[str, Any] = self.call("compare", a=jsonable(a), b=jsonable(b))
        return result

    def export(self, model: str | None = None, *, path: str | os.PathLike[str] | None = None, **fields: Any) -> str:
        """POST /api/export: the /api/attention body plus `view` ("layer", "all", "head"), `head`, `query`,
        `palette`, `title`; one self-contained HTML file of that view, returned as text and written to `path` when
        one is given."""
        page: str = self.call("export", model, **fields)  # export declares the html form: the page as text
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page

    # ---- the training lab ---------------------------------------------------------------------------------------

    def train(self, task: str, **knobs: Any) -> dict[str, Any]:
        """POST /api/train: start a training run of `task` with TrainSpec's knobs (layers, heads, width, steps...,
        and `name`); `id`, `status` (queued) and `events`, the run's server-sent events to follow it by. Its
        snapshots then open as models named "train:ID@STEP"."""
        return self._call("POST", "/api/train", {"task": task, **knobs})

    def training_runs(self) -> list[dict[str, Any]]:
        """GET /api/train: every run kept, newest first (id, name, status, spec, steps)."""
        runs: list[dict[str, Any]] = self._call("GET", "/api/train")["runs"]
        return runs

    def training_run(self, run_id: str) -> dict[str, Any]:
        """GET /api/train/{id}: the run's spec, status and every snapshot's `measures` so far."""
        return self._call("GET", f"/api/train/{run_id}")

    def cancel_training(self, run_id: str) -> dict[str, Any]:
        """POST /api/train/{id}/cancel: stop the run at its next step (kept as cancelled, with its snapshots)."""
        return self._call("POST", f"/api/train/{run_id}/cancel", {})

    # ---- the declared analyses ----------------------------------------------------------------------------------

    def analyses(self) -> dict[str, dict[str, Any]]:
        """GET /api/analyses, by client method name (read once per client): each analysis's `name`, `path`,
        `summary` and `forms`."""
        if self._analyses is None:
            listed = self._call("GET", "/api/analyses")["analyses"]
            self._analyses = {a["client"]: a for a in listed}
        return self._analyses

    def call(self, name: str, model: str | None = None, /, **fields: Any) -> Any:
        """POST the analysis `name` (its client method name, "scale_sweep", or its API name, "scale-sweep") with
        the body's fields; the answer as its method gives it: arrays where the analysis answers in the arrays form,
        a dict of its JSON otherwise (an HTML answer as text)."""
        declared = self.analyses()
        found = declared.get(name) or next((a for a in declared.values() if a["name"] == name), None)
        if found is None:
            raise AttributeError(f"this server declares no analysis {name!r}; it has {', '.join(sorted(declared))}")
        if found["forms"] == ["html"]:
            resp = self._http.post(found["path"], **_sent(_body(model, fields)), headers={"accept": "text/html"})
            _raise_for(resp)
            return resp.text
        return self._call("POST", found["path"], _body(model, fields), arrays="arrays" in found["forms"])

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """A declared analysis's method: `api.perturb("random", text=..., position=1)` is api.call("perturb", ...)."""
        if name.startswith("_"):
            raise AttributeError(name)

        def method(model: str | None = None, /, **fields: Any) -> Any:
            return self.call(name, model, **fields)

        found = self.analyses().get(name)
        if found is None:
            raise AttributeError(
                f"{type(self).__name__!r} has no attribute {name!r}, and the server declares no such analysis"
            )
        method.__name__ = name
        method.__doc__ = f"POST {found['path']}: {found['summary']}"
        return method

    def __dir__(self) -> list[str]:
        try:
            declared = list(self.analyses())
        except (httpx.TransportError, ApiError):  # no server to ask: the methods written here
            declared = []
        return sorted({*super().__dir__(), *declared})

    # ---- transport -----------------------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        arrays: bool = False,
        headers: dict[str, str] | None = None,
    ) -> Any:
        accept = ARRAYS_ACCEPT if arrays else "application/json"
        sent = _sent(body) if body is not None else {}
        resp = self._http.request(method, path, **sent, headers={"accept": accept, **(headers or {})})
        _raise_for(resp)
        kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == MEDIA_TYPE:
            return read_arrays(bytearray(resp.content))  # a bytearray: the arrays are writable
        result = resp.json()
        if path == "/api/attention":  # a server (or proxy) that answered JSON anyway: the same arrays
            attention_arrays(result)
        elif path == "/api/intervene":
            attention_arrays(result["before"])
            attention_arrays(result["after"])
        return result


def _raise_for(resp: httpx.Response) -> None:
    """attnlab.ApiError for an answer that is not a success, from its error body when it has one."""
    if resp.is_success:
        return
    try:
        error_body = resp.json()
    except ValueError:
        error_body = None
    raise ApiError.from_body(resp.status_code, error_body, resp.text)


def _body(model: str | None, fields: dict[str, Any]) -> dict[str, Any]:
    body = jsonable(fields)
    if model is not None:
        body["model"] = model
    return body


def _sent(body: dict[str, Any]) -> dict[str, Any]:
    """httpx's arguments for a body: `json=` as it is, or, when an `image` is a local file or bytes, a multipart
    form of the JSON as the part `request` and each such image as a file part named by its path (image,
    clean.image)."""
    files: dict[str, tuple[str, bytes, str]] = {}

    def take(node: dict[str, Any], prefix: str) -> dict[str, Any]:
        out = {}
        for key, value in node.items():
            if key == "image" and isinstance(value, os.PathLike):
                named = Path(value)
                files[prefix + key] = (named.name, named.read_bytes(), "application/octet-stream")
            elif key == "image" and isinstance(value, (bytes, bytearray, memoryview)):
                files[prefix + key] = ("image", bytes(value), "application/octet-stream")
            elif isinstance(value, dict) and not prefix:
                out[key] = take(value, f"{key}.")
            else:
                out[key] = value
        return out

    left = take(body, "")
    if not files:
        return {"json": body}
    request = ("", json.dumps(left).encode(), "application/json")
    return {"files": {"request": request, **files}}
