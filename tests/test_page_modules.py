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


# The views that own their root: each draws into (and binds to) the element it is given, looking its parts up inside
# it (dom.js `within`), so it draws the same into a copy of its markup anywhere (tests/browser/test_view_roots.py
# draws each into a root outside the document). Every view of the templates is one. The page-level modules of
# PAGE_LEVEL own the whole document and may look elements up in it; a view may not, and what spans several views is
# one of them: the drawer the controls become on a phone, a failed run's message beside the control it names, bringing
# a panel into sight (the start path's steps, its jump row, an example's answer), the page's one tooltip.
OWN_ROOT = [
    "audit",
    "blockwise",
    "bugs",
    "busy",
    "contrast",
    "controls",
    "cost",
    "counting",
    "deepzoom",
    "dtype",
    "eligibility",
    "errors",
    "experiments",
    "exporter",
    "flow",
    "focus",
    "heads",
    "headtypes",
    "lesson",
    "maskcontrols",
    "mechanics",
    "moreinputs",
    "numbers",
    "overview",
    "palette",
    "patch",
    "qkterms",
    "retrieval",
    "rollout",
    "scoring",
    "serverinfo",
    "sinks",
    "start",
    "stats",
    "sweep",
    "tokens",
    "tophead",
    "train",
    "typed",
    "vision",
]
# main.js (it finds the view roots and hands each its own), workspaces.js (the page's layout), drawer.js,
# actionerror.js, reveal.js and tooltip.js (what spans several views, above); standalone.js owns the exported file.
PAGE_LEVEL = ["actionerror.js", "drawer.js", "main.js", "reveal.js", "standalone.js", "tooltip.js", "workspaces.js"]
GLOBAL_DOLLAR = re.compile(r"^(?:const|let|var|function)\s+\$\s*[=(]", re.M)
DOCUMENT_LOOKUP = re.compile(r"\bdocument\s*\.\s*(?:getElementById|querySelector(?:All)?|getElementsBy\w+)\b")


def test_a_view_that_owns_its_root_looks_nothing_up_in_the_document() -> None:
    """No module-level `$` and no document-wide lookup in a view of OWN_ROOT (22 modules defined a `$`, and the page's
    modules made 514 document-wide lookups; before controls, errors, heads, start and vision owned their root, 3 and
    22, of which 2 and 9 in views)."""
    found = {}
    for name in OWN_ROOT:
        text = (JS / f"{name}.js").read_text(encoding="utf-8")
        hits = GLOBAL_DOLLAR.findall(text) + DOCUMENT_LOOKUP.findall(text)
        if hits:
            found[name] = hits
    assert found == {}, found


def test_the_views_that_own_their_root_are_the_views() -> None:
    """OWN_ROOT names every view and panel of the page's templates (a data-view or data-panel element), and only
    those."""
    templates = "".join(p.read_text(encoding="utf-8") for p in (JS.parent.parent / "templates").glob("*.html"))
    views = set(re.findall(r'data-(?:view|panel)="(\w+)"', templates))
    assert sorted(views ^ set(OWN_ROOT)) == [], sorted(views ^ set(OWN_ROOT))


def test_only_the_page_level_modules_look_up_the_document() -> None:
    """A module that defines a module-level `$` or looks elements up in the whole document is one of PAGE_LEVEL; no
    other module of the page does."""
    found = sorted(
        p.name
        for p in JS.glob("*.js")
        if GLOBAL_DOLLAR.search(p.read_text(encoding="utf-8")) or DOCUMENT_LOOKUP.search(p.read_text(encoding="utf-8"))
    )
    assert set(found) <= set(PAGE_LEVEL), sorted(set(found) - set(PAGE_LEVEL))


