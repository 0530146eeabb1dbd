"""What / and its files are made of: every hook in place, plotly from the installed package, nothing from elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import plotly
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


def test_index_has_every_hook_and_loads_only_local_files(client: TestClient) -> None:
    resp = client.get("/", headers={"accept": "text/html"})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    html = resp.text
    for hook in HOOKS:
        assert f'data-testid="{hook}"' in html, hook
    assert '<link rel="preload" href="/vendor/plotly.min.js" as="script">' in html  # run by plotly.js
    assert '<script type="module" src="/static/js/main.js">' in html
    assert not EXTERNAL.search(html)


def test_index_preloads_every_module_the_page_loads(client: TestClient) -> None:
    """Every module main.js reaches (its imports, and the views it imports by data-view, transitively) is
    preloaded, so the browser asks for them at once; the export's standalone viewer is not."""
    html = client.get("/").text
    preloaded = set(re.findall(r'<link rel="modulepreload" href="/static/js/([\w-]+\.js)">', html))
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
