"""One declaration per analysis: what the route, OpenAPI, GET /api/analyses, the client and the page's panel read.

An analysis is an `Analysis` in a module of server/analyses/ (found there, in file order): its request type, its
answer type, the function from a validated request to the answer, its OpenAPI summary and examples, the forms it
answers in, the page panel that shows it and the client method that calls it. server/analyses/__init__.py makes
the routes from the declarations; there is no route module per analysis.

    SWEEP = Analysis(
        name="scale-sweep",                      # POST /api/scale-sweep
        request=ScaleSweepRequest,
        answer=ScaleSweepResult,                  # OpenAPI's 200, and (ATTNLAB_CHECK_ANSWERS) checked on every answer
        run=scale_sweep_route,                    # (req, ctx) -> a dict, the answer model, or a Response
        summary="Why scores are divided by sqrt(d_k)",
        examples={"figure": {"summary": "...", "value": {"widths": [1, 4, 16]}}},
        panel="sweep",                            # the page's panel (static/js), or None
    )
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pydantic
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from engine.models import AttentionModel
from server.config import Settings
from server.deps import Runtime, get_models, get_runtime, get_settings
from server.errors import ApiError
from server.forms import ORJSONResponse, answer, chosen_accept
from server.progress import HEADER, run_id_of
from server.stream import StreamedAnswer

FORMS = ("json", "arrays", "npz", "stream")
T = TypeVar("T")


@dataclass(frozen=True)
class Context:
    """What an analysis's `run` receives besides its request: the app's settings, models and runtime (each one
    honours app.dependency_overrides of server.deps.get_settings, get_models and get_runtime), and the request's
    form it answers in when the analysis has more forms than JSON, as a media type (server.forms.chosen_accept: the
    client's Accept narrowed to the analysis's forms; None otherwise: it answers JSON)."""

    settings: Settings
    models: dict[str, AttentionModel]
    runtime: Runtime
    accept: str | None = None
    run_name: str | None = None  # the X-Attnlab-Run the client named its run with, checked (server/progress.py)


Run = Callable[[Any, Context], Any]


@dataclass(frozen=True)
class Limit:
    """A bound an analysis puts on the work one request may ask of it, set by ATTNLAB_<NAME> like every other limit
    (server/config.py reads it; GET /api/health lists it; the analysis reads ctx.settings.limit(name))."""

    name: str  # "max_sweep_values": ATTNLAB_MAX_SWEEP_VALUES
    default: int
    doc: str  # what it counts, for the settings table
    minimum: int = 1

    @property
    def env(self) -> str:
        return f"ATTNLAB_{self.name.upper()}"


@dataclass(frozen=True)
class Analysis:
    name: str  # the path under /api/ ("scale-sweep", "heads/top")
    request: type[BaseModel]  # the JSON body, validated strictly
    answer: type[BaseModel] | None  # the JSON 200's shape; None: the answer is not JSON (export's HTML)
    run: Run  # (validated request, Context) -> a dict, an `answer` instance, or a Response; its docstring is the
    # route's OpenAPI description
    summary: str
    examples: dict[str, dict[str, Any]] = field(default_factory=dict)  # OpenAPI request examples, by name
    forms: tuple[str, ...] = ("json",)  # the forms of FORMS it answers in (by Accept), or ("html",)
    panel: str | None = None  # the page's panel that shows it (static/js/store.js PANELS)
    client: str = ""  # the client's method name; "" : the name with - and / as _
    tags: tuple[str, ...] = ("analysis",)
    limits: tuple[Limit, ...] = ()  # the bounds it declares on one request's work (ATTNLAB_ settings of its own)

    def __post_init__(self) -> None:
        unknown = [f for f in self.forms if f not in FORMS] if self.forms != ("html",) else []
        if unknown or not self.forms:
            raise ValueError(f"{self.name}: forms must be drawn from {FORMS} (or be ('html',)), got {self.forms}")
        if self.answer is None and self.forms != ("html",):
            raise ValueError(f"{self.name}: an analysis answering {self.forms} needs an answer type")
        if not self.client:
            object.__setattr__(self, "client", self.name.replace("-", "_").replace("/", "_"))

    @property
    def path(self) -> str:
        return f"/api/{self.name}"

    @property
    def description(self) -> str:
        return (self.run.__doc__ or "").strip()

    def entry(self) -> dict[str, Any]:
        """Its line in GET /api/analyses."""
        return {
            "name": self.name,
            "path": self.path,
            "client": self.client,
            "panel": self.panel,
            "summary": self.summary,
            "forms": list(self.forms),
        }

    def context(self, request: Request) -> Context:
        """The Context for one request to this analysis."""
        settings: Settings = provided(request, get_settings)
        forms = self.forms
        accept = chosen_accept(request.headers.get("accept"), forms) if len(forms) > 1 else None
        named = run_id_of(request.headers.get(HEADER))
        return Context(settings, provided(request, get_models), provided(request, get_runtime), accept, named)

    def respond(self, req: BaseModel, ctx: Context, check: bool) -> Response:
        """Run it and write the answer in the form asked; `check` (ATTNLAB_CHECK_ANSWERS): the answer, written as
        JSON whatever the form asked, must fit `answer` field by field, or it is a 500 naming the first field that
        does not."""
        out = self.run(req, ctx)
        response: Response
        if isinstance(out, StreamedAnswer):
            response = out
            if check and self.answer is not None:
                out.frames = checked_frames(out.frames, self.answer, self.path)
        elif isinstance(out, Response):
            response = out
        elif isinstance(out, BaseModel):
            response = ORJSONResponse(out.model_dump(mode="json"))
        elif len(self.forms) > 1:
            response = answer(out, ctx.accept)
            if check and not isinstance(response, ORJSONResponse):  # the .npz or arrays form: its JSON is checked,
                # each matrix standing in as one value of its dtype and rank (its every number would cost 10 s at
                # 512 tokens)
                check_answer(self.answer, bytes(ORJSONResponse(stand_in(out)).body), self.path)  # type: ignore[arg-type]
        else:
            response = ORJSONResponse(out)
        if check and self.answer is not None and isinstance(response, ORJSONResponse):
            check_answer(self.answer, bytes(response.body), self.path)
        return response


def provided(request: Request, dependency: Callable[[Request], T]) -> T:
    """What `dependency` (server.deps) gives this request, or what app.dependency_overrides puts in its place: as
    in FastAPI, an override is a function, called with the request when it takes a parameter, else with none."""
    chosen: Callable[..., T] = request.app.dependency_overrides.get(dependency, dependency)
    return chosen(request) if inspect.signature(chosen).parameters else chosen()


def stand_in(node: Any) -> Any:
    """`node` with every NumPy array shrunk to one element of its dtype and rank: the answer's shape, cheaply."""
    if isinstance(node, np.ndarray):
        return np.zeros((1,) * node.ndim, dtype=node.dtype)
    if isinstance(node, dict):
        return {k: stand_in(v) for k, v in node.items()}
    if isinstance(node, list):
        return [stand_in(v) for v in node]
    return node


