"""A Python client for the attnlab REST API: one method per endpoint, NumPy arrays out, one exception type.

Needs only httpx and NumPy (not torch, not the server). Matrices come as NumPy arrays: /api/attention,
/api/intervene and /api/compare are asked for the arrays form (`Accept: application/vnd.attnlab.arrays`); every
other endpoint returns its JSON as dicts. An error answer raises attnlab.ApiError; a transport
failure (no server, a timeout) stays an httpx.TransportError.

    with attnlab.Client("http://127.0.0.1:8000") as api:
        r = api.attention("random", text="the cat sat", masks={"causal": True})
        r["layers"][0]["heads"][0]["weights"]  # (S, S) float32
"""

from __future__ import annotations

import os
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
        """GET /api/models: `models` (name, layers, heads, widths, default text and masks...) and `unavailable`."""
        return self._call("GET", "/api/models")

    def attention(self, model: str | None = None, *, run: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/attention. `tokens`, `eligible` (S x S bool), `reasons`, `layers[i]["heads"][h]["weights"]` and
        `["scores"]` (S x S arrays; a batch adds a leading axis), stats, config, shapes, timings. `run` names the run
        (8 to 64 letters, digits, - or _) so that another thread can follow it with `progress(run)`."""
        headers = {"x-attnlab-run": run} if run is not None else None
        return self._call("POST", "/api/attention", _body(model, fields), arrays=True, headers=headers)

    def progress(self, run: str) -> dict[str, Any]:
        """GET /api/progress/{run}: where a named run is: `stage` (queued, layers, writing, done, failed), `ahead`
        (while queued: how many requests wait before it), `done` of `total` layers, `elapsed_ms`."""
        return self._call("GET", f"/api/progress/{run}")

    def heads(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/heads: every head's previous-token, duplicate-token and induction scores, mean distance and
        entropy (`segment_len`, `seed` set the induction probe)."""
        return self._call("POST", "/api/heads", _body(model, fields))

    def top_heads(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/heads/top: every (layer, head) ranked by the weight from `query` to `key` (`k` of them)."""
        return self._call("POST", "/api/heads/top", _body(model, fields))

    def perturb(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/perturb: change `position` (`change`: {"kind": "shift", "amount"} or {"kind": "token", "token"})
        and see per layer which positions move, with a check per mask and a `verdict`."""
        return self._call("POST", "/api/perturb", _body(model, fields))

    def intervene(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/intervene: `ablate` heads and `edit` weights; `before` and `after` are attention results
        (arrays), with `layers` deltas, `final_delta`, and predictions and losses for models that predict tokens."""
        return self._call("POST", "/api/intervene", _body(model, fields), arrays=True)

    def compare(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """POST /api/compare: two /api/attention bodies; `a` and `b` results and per layer and head `diff` (B - A
        weights, an array) and `max_abs`."""
        result: dict[str, Any] = self._call("POST", "/api/compare", {"a": jsonable(a), "b": jsonable(b)}, arrays=True)
        return result

    def decode(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """POST /api/decode: causal decoding one token at a time with a KV cache: `steps`, `max_diff_vs_full`,
        `cache`."""
        return self._call("POST", "/api/decode", _body(model, fields))

    def cost(self, **fields: Any) -> dict[str, Any]:
        """POST /api/cost: `batch`, `heads`, `kv_heads`, `seq_len`, `d_model`, `layers`, `dtype`, `measure`."""
        return self._call("POST", "/api/cost", jsonable(fields))

    def scale_sweep(self, **fields: Any) -> dict[str, Any]:
        """POST /api/scale-sweep: `widths`, `samples`, `seed`, `variance`, `keys`."""
        return self._call("POST", "/api/scale-sweep", jsonable(fields))

    def export(self, model: str | None = None, *, path: str | os.PathLike[str] | None = None, **fields: Any) -> str:
        """POST /api/export: the /api/attention body plus `view` ("layer", "all", "head"), `head`, `query`,
        `palette`, `title`; one self-contained HTML file of that view, returned as text and written to `path` when
        one is given."""
        resp = self._http.post("/api/export", json=_body(model, fields), headers={"accept": "text/html"})
        _raise_for(resp)
        if path is not None:
            Path(path).write_text(resp.text, encoding="utf-8")
        return resp.text

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
        resp = self._http.request(method, path, json=body, headers={"accept": accept, **(headers or {})})
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
