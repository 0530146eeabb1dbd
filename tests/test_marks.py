"""The suite's marks are right: every test that drives Chromium is marked `browser`, so `make test-quick`
(`-m "not slow and not browser"`) never starts it.

Read from the test files' source: a test drives Chromium when it asks for one of the browser fixtures, directly or
through a fixture of its own module that does."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent
# pytest-playwright's fixtures and tests/browser/conftest.py's fixtures built on them
BROWSER_FIXTURES = frozenset(
    {"page", "browser", "context", "js", "open_page", "open_trained", "page_log", "run_and_wait", "phone_at"}
)


def _marks(decorators: list[ast.expr]) -> set[str]:
    """The names of the `pytest.mark.<name>` marks among decorators (called or not)."""
    names = set()
    for d in decorators:
        target = d.func if isinstance(d, ast.Call) else d
        if not isinstance(target, ast.Attribute):
            continue
        owner = target.value
        if isinstance(owner, ast.Attribute) and owner.attr == "mark":
            names.add(target.attr)
    return names


def _module_marks(tree: ast.Module) -> set[str]:
    """The marks of `pytestmark = pytest.mark.x` or `pytestmark = [pytest.mark.x, ...]`."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets):
            value = stmt.value
            return _marks(list(value.elts) if isinstance(value, ast.List | ast.Tuple) else [value])
    return set()


def unmarked_browser_tests(source: str) -> list[str]:
    """The tests of one module that ask for a browser fixture and are not marked `browser`."""
    tree = ast.parse(source)
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef)]
    for cls in (s for s in tree.body if isinstance(s, ast.ClassDef)):
        functions += [s for s in cls.body if isinstance(s, ast.FunctionDef)]
    drives = set(BROWSER_FIXTURES)
    fixtures = [f for f in functions if any("fixture" in ast.unparse(d) for d in f.decorator_list)]
    changed = True
    while changed:  # a module's own fixture built on a browser fixture drives Chromium too
        changed = False
        for f in fixtures:
            if f.name not in drives and {a.arg for a in f.args.args} & drives:
                drives.add(f.name)
                changed = True
    module_marked = "browser" in _module_marks(tree)
    return [
        f.name
        for f in functions
        if f.name.startswith("test")
        and {a.arg for a in f.args.args} & drives
        and not module_marked
        and "browser" not in _marks(f.decorator_list)
    ]


def test_every_test_that_drives_chromium_is_marked_browser() -> None:
    found = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("test_*.py"))
        if (names := unmarked_browser_tests(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"mark these browser tests with pytest.mark.browser: {found}"


def test_the_mark_check_sees_an_unmarked_test_and_its_fixtures() -> None:
    """The negative control: a test asking for a page, directly or through a fixture of its module, is seen."""
    source = """
import pytest

@pytest.fixture
def opened(open_page):
    return open_page()

def test_direct(page): ...
def test_through(opened): ...
def test_plain(client): ...
@pytest.mark.browser
def test_marked(page): ...
"""
    assert unmarked_browser_tests(source) == ["test_direct", "test_through"]
    assert unmarked_browser_tests("import pytest\npytestmark = [pytest.mark.browser]\n" + source) == []
