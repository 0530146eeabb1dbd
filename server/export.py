"""An export: the /api/attention body of an export request, computed, as one standalone HTML file and its name.

Shared by POST /api/export (server/analyses/attention.py) and server/inprocess.py (attnlab.show), so both refuse the
same arguments with the same field named."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from server.errors import ApiError
from server.refusals import refuse_fields
from server.schemas import AttentionRequest, ExportRequest
from server.serialize import FLOAT16_MAX
from wire.arrays import write_arrays
from wire.standalone import standalone_html

EXPORT_FIELDS = {"view", "head", "query", "palette", "title", "matrix", "positions_from"}
# the views of the whole stack an export may embed beside the weights (each layer's S x S map), as /api/attention
# computes them: the same include names, the same `rollout` options, the same checks and limits
STACKED = ("rollout", "attention_flow")
# An export embeds its matrices at float32 when it holds at most this many weights in all (every layer and head it
# embeds), so a small run's numbers stay exact (the chapter's 0.241 stays 0.241, not float16's 0.2410); above it, at
# float16 (half the bytes: 72 heads x 512 x 512 MiniLM weights are 18.9 million). attnlab.show embeds the same.
FLOAT32_WEIGHTS = 65_536
PRECISION = "float32 up to 65,536 weights, float16 above"


def build_export(req: ExportRequest, compute: Callable[[AttentionRequest], dict[str, Any]]) -> tuple[str, str]:
    """The standalone page of an export request and its file name; `compute` runs the /api/attention body (the
    route's attention_body, or attnlab.show's in-process run). Refusals are the API's ApiError, naming the field."""
    body = export_body(req, compute)
    return export_page(req, body, write_arrays(body)), filename(body["model"], req.view, req.layer, req.head)


def export_body(req: ExportRequest, compute: Callable[[AttentionRequest], dict[str, Any]]) -> dict[str, Any]:
    """The answer an export embeds (its precision set, `embedded_precision`), after the export's own checks; what
    attnlab.show's widget sends as its buffer."""
    refuse_fields(req, ("texts", "demo_bug"), "an export draws one sequence's own attention")
    if "precision" in req.model_fields_set:
        raise ApiError(
            422, "invalid_request", f"an export sets its own precision ({PRECISION}): leave precision out", "precision"
        )
    stacked = stacked_views(req)
    if "include" in req.model_fields_set and set(req.include) - set(STACKED):
        message = f"an export embeds the weights ({PRECISION}); include names only the views rollout and attention_flow"
        raise ApiError(422, "invalid_request", message, "include")
    if req.view == "all" and req.layer is not None:
        raise ApiError(422, "invalid_request", "view all shows every layer: leave layer out", "layer")
    fields = req.model_dump(mode="json", exclude=EXPORT_FIELDS | {"include", "precision"}, exclude_unset=True)
    # validated as JSON, as the body was: strict, and a JSON array where the schema has a tuple
    # the moved view: what each key moves, and the strip of what each head adds to the output
    include = ["weights", "value_norms", "head_contributions"] if req.matrix == "moved" else ["weights"]
    include += stacked  # /api/attention's own checks refuse them (flow past 64 positions, a source, ...) by name
    as_attention = AttentionRequest.model_validate_json(
        orjson.dumps({**fields, "include": include, "precision": "float32"})
    )
    body = embedded_precision(compute(as_attention))
    n_heads, seq_len = len(body["layers"][0]["heads"]), len(body["tokens"])
    if req.head is not None and req.head >= n_heads:
        raise ApiError(422, "invalid_request", f"got head {req.head}; this model has heads 0-{n_heads - 1}", "head")
    if req.query is not None and req.query >= seq_len:
        message = f"got query {req.query}; the sequence has positions 0-{seq_len - 1}"
        raise ApiError(422, "invalid_request", message, "query")
    return body


def export_shown(req: ExportRequest) -> dict[str, Any]:
    """What the page opens on, as standalone_html embeds it."""
    return {
        "view": req.view,
        "layer": req.layer if req.layer is not None else 0,
        "head": req.head,
        "query": req.query,
        "palette": req.palette,
        "matrix": req.matrix,
        "rollout": rollout_shown(req) if stacked_views(req) else None,
        "positions_from": req.positions_from,
    }


def stacked_views(req: ExportRequest) -> list[str]:
    """The views of the whole stack the export embeds (STACKED names its `include` gives)."""
    return [name for name in STACKED if name in req.include] if "include" in req.model_fields_set else []


def export_page(req: ExportRequest, body: dict[str, Any], data: bytes | memoryview) -> str:
    """The standalone page of `body` (export_body's), `data` its arrays form."""
    stacked = stacked_views(req)
    return standalone_html(
        data,
        view=req.view,
        title=req.title or default_title(body["model"], req),
        layer=req.layer if req.layer is not None else 0,
        head=req.head,
        query=req.query,
        palette=req.palette,
        matrix=req.matrix,
        rollout=rollout_shown(req) if stacked else None,
        positions_from=req.positions_from,
    )


def embedded_precision(body: dict[str, Any]) -> dict[str, Any]:
    """The answer as the file embeds it: as computed (float32; float64 under dtype float64) when it holds at most
    FLOAT32_WEIGHTS weights, else every float matrix rounded to float16, unless some value would not fit float16
    (then all stay as computed); config.precision says which."""
    layers = body["layers"]
    count = sum(np.asarray(head["weights"]).size for layer in layers for head in layer["heads"])
    arrays = [(d, k) for layer in layers for d in (layer, *layer["heads"]) for k, v in d.items() if _float(v)]
    fits = all(not d[k].size or float(np.abs(d[k]).max()) <= FLOAT16_MAX for d, k in arrays)
    half = count > FLOAT32_WEIGHTS and fits
    if half:
        for d, k in arrays:
            d[k] = d[k].astype(np.float16)
    body["config"] = {**body["config"], "precision": "float16" if half else "float32"}
    return body


def _float(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype in (np.float32, np.float64)


def rollout_shown(req: ExportRequest) -> dict[str, Any]:
    """How the embedded rollout / flow fused the heads, for the file's line that names it."""
    heads = req.rollout.heads if req.rollout is not None else "mean"
    residual = req.rollout.residual if req.rollout is not None else True
    return {"heads": heads, "residual": residual}


def default_title(model: str, req: ExportRequest) -> str:
    text = req.text if req.text is not None else " ".join(req.tokens or [])
    if not text:
        return f"attnlab · {model}"
    return f"attnlab · {model} · “{text[:60]}{'…' if len(text) > 60 else ''}”"


def filename(model: str, view: str, layer: int | None, head: int | None) -> str:
    """attnlab-minilm-head-L2-H5.html: the model, the view and what it opens on, in safe characters."""
    parts = ["attnlab", model, view]
    if layer is not None and view != "all":
        parts.append(f"L{layer}")
    if head is not None and view == "head":
        parts.append(f"H{head}")
    return re.sub(r"[^A-Za-z0-9._-]", "_", "-".join(parts)) + ".html"
