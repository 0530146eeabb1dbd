"""The browser page and the files it needs, all served from this machine (plotly.js from its package)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.resources
import json
import mimetypes
import threading
from pathlib import Path

import fastapi_offline
import plotly
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from server.errors import ApiError
from wire.standalone import PAGE_STYLESHEETS

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

# The Content-Security-Policy of every response (server/app.py Hardening). The page loads only its own files; its
# one inline script, the import map, is allowed by its hash (page_csp); plotly adds <style> elements, hence the
# inline styles. Swagger UI and ReDoc (/docs, /redoc) start from files too (static/js/docs.js, ReDoc's own <redoc>
# element); they style with inline styles and ReDoc searches in a blob worker.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(TEMPLATES_DIR))

COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")
# The page names its own files with a digest of their content (?v=, see asset_url): such a URL never changes what it
# holds, so the browser keeps it without asking again. Under a bare name a browser asks each time (a 304 while
# unchanged). Files of an installed package change only with its version and may be kept for a day.
OWN = "no-cache"
OWN_VERSIONED = "public, max-age=31536000, immutable"
VENDOR = "public, max-age=86400"
_digests: dict[tuple[Path, int, int], str] = {}
_gzipped: dict[tuple[Path, int, int], bytes] = {}
_gzip_lock = threading.Lock()


MAX_NAME = 1024  # characters in a file's name under /static or /vendor/docs; the longest served is 22


def no_such_file(name: str) -> ApiError:
    shown = repr(name[:80]) + (f"... ({len(name)} characters)" if len(name) > 80 else "")
    return ApiError(404, "not_found", f"no such file: {shown}", "path")


# What attnlab changes in a vendor file as it serves it: ReDoc's sidebar draws Redocly's logo from Redocly's CDN,
# which the Content-Security-Policy refuses (and no request leaves this machine); "data:," fails to load as an
# image, and ReDoc then leaves the logo out (its onError).
REWRITES = {"redoc.standalone.js": (b'src:"https://cdn.redoc.ly/redoc/logo-mini.svg"', b'src:"data:,"')}
_rewritten: dict[tuple[Path, int, int], bytes] = {}


def served_file(path: Path, request: Request, cache_control: str, media_type: str | None = None) -> Response:
    """A file with an ETag and Cache-Control: a 304 when the browser has it, gzipped (once, then kept) when the
    browser takes gzip and the type compresses; rewritten (REWRITES, once, then kept) where attnlab changes it."""
    try:
        st = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the name
        raise no_such_file(path.name) from None
    kind = media_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind in ("text/javascript", "application/javascript", "text/css", "text/html"):
        kind += "; charset=utf-8"
    rewrite = REWRITES.get(path.name)
    etag = f'"{st.st_mtime_ns:x}-{st.st_size:x}{"-r" if rewrite else ""}"'
    headers = {"ETag": etag, "Cache-Control": cache_control, "Vary": "Accept-Encoding"}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    key = (path, st.st_mtime_ns, st.st_size)
    gzip_ok = "gzip" in request.headers.get("accept-encoding", "")
    if not gzip_ok or not kind.startswith(COMPRESSIBLE) or st.st_size < 1024:
        if rewrite is None:
            return FileResponse(path, media_type=kind, headers=headers)
        return Response(rewritten(path, key, rewrite), media_type=kind, headers=headers)
    with _gzip_lock:
        body = _gzipped.get(key)
        if body is None:
            plain = path.read_bytes() if rewrite is None else rewritten(path, key, rewrite)
            body = gzip.compress(plain, compresslevel=9, mtime=0)
            _gzipped[key] = body
    return Response(body, media_type=kind, headers={**headers, "Content-Encoding": "gzip"})


def rewritten(path: Path, key: tuple[Path, int, int], rewrite: tuple[bytes, bytes]) -> bytes:
    body = _rewritten.get(key)
    if body is None:
        body = _rewritten[key] = path.read_bytes().replace(*rewrite)
    return body


# Scripts the page never imports: the standalone viewer of an exported file (wire/standalone.py inlines it), and
# the start-up of Swagger UI on /docs.
NOT_PAGE_MODULES = {"standalone.js", "docs.js"}


def page_modules() -> list[str]:
    """Every ES module of the page, preloaded by index.html: the browser fetches them at once instead of finding
    them one import level at a time (main.js, then store.js, then the views it imports...)."""
    return sorted(p.name for p in (STATIC_DIR / "js").glob("*.js") if p.name not in NOT_PAGE_MODULES)


def digest(path: Path) -> str:
    """The first 12 hex digits of the file's SHA-256, kept per (path, mtime, size)."""
    st = path.stat()
    key = (path, st.st_mtime_ns, st.st_size)
    got = _digests.get(key)
    if got is None:
        got = _digests[key] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return got


