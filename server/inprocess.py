"""One request run in the caller's own process and thread, no HTTP: what attnlab.run and attnlab.show call.

A body is validated as a route validates it (from JSON: strict types, unknown fields refused), checked under the
same settings and run by the same code as POST /api/attention and POST /api/export, with the matrices left as
NumPy arrays (bounded as the arrays form is, not as JSON text). No compute threads, no queue and no app: the
runtime is `local_runtime`'s, which keeps no runs. Refusals raise as they do in a route (pydantic's
ValidationError, the engine's InputError, server.errors.ApiError); the caller turns them into its own errors.
"""

from __future__ import annotations

import json
from typing import Any

from engine.device import resolve_device, resolve_dtype
from engine.models import AttentionModel
from server.analyses import declared_settings
from server.analyses.attention import attention_body
from server.config import Settings
from server.deps import Runtime
from server.export import build_export, default_title, export_body, export_page, export_shown, filename
from server.runcache import RunCache
from server.schemas import AttentionRequest, ExportRequest
from wire.arrays import MEDIA_TYPE

Models = dict[str, AttentionModel]


def local_runtime(device: str, dtype: str) -> Runtime:
    """A runtime for runs in this process: `device` and `dtype` as ATTNLAB_DEVICE and ATTNLAB_DTYPE read them, and
    a run cache of 0 bytes (each call runs afresh; nothing is held between calls)."""
    return Runtime(resolve_device(device), resolve_dtype(dtype), RunCache(0))


def attention_request(body: dict[str, Any]) -> AttentionRequest:
    """An /api/attention body validated as the route validates it: from JSON, so a tuple field takes a list."""
    return AttentionRequest.model_validate_json(json.dumps(body))


def export_request(body: dict[str, Any]) -> ExportRequest:
    """A POST /api/export body validated as the route validates it."""
    return ExportRequest.model_validate_json(json.dumps(body))


def run_attention(req: AttentionRequest, settings: Settings, models: Models, runtime: Runtime) -> dict[str, Any]:
    """What /api/attention answers for `req`, its matrices NumPy arrays (`settings`' declared limits set as an app
    sets them)."""
    return attention_body(req, declared_settings(settings), models, runtime, MEDIA_TYPE)


def run_export(req: ExportRequest, settings: Settings, models: Models, runtime: Runtime) -> tuple[str, str]:
    """The standalone page POST /api/export answers for `req`, and its file name."""
    settings = declared_settings(settings)
    return build_export(req, lambda attention: run_attention(attention, settings, models, runtime))


def export_view(req: ExportRequest, body: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """What attnlab.show's widget needs of an export beside the answer (`body`, export_body's): the page's file
    name, its title and what it opens on (view, layer, head, query, palette, matrix, rollout, positions_from), as
    the page's own script reads them. The page itself is export_page's."""
    name = filename(body["model"], req.view, req.layer, req.head)
    return name, req.title or default_title(body["model"], req), export_shown(req)


def standalone_page(req: ExportRequest, body: dict[str, Any], data: bytes) -> str:
    """The standalone page of an export's answer (`body`, export_body's; `data`, its arrays form): attnlab.show's
    widget's fallback, the page POST /api/export would answer."""
    return export_page(req, body, data)


def run_export_body(req: ExportRequest, settings: Settings, models: Models, runtime: Runtime) -> dict[str, Any]:
    """The answer the standalone page of `req` embeds (server/export.py export_body), computed here."""
    settings = declared_settings(settings)
    return export_body(req, lambda attention: run_attention(attention, settings, models, runtime))
