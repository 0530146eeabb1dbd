"""Every analysis's declaration (server/declare.py), found in this package's modules, and the routes made from them.

A module here declares one analysis or a small family and lists them in `ANALYSES`; modules are read in file-name
order. `install(app)` adds one POST /api/<name> per declaration (run by server.scheduling.ComputeRoute) and
GET /api/analyses, which lists them for the client and the page.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Body, FastAPI, Header
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from server.config import Settings
from server.declare import Analysis, Limit
from server.forms import ORJSONResponse, other_forms
from server.scheduling import ComputeRoute
from server.schemas.errors import ANY_ROUTE, BODY, COMPUTE_ERRORS, errors
from server.uploads import image_paths


@cache
def declared() -> tuple[Analysis, ...]:
    """Every module's ANALYSES, modules in file-name order; a name declared twice is an error at start."""
    found: list[Analysis] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += getattr(module, "ANALYSES", ())
    for key in ("name", "client"):
        values = [getattr(a, key) for a in found]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"analyses declared twice ({key}): {twice}")
    return tuple(found)


def declared_limits() -> tuple[Limit, ...]:
    """Every analysis's declared limits (declared_settings sets them), in declaration order; a limit declared twice
    or named like a setting of server/config.py is an error at start."""
    limits = [limit for a in declared() for limit in a.limits]
    names = [limit.name for limit in limits]
    clash = sorted({n for n in names if names.count(n) > 1 or n in Settings.model_fields})
    if clash:
        raise ValueError(f"limits declared twice: {clash}")
    return tuple(limits)


def declared_settings(settings: Settings) -> Settings:
    """`settings` with every declared limit set: as given by name (Settings(max_sweep_values=100)), else from its
    ATTNLAB_ variable, else its default; a whole number at least its minimum, or a ValueError naming the variable.
    create_app and the in-process runs read their settings through this; a name no analysis declares is dropped."""
    values = {}
    for limit in declared_limits():
        raw = settings.declared.get(limit.name, os.environ.get(limit.env, limit.default))
        try:
            value = int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{limit.env} is {raw!r}: give a whole number") from None
        if value < limit.minimum:
            raise ValueError(f"{limit.env} is {value}: at least {limit.minimum}")
        values[limit.name] = value
    return settings.model_copy(update={"declared": values})


def upload_paths() -> frozenset[str]:
    """The paths of the analyses whose body holds an image, which take multipart/form-data too (server/uploads.py)."""
    return frozenset(a.path for a in declared() if image_paths(a.request))


def by_name(name: str) -> Analysis:
    return {a.name: a for a in declared()}[name]


def endpoint(analysis: Analysis) -> Any:
    """A stand-in endpoint whose signature tells FastAPI (for OpenAPI only) the body, its examples and the Accept
    header; ComputeRoute runs the analysis itself."""

    def serve(**_: Any) -> None:
        raise AssertionError("ComputeRoute answers this route")

    body: Any = analysis.request
    if analysis.examples:
        examples: Any = analysis.examples  # OpenAPI Example objects, written as dicts
        body = Annotated[analysis.request, Body(openapi_examples=examples)]
    params = [inspect.Parameter("req", inspect.Parameter.KEYWORD_ONLY, annotation=body)]
    if len(analysis.forms) > 1:
        accept = Annotated[str | None, Header()]
        params.append(inspect.Parameter("accept", inspect.Parameter.KEYWORD_ONLY, annotation=accept, default=None))
    serve.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    serve.__name__ = analysis.client
    serve.__doc__ = analysis.description
    serve.analysis = analysis  # type: ignore[attr-defined]
    return serve


def form_body(paths: tuple[str, ...]) -> dict[str, Any] | None:
    """OpenAPI's multipart/form-data body beside the JSON one, for a route whose body holds an image
    (server/uploads.py): the JSON body as the part `request`, and a file part per image field."""
    if not paths:
        return None
    files = {
        path: {"type": "string", "format": "binary", "description": f"a PNG or JPEG file for `{path}` in the body"}
        for path in paths
    }
    request = {
        "type": "string",
        "contentMediaType": "application/json",
        "description": "the JSON body, as it is sent alone; without the image fields its file parts fill",
    }
    schema = {"type": "object", "required": ["request"], "properties": {"request": request, **files}}
    form = {"schema": schema, "encoding": {"request": {"contentType": "application/json"}}}
    return {"requestBody": {"content": {"multipart/form-data": form}}}


class AnalysisEntry(BaseModel):
    name: str = Field(description="the path under /api/")
    path: str = Field(description='"/api/" + name: POST it the request body')
    client: str = Field(description="attnlab.Client's method for it")
    panel: str | None = Field(description="the page's panel that shows it; null: none")
    summary: str
    forms: list[str] = Field(description="the forms it answers in, by Accept: json, arrays, npz (or html)")


class AnalysesResponse(BaseModel):
    analyses: list[AnalysisEntry] = Field(description="every declared analysis, in declaration order")


def install(app: FastAPI) -> None:
    """The routes of every declared analysis, and GET /api/analyses."""
    compute = APIRouter(prefix="/api", route_class=ComputeRoute)
    for a in declared():
        if a.answer is None:  # its answer is HTML; its errors are JSON, as everywhere under /api
            html: dict[int | str, dict[str, Any]] = {
                200: {"content": {"text/html": {}}, "description": "an HTML file, as an attachment"}
            }
            responses: dict[int | str, dict[str, Any]] = {**errors(*ANY_ROUTE, *BODY, ref=True), **html}
        else:
            responses = {**COMPUTE_ERRORS, **({200: other_forms(a.forms)} if len(a.forms) > 1 else {})}
        compute.add_api_route(
            f"/{a.name}",
            endpoint(a),
            methods=["POST"],
            response_model=a.answer,
            response_class=ORJSONResponse if a.answer is not None else HTMLResponse,
            summary=a.summary,
            description=a.description,
            responses=responses,
            tags=list(a.tags),
            name=a.client,
            openapi_extra=form_body(image_paths(a.request)),
        )
    listing = APIRouter(prefix="/api", tags=["meta"])
    entries = AnalysesResponse.model_validate({"analyses": [a.entry() for a in declared()]})

    @listing.get(
        "/analyses",
        response_model=AnalysesResponse,
        summary="Every analysis this server computes: its path, client method, page panel and answer forms",
        responses=errors(*ANY_ROUTE),
    )
    def list_analyses() -> AnalysesResponse:
        return entries

    app.include_router(listing)
    app.include_router(compute)
