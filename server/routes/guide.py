"""The guide at /guide: the MkDocs site `make docs` builds from docs/ into guide/, served from this machine, so a
class without internet reads it. It ships in the wheel beside templates/ and static/; where it was never built, a
page says how to build it."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from server.errors import error_page
from server.routes.pages import OWN, WEB_ROOT, file_under, served_file

GUIDE_DIR = WEB_ROOT / "guide"

# The guide's pages start Material's scripts from files, plus a few short inline scripts of their own (the theme's
# stored choices), each allowed by its hash; the search runs in a worker of the guide's own files.
GUIDE_CSP = (
    "default-src 'self'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "worker-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
INLINE_SCRIPT = re.compile(rb"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.DOTALL)
_csps: dict[tuple[Path, int, int], str] = {}

router = APIRouter(include_in_schema=False)


def not_built() -> HTMLResponse:
    body = (
        "<p>The guide of this attnlab has not been built. In the checkout, build it with</p>"
        "<pre>make docs</pre>"
        "<p>(it installs MkDocs and the Material theme from the <code>docs</code> extra and writes the site into "
        "<code>guide/</code>); <code>make run</code> builds it before it starts the server. The same pages are in "
        "<code>docs/</code> as Markdown.</p>"
    )
    return HTMLResponse(error_page(404, body, title="The guide is not built"), status_code=404)


def guide_csp(path: Path) -> str:
    """GUIDE_CSP with the page's inline scripts allowed by their hashes, kept per (path, mtime, size)."""
    st = path.stat()
    key = (path, st.st_mtime_ns, st.st_size)
    csp = _csps.get(key)
    if csp is None:
        digests = (hashlib.sha256(s).digest() for s in INLINE_SCRIPT.findall(path.read_bytes()))
        hashes = "".join(f" 'sha256-{base64.b64encode(d).decode()}'" for d in digests)
        csp = _csps[key] = GUIDE_CSP.format(hashes=hashes)
    return csp


@router.get("/guide")
def guide_root() -> Response:
    return RedirectResponse("/guide/", status_code=308)


@router.get("/guide/{name:path}")
def guide_file(name: str, request: Request) -> Response:
    if not (GUIDE_DIR / "index.html").is_file():
        return not_built()
    path = file_under(GUIDE_DIR, name or "index.html")
    response = served_file(path, request, OWN)
    if path.suffix == ".html":
        response.headers["Content-Security-Policy"] = guide_csp(path)
    return response
