"""Every declared analysis in this process: attnlab.heads, attnlab.perturb, attnlab.intervene, attnlab.patch, ...

One function per declaration of server/analyses (server/declare.py), named as attnlab.Client's method for it
(`client`: heads, top_heads, perturb, intervene, patch, patch_run, compare, decode, qk_attribution, runs, cost,
scale_sweep, attention, export), made here from the declarations, so an analysis declared later is here too with
no new code. A call is that analysis's request with no server: its fields by name, as the API names them, validated
as its route validates them (server/inprocess.py: the route's own parse_body), run by the declaration's own `run`
with a Context made in this process (the settings as a server started here would read them, ATTNLAB_* and the
declared limits; the models attnlab/local.py loads; its runtime), and answered as attnlab.Client returns that call:
the arrays form read back where the analysis has it (matrices as NumPy arrays), its JSON as dicts otherwise, and
export's HTML as text. A refusal is the API's, as attnlab.ApiError, with the same status, code and field.

`model` is given as to attnlab.run: a name, a checkpoint directory, a model attnlab.load returned, or a transformers
model with `tokenizer=`. It stands in for every model the body leaves out: the body's own `model`, or for an
analysis of two bodies (compare's `a` and `b`, patch's `clean` and `corrupted`) each body's. A model given as itself
inside a body (`a={"model": attnlab.load(DIR), ...}`, scale_sweep's `models`) is taken too. A training run's
snapshot (`train:RUN@STEP`) lives in a server's training store: in process it is refused, naming `model`.

Besides the body's fields, a call takes `tokenizer=`, `device=` and `dtype=` (the runtime's, as attnlab.run takes
them; a field of the analysis's own by that name goes to the body instead: cost's `dtype`), and `run=`, the long
run's name (X-Attnlab-Run), which runs keeps its run under (one is chosen without it). A kept run's parts are read
with `tile(run, layer, head, z, x, y)` and `row(run, layer, head, query)`, as Client.tile and Client.row read
them, `run` being the name or the answer of runs itself.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from attnlab import local
from attnlab.arrays import jsonable
from engine.models import model_for
from server import inprocess
from server.analyses import declared
from server.config import Settings
from server.declare import Analysis
from server.progress import run_id_of

OWN = ("tokenizer", "device", "dtype", "run")  # a call's own keywords, unless the request has a field so named


@cache
def functions() -> dict[str, Callable[..., Any]]:
    """One function per declared analysis, by its client method name, in declaration order."""
    return {a.client: made(a) for a in declared()}


def made(analysis: Analysis) -> Callable[..., Any]:
    """The in-process function of one declaration."""

    def call(model: Any = None, /, **fields: Any) -> Any:
        return analyse(analysis, model, fields)

    call.__name__ = call.__qualname__ = analysis.client
    call.__module__ = "attnlab"
    call.__doc__ = (
        f"{analysis.summary}: POST {analysis.path} in this process, its fields by name (see attnlab.analyses).\n\n"
        f"{analysis.description}"
    )
    return call


def analyse(analysis: Analysis, model: Any, fields: dict[str, Any]) -> Any:
    """`analysis` run on `model` and the body's `fields` in this process, answered as attnlab.Client answers it."""
    own = {k: fields.pop(k) for k in OWN if k in fields and k not in analysis.request.model_fields}
    path = fields.pop("path", None) if analysis.forms == ("html",) else None  # as Client.export writes the file
    settings = Settings()
    with local.api_errors():
        body, bodies = given_models(analysis.request, fields, model, own.get("tokenizer"))
        req = inprocess.analysis_request(analysis, jsonable(body))
        models = local.models_for(None)
        for field, name in named_in(req, bodies):
            models = local.models_for(name, field)
        where = local.runtime(own.get("device") or settings.device, own.get("dtype") or settings.dtype)
        answered = inprocess.answer_analysis(analysis, req, settings, models, where, run_id_of(own.get("run")))
    if path is not None:
        Path(path).write_text(answered, encoding="utf-8")
    return answered


