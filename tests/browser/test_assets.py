"""What / and its files are made of: every hook in place, plotly from the installed package, nothing from elsewhere."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import plotly
import pytest
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
HOOKS = [
    "sequence-input",
    "model-select",
    "run-button",
    "mask-causal",
    "error-banner",
    "retrieval-diagram",
    "layer-select",
]
EXTERNAL = re.compile(
    r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|@import|url\(\s*["']?(?:https?:)?//|fonts\.googleapis"""
)


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each checks only the answers to its own requests."""
    return shared_client()


def test_index_has_every_hook_and_loads_only_local_files(client: TestClient) -> None:
    resp = client.get("/", headers={"accept": "text/html"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    html = resp.text
    for hook in HOOKS:
        assert f'data-testid="{hook}"' in html, hook
    assert '<link rel="preload" href="/vendor/plotly.min.js" as="script">' in html  # run by plotly.js
    assert re.search(r'<script type="module" src="/static/js/main\.js\?v=[0-9a-f]{12}">', html)
    assert not EXTERNAL.search(html)


def test_index_preloads_every_module_the_page_loads(client: TestClient) -> None:
    """Every module main.js reaches (its imports, and the views it imports by data-view, transitively) is
    preloaded, so the browser asks for them at once; the export's standalone viewer is not."""
    html = client.get("/").text
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/js/([\w-]+\.js)\?v=[0-9a-f]{12}">', html))
    todo = ["main.js", *(f"{v}.js" for v in re.findall(r'data-view="([\w-]+)"', html))]
    reached: set[str] = set()
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo += re.findall(r'from "\./([\w-]+\.js)"', (ROOT / "static" / "js" / name).read_text())
    assert len(reached) > 20 and reached <= preloaded, sorted(reached - preloaded)
    assert "standalone.js" not in preloaded


def test_the_page_names_its_files_by_content_and_the_browser_keeps_them(client: TestClient) -> None:
    """Each module's URL carries a digest of its content, mapped from its bare name by the page's import map (the
    one inline script, allowed by its hash in the CSP): a versioned URL is kept without asking, a bare one is not."""
    resp = client.get("/")
    html = resp.text
    found = re.search(r'<script type="importmap">(.*?)</script>', html, re.S)
    assert found
    text = found.group(1)
    imports = json.loads(text)["imports"]
    sha = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    assert f"'sha256-{sha}'" in resp.headers["content-security-policy"]
    assert "'unsafe-inline'" not in resp.headers["content-security-policy"].split("script-src")[1].split(";")[0]
    preloads = re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)
    assert sorted(imports.values()) == sorted(preloads) and len(imports) > 20
    for bare, url in imports.items():
        path, version = url.split("?v=")
        assert path == bare and version == hashlib.sha256((ROOT / bare.lstrip("/")).read_bytes()).hexdigest()[:12]
    url = imports["/static/js/main.js"]
    assert client.get(url).headers["cache-control"] == "public, max-age=31536000, immutable"
    assert client.get("/static/js/main.js").headers["cache-control"] == "no-cache"
    assert client.get("/static/js/main.js?v=000000000000").headers["cache-control"] == "no-cache"  # not its content
    css = re.search(r'<link rel="stylesheet" href="(/static/css/attnlab\.css\?v=[0-9a-f]{12})">', html)
    assert css and "immutable" in client.get(css.group(1)).headers["cache-control"]


def test_plotly_is_served_from_the_installed_package(client: TestClient) -> None:
    resp = client.get("/vendor/plotly.min.js")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/javascript")
    assert resp.content == (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


def test_static_files_are_served_and_reference_nothing_outside(client: TestClient) -> None:
    files = sorted((ROOT / "static").rglob("*.js")) + sorted((ROOT / "static").rglob("*.css"))
    assert len(files) >= 10
    for f in files:
        rel = f.relative_to(ROOT / "static").as_posix()
        resp = client.get(f"/static/{rel}")
        assert resp.status_code == 200, rel
        text = f.read_text()
        assert not EXTERNAL.search(text), rel
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text, rel
