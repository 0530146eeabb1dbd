"""Which top-level package may import which, read from the sources with ast (no import runs):

- engine/ (the maths) imports none of server, attnlab, wire;
- server/ (the web layer) imports engine and wire, never attnlab (the client, which imports server for
  attnlab.run and attnlab.show: the other way round would be a cycle);
- wire/ (the arrays form and the standalone export, shared by both) imports none of engine, server, attnlab.
"""

from __future__ import annotations

import ast

import pytest

from tests.helpers import ROOT

FIRST_PARTY = {"attnlab", "engine", "server", "wire", "bench", "tests"}
MAY_NOT = {
    "engine": {"server", "attnlab", "wire", "bench", "tests"},
    "server": {"attnlab", "bench", "tests"},
    "wire": {"engine", "server", "attnlab", "bench", "tests"},
}


def imported_packages(source: str) -> set[str]:
    """The first-party top-level packages that `source` imports, wherever the import statement is (in a function,
    under TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found |= {name.split(".")[0] for name in names} & FIRST_PARTY
    return found


@pytest.mark.parametrize("package", sorted(MAY_NOT))
def test_package_imports_only_the_layers_below_it(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    wrong = {
        f"{path.relative_to(ROOT)}: {sorted(bad)}"
        for path in files
        if (bad := imported_packages(path.read_text(encoding="utf-8")) & MAY_NOT[package])
    }
    assert not wrong, sorted(wrong)


@pytest.mark.parametrize(
    ("source", "want"),
    [
        ("import attnlab", {"attnlab"}),
        ("from attnlab.arrays import MAGIC", {"attnlab"}),
        ("def f():\n    import attnlab.local as local\n", {"attnlab"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from wire import arrays\n", {"wire"}),
        ("from . import forms\nimport numpy, orjson", set()),
    ],
)
def test_imported_packages_finds_every_first_party_import(source: str, want: set[str]) -> None:
    assert imported_packages(source) == want


def test_the_check_catches_an_attnlab_import_in_server() -> None:
    """The negative control: the server sources as they were before wire/ (server/forms.py read the arrays form's
    MAGIC from attnlab.arrays) fail the check."""
    before = "from attnlab.arrays import MAGIC, MEDIA_TYPE\nfrom engine import progress\n"
    assert imported_packages(before) & MAY_NOT["server"] == {"attnlab"}


SOURCE_DIRS = ("engine", "server", "attnlab", "wire", "bench", "static", "templates")
SOURCE_SUFFIXES = {".py", ".js", ".css", ".html"}
MAX_LINES = 400


def test_no_source_file_is_over_400_lines() -> None:
    """Every source file of the product and its benchmarks (Python, the page's modules, stylesheets and templates)
    stays under MAX_LINES lines: past that a file holds more than one job."""
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for top in SOURCE_DIRS
        for path in (ROOT / top).rglob("*")
        if path.suffix in SOURCE_SUFFIXES
        and "__pycache__" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, long
