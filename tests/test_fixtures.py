"""The suite starts each server configuration in one place: two calls that start `attnlab serve` with the same models
and settings are one configuration started twice, which belongs in tests/fixtures.py as a shared server."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import fixtures
from tests.fixtures import SERVERS
from tests.helpers import ROOT

STARTERS = {"serve", "serve_process", "serve_on"}  # tests/helpers.py: each starts an `attnlab serve` process


def spelled(node: ast.expr, constants: dict[str, ast.expr]) -> str:
    """An argument as the source spells it, a module constant read through and an f-string's holes left blank (a
    checkpoint directory made for one module is the same configuration as one made for another)."""
    if isinstance(node, ast.Name) and node.id in constants:
        return spelled(constants[node.id], constants)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return ast.unparse(node)


def starts(source: str) -> list[tuple[int, str]]:
    """Each call in `source` that starts a server: its line and its configuration (arguments and keywords)."""
    tree = ast.parse(source)
    constants = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in STARTERS:
            args = [spelled(a, constants) for a in node.args]
            keywords = sorted(f"{k.arg or '**'}={spelled(k.value, constants)}" for k in node.keywords)
            found.append((node.lineno, f"{node.func.id}({', '.join(args + keywords)})"))
    return found


def repeated(files: list[Path], root: Path) -> dict[str, list[str]]:
    """The configurations started by more than one call in `files`, with where each call is."""
    where: dict[str, list[str]] = {}
    for path in files:
        for line, config in starts(path.read_text()):
            where.setdefault(config, []).append(f"{path.relative_to(root)}:{line}")
    return {config: places for config, places in where.items() if len(places) > 1}


def test_no_server_configuration_is_started_in_two_places() -> None:
    assert repeated(sorted((ROOT / "tests").rglob("*.py")), ROOT) == {}


def test_a_configuration_started_twice_is_found(tmp_path: Path) -> None:
    """The negative control: two modules that each start a server with a checkpoint of their own as `mine`, and two
    calls that spell the same models once through a constant; a different setting is another configuration."""
    (tmp_path / "one.py").write_text('def f(d):\n    with serve(f"textbook,mine={d}") as base:\n        pass\n')
    (tmp_path / "two.py").write_text(
        'def g(x):\n    with serve(f"textbook,mine={x}", ATTNLAB_MAX_TOKENS="512"):\n'
        '        pass\n    with serve(f"textbook,mine={x}"):\n        pass\n'
    )
    (tmp_path / "three.py").write_text('M = "a,b"\nserve(M, **LIMITS)\nserve("a,b", **LIMITS)\nserve("a,b")\n')
    files = sorted(tmp_path.glob("*.py"))
    assert repeated(files, tmp_path) == {
        "serve(textbook,mine={})": ["one.py:2", "two.py:4"],
        "serve(a,b, **=LIMITS)": ["three.py:2", "three.py:3"],
    }


def test_every_named_server_has_its_session_fixture() -> None:
    assert {name for name in SERVERS if not hasattr(fixtures, f"{name}_server")} == set()
