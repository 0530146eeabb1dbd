"""The browser page and the files it needs, all served from this machine (plotly.js from its package)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import fastapi_offline
import plotly
from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.templating import Jinja2Templates

# templates/ and static/ sit beside the server package: in the checkout, and in site-packages once installed
WEB_ROOT = Path(str(importlib.resources.files("server"))).parent
TEMPLATES_DIR = WEB_ROOT / "templates"
STATIC_DIR = WEB_ROOT / "static"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# Swagger UI and ReDoc as files of the installed fastapi-offline package: /docs and /redoc work with no internet
DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
DOCS_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(TEMPLATES_DIR))


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    return templates.TemplateResponse(request, "index.html", {})


@router.get("/vendor/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400"})


@router.get("/vendor/docs/{name}")
def docs_asset(name: str) -> FileResponse:
    if name not in DOCS_FILES:
        raise HTTPException(404)
    return FileResponse(
        DOCS_ASSETS / name, media_type=DOCS_FILES[name], headers={"Cache-Control": "public, max-age=86400"}
    )


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="attnlab · REST API",
        swagger_js_url="/vendor/docs/swagger-ui-bundle.js",
        swagger_css_url="/vendor/docs/swagger-ui.css",
        swagger_favicon_url="/vendor/docs/favicon.png",
    )


@router.get("/redoc", response_class=HTMLResponse)
def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="attnlab · REST API",
        redoc_js_url="/vendor/docs/redoc.standalone.js",
        redoc_favicon_url="/vendor/docs/favicon.png",
        with_google_fonts=False,
    )