def given_models(
    cls: type[BaseModel], body: dict[str, Any], model: Any, tokenizer: Any, prefix: str = ""
) -> tuple[dict[str, Any], list[str]]:
    """The body with each model it gives as itself (a directory, attnlab.load's model, a transformers model) as the
    name it runs under in this process, and `model` where the body gives none; and the bodies within it that name
    a model ("" for the body itself, "a.", "clean."), for named_in."""
    out = dict(body)
    bodies: list[str] = []
    inner = nested(cls)
    if "model" in cls.model_fields or not inner:  # a request with no model of any kind: refused by its validation
        if out.get("model") is None and model is not None:
            out["model"] = model
        if out.get("model") is not None:
            out["model"] = local.model_named(out["model"], tokenizer)
        bodies.append(prefix)
    if "models" in cls.model_fields and isinstance(out.get("models"), (list, tuple)):
        out["models"] = [local.model_named(m, tokenizer) for m in out["models"]]
    for name, sub in inner.items():
        if isinstance(out.get(name), dict):
            out[name], within = given_models(sub, out[name], model, tokenizer, f"{prefix}{name}.")
            bodies += within
    return out, bodies


def nested(cls: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The request's fields that are request bodies of their own with a model (compare's a and b, patch's clean
    and corrupted)."""
    found = {}
    for name, info in cls.model_fields.items():
        sub = info.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel) and "model" in sub.model_fields:
            found[name] = sub
    return found


def named_in(req: BaseModel, bodies: list[str]) -> list[tuple[str, str]]:
    """(field, model name) for every model the validated request runs: each body's own model, or the one a body
    of x (or of typed-in scores) without a name runs on (engine.models.model_for), and each of a `models` list."""
    found = []
    for prefix in bodies:
        node: Any = req
        for part in filter(None, prefix.split(".")):
            node = getattr(node, part)
        x = getattr(node, "x", None) is not None
        typed = getattr(node, "scores", None) is not None or getattr(node, "pattern", None) is not None
        name = model_for(getattr(node, "model", None), x, typed)
        if name is not None:
            found.append((f"{prefix}model", name))
        found += [(f"{prefix}models", m) for m in getattr(node, "models", None) or () if isinstance(m, str)]
    return found


def tile(run: Any, layer: int, head: int, z: int, x: int, y: int, agg: str = "max") -> dict[str, Any]:
    """A kept long run's tile, as Client.tile reads GET /api/runs/{run}/tiles/...: `weights` (up to 256 x 256
    cells, a NumPy array: exact weights at the deepest level, block maxima or means above), `q0`, `k0`, `cell`.
    `run`: the run's name, or what attnlab.runs answered. A run this process no longer keeps (ATTNLAB_RUN_BYTES
    holds the latest) raises ApiError 404 run_expired: run it again."""
    name = run_name(run)
    with local.api_errors():
        answered: dict[str, Any] = inprocess.read_tile(kept_by(name), name, layer, head, z, x, y, agg)
    return answered


def row(run: Any, layer: int, head: int, query: int) -> dict[str, Any]:
    """A kept long run's row, as Client.row reads it: the query's exact `weights` over every key (a NumPy array) and
    `top`, its largest keys with their tokens."""
    name = run_name(run)
    with local.api_errors():
        answered: dict[str, Any] = inprocess.read_row(kept_by(name), name, layer, head, query)
    return answered


def run_name(run: Any) -> Any:
    return run.get("run") if isinstance(run, dict) else run


def kept_by(name: Any) -> Any:
    """The runtime that keeps the run `name` (the first made when none does, whose store then says it is gone)."""
    made_here = local.runtimes()
    for where in made_here:
        if isinstance(name, str) and where.long_runs.holds(name):
            return where
    if made_here:
        return made_here[0]
    settings = Settings()
    return local.runtime(settings.device, settings.dtype)


def names() -> list[str]:
    """The in-process analyses' names, and tile and row."""
    return [*functions(), "tile", "row"]


def __getattr__(name: str) -> Any:
    found = functions().get(name)
    if found is None:
        raise AttributeError(f"module 'attnlab.analyses' has no attribute {name!r}")
    return found
