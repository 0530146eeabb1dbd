"""The guide: a short README that points to it, and the built site served at /guide with its inline scripts allowed
by their hashes, or a page saying how to build it where it is not built (never a 500)."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.routes import guide
from tests.helpers import ROOT, assert_error

README_LIMIT = 15 * 1024  # bytes


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    """The fast models' app, shared by the module's tests: each reads only its own answers, and the guide's folder
    (which a test points elsewhere) is read on each request, not when the app is built."""
    return shared_client()


def test_the_readme_is_short_and_points_to_the_guide() -> None:
    readme = (ROOT / "README.md").read_bytes()
    assert len(readme) <= README_LIMIT, f"README.md is {len(readme):,} bytes, the limit is {README_LIMIT:,}"
    text = readme.decode()
    assert "make run" in text and "make test" in text and "/guide" in text
    pages = re.findall(r"\]\((docs/[\w-]+\.md)\)", text)
    assert len(set(pages)) >= 7 and all((ROOT / p).is_file() for p in pages), pages


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A guide of one page with an inline script, where the server reads the guide."""
    (tmp_path / "index.html").write_text(
        "<!doctype html><title>guide</title><script>var a = 1;</script>"
        '<script id="__config" type="application/json">{}</script><script src="assets/app.js"></script>'
    )
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "app.js").write_text("console.log(1);\n")
    monkeypatch.setattr(guide, "GUIDE_DIR", tmp_path)
    return tmp_path


def test_the_guide_is_served_with_its_inline_scripts_allowed_by_hash(built: Path, client: TestClient) -> None:
    moved = client.get("/guide", follow_redirects=False)
    assert moved.status_code == 308 and moved.headers["location"] == "/guide/"  # its pages link relative to /guide/
    page = client.get("/guide/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    scripts = page.headers["content-security-policy"].split("script-src")[1].split(";")[0].split()
    inline = base64.b64encode(hashlib.sha256(b"var a = 1;").digest()).decode()
    assert scripts[0] == "'self'" and f"'sha256-{inline}'" in scripts and "'unsafe-inline'" not in scripts
    assert client.get("/guide/index.html").content == page.content
    asset = client.get("/guide/assets/app.js")
    assert asset.status_code == 200 and asset.headers["cache-control"] == "no-cache"
    assert client.get("/guide/nope.html").status_code == 404
    assert client.get("/guide/../server/app.py").status_code == 404
    assert client.get("/guide/%2e%2e/server/app.py").status_code == 404


def test_a_guide_not_built_is_a_page_saying_how_to_build_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: TestClient
) -> None:
    monkeypatch.setattr(guide, "GUIDE_DIR", tmp_path / "guide")
    for path in ("/guide/", "/guide/api.html"):
        resp = client.get(path, headers={"accept": "text/html"})
        assert resp.status_code == 404 and resp.headers["content-type"].startswith("text/html")
        assert "make docs" in resp.text and "not been built" in resp.text


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/guide/index.html%00", ["no such file"]),
        ("/guide/%00", ["no such file"]),
        ("/guide/" + "a" * 5000, ["5000 characters"]),
        ("/guide/..%2f..%2fpyproject.toml", ["no such file"]),
        ("/guide/assets", ["no such file"]),
    ],
    ids=["NUL in a name", "NUL only", "5000 long", "outside its folder", "a folder"],
)
def test_a_hostile_guide_path_is_a_named_404(built: Path, client: TestClient, path: str, words: list[str]) -> None:
    resp = client.get(path)
    assert_error(resp, 404, "path", *words)
    assert len(resp.content) < 2000