def checked_frames(frames: Iterator[tuple[str, Any]], cls: type[BaseModel], path: str) -> Iterator[tuple[str, Any]]:
    """A streamed answer's frames as they are, the whole answer they make (each matrix a stand-in) checked against
    `cls` before the tail goes out: one that does not fit ends the answer with an error frame instead."""
    head: dict[str, Any] = {}
    layers: list[Any] = []
    for kind, body in frames:
        if kind == "head":
            head = stand_in(body)
        elif kind == "layer":
            layers.append(stand_in(body))
        elif kind == "tail":
            whole = {**head, **stand_in(body), "layers": [*head["layers"], *layers]}
            check_answer(cls, bytes(ORJSONResponse(whole).body), path)
        yield kind, body


def check_answer(cls: type[BaseModel], body: bytes, path: str) -> None:
    """The JSON answer validated against its declared type, strictly: a missing field, a field the type lacks or a
    value of another type is an ApiError 500 whose field is the bad field's path (layers.0.heads.1.weights)."""
    try:
        cls.model_validate_json(body, strict=True, extra="forbid")
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(the answer)"
        count = e.error_count()
        message = f"the answer of {path} does not fit {cls.__name__} at {where}: {first['msg']} ({count} in all)"
        raise ApiError(500, "answer_mismatch", message, where) from e


def answer_of(source: type, title: str | None = None, /, **described: Any) -> type[BaseModel]:
    """A response class with the fields of the engine dataclass `source`, so the shape is written once (in the
    engine) and OpenAPI and the answer check read it. `described`: per field, a pydantic Field (its description),
    or a (type, Field or ...) pair where the answer's type is narrower than the engine's (str -> a Literal) or where
    the answer adds a field the engine's result does not hold (the request it answers)."""
    if not dataclasses.is_dataclass(source):
        raise TypeError(f"{source!r} is not a dataclass")
    hints = typing.get_type_hints(source)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(source):
        given = described.pop(f.name, None)
        if isinstance(given, tuple):
            fields[f.name] = given
        elif given is not None:
            fields[f.name] = (hints[f.name], given)
        else:
            fields[f.name] = (hints[f.name], ...)
    loose = [k for k, v in described.items() if not isinstance(v, tuple)]
    if loose:
        raise TypeError(f"{source.__name__} has no fields {sorted(loose)}: an added field needs its (type, Field)")
    fields.update(described)
    doc = source.__doc__ if source.__doc__ and not source.__doc__.startswith(f"{source.__name__}(") else None
    model: type[BaseModel] = pydantic.create_model(title or source.__name__, __doc__=doc, **fields)
    return model
