"""The browser page and the files it needs, all served from this machine (plotly.js from its package)."""

from __future__ import annotations

import gzip
import importlib.resources
import mimetypes
import threading
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

COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
# The page's own files have fixed names, so a browser asks again each time (a 304 while unchanged); files of an
# installed package change only with its version and may be kept for a day.
OWN = "no-cache"
VENDOR = "public, max-age=86400"
_gzipped: dict[tuple[Path, int, int], bytes] = {}
_gzip_lock = threading.Lock()


def served_file(path: Path, request: Request, cache_control: str, media_type: str | None = None) -> Response:
    """A file with an ETag and Cache-Control: a 304 when the browser has it, gzipped (once, then kept) when the
    browser takes gzip and the type compresses."""
    try:
        st = path.stat()
    except OSError:
        raise HTTPException(404) from None
    kind = media_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind in ("text/javascript", "application/javascript", "text/css", "text/html"):
        kind += "; charset=utf-8"
    etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}"'
    headers = {"ETag": etag, "Cache-Control": cache_control, "Vary": "Accept-Encoding"}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    gzip_ok = "gzip" in request.headers.get("accept-encoding", "")
    if not gzip_ok or not kind.startswith(COMPRESSIBLE) or st.st_size < 1024:
        return FileResponse(path, media_type=kind, headers=headers)
    key = (path, st.st_mtime_ns, st.st_size)
    with _gzip_lock:
        body = _gzipped.get(key)
        if body is None:
            body = gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)
            _gzipped[key] = body
    return Response(body, media_type=kind, headers={**headers, "Content-Encoding": "gzip"})


# Modules the page never imports: the standalone viewer of an exported file (attnlab/standalone.py inlines it).
NOT_PAGE_MODULES = {"standalone.js"}


def page_modules() -> list[str]:
    """Every ES module of the page, preloaded by index.html: the browser fetches them at once instead of finding
    them one import level at a time (main.js, then store.js, then the views it imports...)."""
    return sorted(p.name for p in (STATIC_DIR / "js").glob("*.js") if p.name not in NOT_PAGE_MODULES)


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    return templates.TemplateResponse(request, "index.html", {"modules": page_modules()})


@router.get("/static/{name:path}")
def static_file(name: str, request: Request) -> Response:
    path = (STATIC_DIR / name).resolve()
    if not path.is_relative_to(STATIC_DIR.resolve()) or not path.is_file():
        raise HTTPException(404)
    return served_file(path, request, OWN)


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    return served_file(PLOTLY_JS, request, VENDOR, "text/javascript")


@router.get("/vendor/docs/{name}")
def docs_asset(name: str, request: Request) -> Response:
    if name not in DOCS_FILES:
        raise HTTPException(404)
    return served_file(DOCS_ASSETS / name, request, VENDOR, DOCS_FILES[name])


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
