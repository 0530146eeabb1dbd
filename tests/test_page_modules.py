"""The page's modules as files: which view imports what, what the page keeps to itself, how long each file is."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parent.parent / "static" / "js"
IMPORT = re.compile(r"""(?:from\s+|import\(\s*)["']\./([\w.-]+\.js)["']""")


def imports_of(name: str) -> set[str]:
    return set(IMPORT.findall((JS / name).read_text(encoding="utf-8")))


def test_views_name_their_actions_from_actions_js_not_the_store() -> None:
    """Only main.js (which builds the store) imports store.js: a view that dispatches takes `act` from actions.js,
    so it draws from any state of the store's shape (the exported file's, with no store at all)."""
    importers = sorted(p.name for p in JS.glob("*.js") if "store.js" in imports_of(p.name))
    assert importers == ["main.js"], importers


def test_no_page_module_is_over_400_lines() -> None:
    long = {p.name: n for p in JS.glob("*.js") if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert long == {}, long
