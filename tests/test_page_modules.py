"""The page's modules as files: which view imports what, what the page keeps to itself, how long each file is."""

from __future__ import annotations

import re
from pathlib import Path

JS = Path(__file__).resolve().parent.parent / "static" / "js"
IMPORT = re.compile(r"""(?:from\s+|import\(\s*)["']\./([\w.-]+\.js)["']""")


# The workspaces' table (static/js/workspaces.js) is the one place that says where each view sits and which link keys
# open its workspace, so it names every panel once, as index.html's template does; no other module may.
LAYOUT = "workspaces.js"


def imports_of(name: str) -> set[str]:
    return set(IMPORT.findall((JS / name).read_text(encoding="utf-8")))


def test_views_name_their_actions_from_actions_js_not_the_store() -> None:
    """Only main.js (which builds the store) imports store.js: a view that dispatches takes `act` from actions.js,
    so it draws from any state of the store's shape (the exported file's, with no store at all)."""
    importers = sorted(p.name for p in JS.glob("*.js") if "store.js" in imports_of(p.name))
    assert importers == ["main.js"], importers


def test_an_analysis_panel_is_its_view_module_and_its_template_element() -> None:
    """The scale sweep on the page is static/js/sweep.js (its `panel` declaration: what it asks, its setting in the
    link, how it draws), its data-panel element and its row in the workspaces' table: no other page module names it
    (eight did)."""
    naming = sorted(p.name for p in JS.glob("*.js") if "sweep" in p.read_text(encoding="utf-8").lower())
    assert naming == ["sweep.js", LAYOUT], naming
    templates = JS.parent.parent / "templates"
    marked = [p.name for p in templates.glob("*.html") if 'data-panel="sweep"' in p.read_text(encoding="utf-8")]
    assert marked == ["mechanics.html"], marked


# Naming the cost panel in code: its path, its slot or link key as a string or a field ("cost", cost:, s.ui.cost),
# its measure part's slot, or an identifier built on the word (costOf, fetchCost, COST_FIELDS). Prose that uses the
# word ("costs nothing", the audit's note on "the cost panel's Measure here") names nothing a module must change.
COST_NAMES = re.compile(
    r"""\bcost\w*\s*[:(=]|\.cost\b|[a-z]Cost\b|\bCOST_|["'`]cost["'`.]|/api/cost\b|\./cost\.js"""
    r"""|["']measure["']|panels\.measure\b|\bmeasure:"""
)


def test_the_cost_panel_is_its_view_module_and_its_template_element() -> None:
    """The cost panel (POST /api/cost, with its `measure` part: one layer measured on the server) is static/js/cost.js
    and its data-panel element; ten modules named it (actions, answers, api, busy, cost, mechanics, panels, requests,
    state, store)."""
    naming = sorted(p.name for p in JS.glob("*.js") if COST_NAMES.search(p.read_text(encoding="utf-8")))
    assert naming == ["cost.js", LAYOUT], naming
    templates = JS.parent.parent / "templates"
    marked = [p.name for p in templates.glob("*.html") if 'data-panel="cost"' in p.read_text(encoding="utf-8")]
    assert marked == ["mechanics.html"], marked


# Naming the audit panel in code, as COST_NAMES: its slot as a string ("audit"), the record's field (result.audit),
# an identifier built on the word (auditRequest, renderAudit) or its module.
AUDIT_NAMES = re.compile(r"""\baudit\w*\s*[:(=]|\.audit\b|[a-z]Audit\b|["'`]audit["'`]|\./audit\.js""")


def test_the_audit_panel_is_its_view_module_and_its_template_element() -> None:
    """The audit record (POST /api/attention with include ["audit"], downloaded as JSON) is static/js/audit.js and its
    data-panel element; seven modules named it (answers, audit, busy, mechanics, panels, requests, store)."""
    naming = sorted(p.name for p in JS.glob("*.js") if AUDIT_NAMES.search(p.read_text(encoding="utf-8")))
    assert naming == ["audit.js", LAYOUT], naming
    templates = JS.parent.parent / "templates"
    marked = [p.name for p in templates.glob("*.html") if 'data-panel="audit"' in p.read_text(encoding="utf-8")]
    assert marked == ["mechanics.html"], marked
