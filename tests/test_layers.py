"""Which top-level package may import which, read from the sources with ast (no import runs):

- engine/ (the maths) imports none of server, attnlab, wire;
- server/ (the web layer) imports engine and wire, never attnlab (the client, which imports server for
  attnlab.run and attnlab.show: the other way round would be a cycle);
- wire/ (the arrays form and the standalone export, shared by both) imports none of engine, server, attnlab;

and, within them, no module imports one that imports it back: modules stand in data-flow order.
"""

from __future__ import annotations

import ast
from pathlib import Path

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


# --- no module imports one that imports it back ---

PRODUCT = ("engine", "server", "wire", "attnlab")


def module_sources(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """Every module of the product by dotted name: (its source, whether it is a package's __init__)."""
    found = {}
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if package else parts)] = (path.read_text(encoding="utf-8"), package)
    return found


def import_graph(modules: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the product's modules it imports, wherever the import statement is (in a function, under
    TYPE_CHECKING: a circle hidden in a function is still a circle). `from a import b` is an import of the module
    a.b when there is one, else of a; an import of a module is also one of every package above it (Python runs a
    package's __init__ before any module in it), except the importer's own packages, which are running already."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (source, package) in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importer's package, one level up per extra dot
                    here = name.split(".") if package else name.split(".")[:-1]
                    base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        found = {m for t in targets if (m := known(t)) is not None}
        parents = {m.rsplit(".", i)[0] for m in found for i in range(1, m.count(".") + 1)}
        own = {name.rsplit(".", i)[0] for i in range(0 if package else 1, name.count(".") + 1)}
        graph[name] = (found | {p for p in parents if p in modules and p not in own}) - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that reach one another through imports (the graph's strongly connected components of
    more than one module), as one shortest way around it from its first module, sorted."""
    found = []
    seen: set[str] = set()
    for start in sorted(graph):
        if start in seen:
            continue
        reach = _reachable(graph, start)
        group = sorted(m for m in reach if start in _reachable(graph, m))
        seen |= set(group)
        if len(group) > 1:
            found.append(_way_around(graph, start, set(group)))
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    out, todo = {start}, [start]
    while todo:
        for m in graph.get(todo.pop(), ()):
            if m not in out:
                out.add(m)
                todo.append(m)
    return out


def _way_around(graph: dict[str, set[str]], start: str, group: set[str]) -> list[str]:
    """The shortest import path from `start` back to itself within its group: start -> ... -> start."""
    paths = [[start]]
    while paths:
        path = paths.pop(0)
        for m in sorted(graph[path[-1]] & group):
            if m == start:
                return [*path, start]
            if m not in path:
                paths.append([*path, m])
    raise AssertionError(f"{start} is in no circle")


def test_no_module_imports_one_that_imports_it_back() -> None:
    """Modules in data-flow order: no module of engine, server, wire or attnlab imports (directly or through
    others, at the top or inside a function) one that imports it back."""
    found = circles(import_graph(module_sources()))
    assert found == [], "\n".join(" -> ".join(way) for way in found)


def test_the_circle_check_sees_the_circles_it_was_written_for() -> None:
    """The negative control: circles of the tree before they were opened, each cut down to its imports, are each
    found, made of the relative, lazy and TYPE_CHECKING imports they were made of; cut one way, they are gone."""
    before = {
        "engine": ("", True),
        "engine.interventions": ("if TYPE_CHECKING:\n    from engine.forward import ForwardResult\n", False),
        "engine.forward": ("from engine.interventions import Interventions\n", False),
        "engine.analysis": ("", True),
        "engine.analysis.perturb": ("def perturb():\n    from .perturb_batch import perturb_batch\n", False),
        "engine.analysis.perturb_batch": ("from engine.analysis.perturb import Change\n", False),
        "server": ("", True),
        "server.config": ("def read_declared():\n    from server.analyses import declared_limits\n", False),
        "server.analyses": ("from server.declare import Analysis\n", True),
        "server.declare": ("from server.config import Settings\n", False),
        "engine.models": ("", True),
        "engine.models.families": ("def registry():\n    from engine.models.families import bert\n", True),
        "engine.models.families.bert": ("from engine.models.families import Config\n", False),
        "wire": ("import engine.forward\n", True),  # a package importing a module: no way back
    }
    assert circles(import_graph(before)) == [
        ["engine.analysis.perturb", "engine.analysis.perturb_batch", "engine.analysis.perturb"],
        ["engine.forward", "engine.interventions", "engine.forward"],
        ["engine.models.families", "engine.models.families.bert", "engine.models.families"],
        ["server.analyses", "server.declare", "server.config", "server.analyses"],
    ]
    one_way = {**before, "engine.interventions": ("", False), "server.config": ("", False)}
    one_way["engine.models.families"] = ("", True)
    assert circles(import_graph(one_way)) == [
        ["engine.analysis.perturb", "engine.analysis.perturb_batch", "engine.analysis.perturb"]
    ]


def test_the_attention_route_leaves_checks_and_parts_to_the_plan_and_the_include_table() -> None:
    """POST /api/attention's route makes one plan (every check, before the run), runs it, and has the answer made
    from server/serialize.py's INCLUDE table, whose rows make each part: the route imports none of the engine's
    analyses (the audit, flow and stats are rows' makers) and none of the budgets (their checks are the plan's, or
    an item's own declared bound)."""
    route = module_sources()["server.analyses.attention"][0]
    graph = import_graph({"server.analyses.attention": (route, False), **module_sources()})
    reached = {m for m in graph["server.analyses.attention"] if m.startswith(("engine.analysis", "server.budgets"))}
    assert reached == set()
