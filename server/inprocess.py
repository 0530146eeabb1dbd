"""One request run in the caller's own process and thread, no HTTP: what attnlab.run, attnlab.show and attnlab's
in-process analyses (attnlab/analyses.py) call.

A body is validated as a route validates it (from JSON: strict types, unknown fields refused), checked under the
same settings and run by the same code as POST /api/attention and POST /api/export, with the matrices left as
NumPy arrays (bounded as the arrays form is, not as JSON text). Any declared analysis runs the same way
(`answer_analysis`: its declaration's own `respond`, with a Context made here), and a long run's tiles and rows
are read as their GET routes read them (`read_tile`, `read_row`). No compute threads, no queue and no app: the
runtime is `local_runtime`'s, which keeps no forward passes (only the long runs a caller asked for, for their
tiles). Refusals raise as they do in a route (pydantic's ValidationError, FastAPI's RequestValidationError, the
engine's InputError, server.errors.ApiError); the caller turns them into its own errors.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

from engine.device import resolve_device, resolve_dtype
from engine.models import AttentionModel
from server.analyses import declared_settings
from server.analyses.attention import attention_body
from server.config import Settings
from server.declare import Analysis, Context
from server.deps import Runtime
from server.errors import ApiError
from server.export import build_export, default_title, export_body, export_page, export_shown, filename
from server.forms import answer, chosen_accept
from server.progress import RUN_ID
from server.routes.runs import Part, row_of, tile_of
from server.runcache import RunCache
from server.runstore import RunStore
from server.scheduling import parse_body
from server.schemas import AttentionRequest, ExportRequest
from server.schemas.ints import INT64_MAX, INT64_MIN
from wire.arrays import MEDIA_TYPE, read_arrays

Models = dict[str, AttentionModel]


def local_runtime(device: str, dtype: str, settings: Settings | None = None) -> Runtime:
    """A runtime for runs in this process: `device` and `dtype` as ATTNLAB_DEVICE and ATTNLAB_DTYPE read them, a
    run cache of 0 bytes (each call runs afresh; no forward pass is held between calls), and the long runs kept
    within `settings`' ATTNLAB_RUN_BYTES, as an app keeps them (default: the environment's settings)."""
    kept = RunStore(declared_settings(settings or Settings()).limit("run_bytes"))
    return Runtime(resolve_device(device), resolve_dtype(dtype), RunCache(0), long_runs=kept)


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


def analysis_request(analysis: Analysis, body: dict[str, Any]) -> BaseModel:
    """A body validated as the analysis's route validates it (server.scheduling.parse_body, on its JSON); a value
    JSON cannot hold (an object where a field takes numbers) is the 422 a body that is not JSON gets."""
    try:
        text = json.dumps(body)
    except (TypeError, ValueError) as err:
        raise ApiError(422, "invalid_request", f"not a JSON value: {str(err)[:200]}", "body") from err
    return parse_body(analysis.request, text.encode())


def answer_analysis(
    analysis: Analysis,
    req: BaseModel,
    settings: Settings,
    models: Models,
    runtime: Runtime,
    run_name: str | None = None,
) -> Any:
    """What the analysis's route answers for `req`, read as attnlab.Client reads it: the arrays form, its matrices
    NumPy arrays, where the analysis has that form; the JSON as dicts and lists otherwise; an HTML answer as text.
    Run by the declaration's own `respond` (its `run`, and its answer check under ATTNLAB_CHECK_ANSWERS) with the
    Context a route would make: `settings`' declared limits set, the Accept narrowed to the analysis's forms, the
    run's name (`run_name`, as X-Attnlab-Run names it)."""
    settings = declared_settings(settings)
    asked = MEDIA_TYPE if "arrays" in analysis.forms else "application/json"
    accept = chosen_accept(asked, analysis.forms) if len(analysis.forms) > 1 else None
    ctx = Context(settings, models, runtime, accept, run_name)
    return read_response(analysis.respond(req, ctx, settings.check_answers))


def read_response(response: Response) -> Any:
    """An answer as a client reads it: the arrays form with its arrays (writable, over the answer's own buffer),
    JSON as dicts and lists, HTML as text."""
    kind = (response.media_type or "").split(";")[0]
    if kind == MEDIA_TYPE:
        return read_arrays(response.body)
    if kind == "text/html":
        return bytes(response.body).decode("utf-8")
    return json.loads(bytes(response.body))


def read_tile(runtime: Runtime, run: Any, layer: Any, head: Any, z: Any, x: Any, y: Any, agg: Any = "max") -> Any:
    """GET /api/runs/{run}/tiles/{layer}/{head}/{z}/{x}/{y}?agg= in this process, from `runtime`'s kept runs: the
    tile's answer in the arrays form, read back (its `weights` a NumPy array)."""
    if agg not in ("max", "mean"):
        raise ApiError(422, "invalid_request", f"is {agg!r}: give max or mean", "agg")
    where = place(run, layer=layer, head=head, z=z, x=x, y=y)
    return read_part(tile_of(runtime, run, where["layer"], where["head"], where["z"], where["x"], where["y"], agg))


def read_row(runtime: Runtime, run: Any, layer: Any, head: Any, query: Any) -> Any:
    """GET /api/runs/{run}/rows/{layer}/{head}/{query} in this process: the row's answer, read back."""
    where = place(run, layer=layer, head=head, query=query)
    return read_part(row_of(runtime, run, where["layer"], where["head"], where["query"]))


def place(run: Any, **numbers: Any) -> dict[str, int]:
    """A tile's or row's path checked as its route's path parameters are: the run's name, whole numbers within 64
    bits (each then checked against the run)."""
    if not isinstance(run, str) or not RUN_ID.fullmatch(run):
        raise ApiError(
            422, "invalid_request", f"is {str(run)[:80]!r}: a run's name is 8 to 64 letters, digits, - or _", "run"
        )
    for name, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, int) or not INT64_MIN <= value <= INT64_MAX:
            raise ApiError(422, "invalid_request", f"is {str(value)[:80]!r}: give a whole number", name)
    return numbers


def read_part(part: Part) -> Any:
    _, body = part
    return read_response(answer(body(), MEDIA_TYPE))


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