def asset_url(name: str) -> str:
    """/static/NAME?v=DIGEST: a URL that changes whenever the file does."""
    return f"/static/{name}?v={digest(STATIC_DIR / name)}"


def module_urls() -> dict[str, str]:
    """Each page module's bare URL (what `import "./x.js"` resolves to) and its versioned one: the page's import map,
    so that modules import each other by name and the browser still fetches, and keeps, the URL of their content."""
    return {f"/static/js/{m}": asset_url(f"js/{m}") for m in page_modules()}


def page_csp(inline_script: str) -> str:
    """The page's Content-Security-Policy with its one inline script (the import map) allowed by its hash."""
    sha = base64.b64encode(hashlib.sha256(inline_script.encode()).digest()).decode()
    return PAGE_CSP.replace("script-src 'self'", f"script-src 'self' 'sha256-{sha}'", 1)


@router.get("/", response_class=HTMLResponse)
def index(request: Request) -> Response:
    urls = module_urls()
    imports = json.dumps({"imports": urls}, separators=(",", ":"))
    page = {
        "importmap": imports,
        "main": urls["/static/js/main.js"],
        "stylesheets": [asset_url(f"css/{name}") for name in PAGE_STYLESHEETS],
        "preloads": list(urls.values()),
    }
    response = templates.TemplateResponse(request, "index.html", page)
    response.headers["Content-Security-Policy"] = page_csp(imports)
    return response


def file_under(root: Path, name: str) -> Path:
    """root/name when that is a file inside root; a 404 naming the path otherwise (outside root, a NUL, a name
    too long for the file system)."""
    if len(name) > MAX_NAME or "\0" in name:
        raise no_such_file(name)
    try:
        path = (root / name).resolve()
        if path.is_relative_to(root.resolve()) and path.is_file():
            return path
    except (OSError, ValueError):
        pass
    raise no_such_file(name)


@router.get("/static/{name:path}")
def static_file(name: str, request: Request) -> Response:
    path = file_under(STATIC_DIR, name)
    versioned = request.query_params.get("v") == digest(path)
    return served_file(path, request, OWN_VERSIONED if versioned else OWN)


@router.get("/vendor/plotly.min.js")
def plotly_js(request: Request) -> Response:
    return served_file(PLOTLY_JS, request, VENDOR, "text/javascript")


@router.get("/vendor/docs/{name}")
def docs_asset(name: str, request: Request) -> Response:
    if name not in DOCS_FILES:
        raise no_such_file(name)
    return served_file(DOCS_ASSETS / name, request, VENDOR, DOCS_FILES[name])


@router.get("/docs", response_class=HTMLResponse)
def swagger_ui(request: Request) -> Response:
    page = {
        "css": "/vendor/docs/swagger-ui.css",
        "bundle": "/vendor/docs/swagger-ui-bundle.js",
        "start": asset_url("js/docs.js"),
    }
    return templates.TemplateResponse(request, "docs.html", page)


@router.get("/redoc", response_class=HTMLResponse)
def redoc(request: Request) -> Response:
    return templates.TemplateResponse(request, "redoc.html", {"bundle": "/vendor/docs/redoc.standalone.js"})