# The page features converted to one declaration each (static/js/features.js FEATURES): the module that declares it,
# and the names another module would have to use to list it: its settings and URL keys, its action types, its body
# fields and their constants. The generic modules read the declarations and name none of them in their code (their
# comments may speak of "a classic bug").
FEATURE_TABLE = "features.js"
GENERIC = ["state.js", "actions.js", "store.js", "requests.js", "controls.js"]
FEATURE_NAMES = {
    "bugs.js": ["bug", "BUGS", "bugSet", "demo_bug"],
    "scoring.js": ["allMasked", "all_masked", "allMaskedSet", "scale", "scaleSet"],
    "headfilters.js": [
        "hsort",
        "hdir",
        "hfind",
        "hscore",
        "hmin",
        "hablate",
        "habl",
        "hbase",
        "hlens",
        "hseed",
        "HEAD_SORTS",
        "headFilterSet",
        "headSorted",
        "parseLengths",
    ],
    "interventionsettings.js": [
        "ablMode",
        "abl",
        "ABLATE_MODES",
        "parseAblations",
        "parseEdits",
        "ablationToggled",
        "ablationDropped",
        "ablModeSet",
        "editAdded",
        "editDropped",
        "interventionsCleared",
        "toggleAblation",
        "addEdit",
    ],
    "claimsettings.js": [
        "perturbOn",
        "perturbSet",
        "parsePerturb",
        "CHANGE_KINDS",
        "PERTURB_SIDES",
        "pert",
        "pitem",
        "pside",
    ],
    "decode.js": [
        "decodeOn",
        "decodeStep",
        "decodeGen",
        "decodeSet",
        "decodeStepSet",
        "decodeGenSet",
        "playSet",
        "playing",
    ],
    "palette.js": ["palette", "PALETTE_NAMES", "paletteSet", "scoreScale", "SCORE_SCALES", "scoreScaleSet", "sscale"],
    "sinks.js": ["sinks", "renorm", "sinksSet", "parseSinks"],
    "dtype.js": ["dtype", "dtypeSet", "DTYPES"],
    "counting.js": ["from1", "countSet"],
    "trainmeasures.js": ["trained", "trainMeasured"],
    "pin.js": ["pin", "parsePin", "pinBody", "pinned", "unpinned"],
    "numbersettings.js": [
        "matrices",
        "MATRIX_NAMES",
        "parseMatrices",
        "fitRows",
        "setEntry",
        "matrixEntrySet",
        "matricesReset",
    ],
    "masks.js": [
        "causalSet",
        "windowSet",
        "blockedCleared",
        "cellToggled",
        "tokenPadded",
        "defaultMasks",
        "modelMasks",
        "readMasks",
        "toggleBlocked",
        "masksRequest",
        "default_masks",
        "masks",
        "padded",
        "blocked",
    ],
    "sourcebatch.js": [
        "source",
        "sourcePadded",
        "batch",
        "texts",
        "batchOf",
        "sourceOf",
        "batchTexts",
        "sourceChanged",
        "itemSet",
        "itemResult",
        "src",
        "spad",
    ],
    "typedsettings.js": ["typed", "parseTyped", "typedBody", "labelsFor", "NEEDS_VALUES", "typedSet"],
}


def js_code(text: str) -> str:
    """A module's text without its comments (a `//` at a line's start or after a space, to the line's end)."""
    return re.sub(r"(?m)(^|\s)//.*$", r"\1", text)


def test_a_page_feature_is_named_only_by_its_module_and_the_features_table() -> None:
    """Each feature of FEATURE_NAMES (the claim's settings, interventions, decoding, the head-types settings,
    scaling and all-masked rows, the colours, Show a classic bug, Hide sinks, Compute in, Count from 1) declares its
    link keys, actions, reducer cases and body fields in its own module: none of those names appears in the code of
    state.js, actions.js, store.js, requests.js or controls.js (Hide sinks was spread over eight files: its view and
    template, index.html and those five)."""
    found = {}
    for generic in GENERIC:
        text = js_code((JS / generic).read_text(encoding="utf-8"))
        hits = sorted({n for names in FEATURE_NAMES.values() for n in names if re.search(rf"\b{n}\b", text)})
        if hits:
            found[generic] = hits
    assert found == {}, found
    table = (JS / FEATURE_TABLE).read_text(encoding="utf-8")
    for module, names in FEATURE_NAMES.items():
        text = (JS / module).read_text(encoding="utf-8")
        assert "export const feature = {" in text, module
        assert f'from "./{module}"' in table, module
        assert [n for n in names if not re.search(rf"\b{n}\b", text)] == [], module


# The core of the page's state (static/js/state.js's header): the fields defaultState writes itself, read across the
# page, that no page feature owns. Every other setting is declared by its feature (FEATURE_NAMES) or its panel.
CORE = ["model", "text", "options", "view", "layer", "focus", "query", "page", "pair"]


def test_the_states_own_fields_are_exactly_its_core() -> None:
    """state.js's defaultState writes the fields of CORE and no other (the masks, the numbers edited and typed in, the
    pinned run, a source and a batch were written there: each is now its feature's declaration), and its header lists
    each with the reason it is core."""
    text = (JS / "state.js").read_text(encoding="utf-8")
    body = re.search(r"export function defaultState\(\) \{\n  const s = \{\n(.*?)\n  \};", text, re.S)
    assert body, "state.js defaultState"
    written = re.findall(r"^    (\w+):", body.group(1), re.M)
    assert written == CORE, written
    header = re.findall(r"^//   (\w+) {2,}\S", text.split("\nimport ", 1)[0], re.M)
    assert header == CORE, header
    converted = sorted({n for names in FEATURE_NAMES.values() for n in names} & set(CORE))
    assert converted == [], converted
