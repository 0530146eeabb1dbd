"""One self-contained HTML file of a result: the page's own view code inlined, the numbers embedded, no server.

`standalone_html(data, view=..., ...)` takes an /api/attention result in the arrays form (float16, as
`precision: "float16"` makes it) and returns the file POST /api/export answers and attnlab.show displays:

- the page's CSS (static/css: PAGE_STYLESHEETS, then standalone.css), inline; light or dark follows the system;
- the result, deflated (zlib) and base64-encoded, in <script type="application/octet-stream" id="attnlab-data">
  (about 2.2 bytes per float16 attention value at 512 tokens: 1.66 deflated, times 4/3); the page inflates it with
  the browser's own DecompressionStream and reads it with static/js/arrays.js's readArrays;
- what to show first (view, layer, head, query, palette, matrix; rollout: how an embedded rollout or attention
  flow fused the heads; positions_from: the count positions are printed in) as JSON in
  <script type="application/json">;
- static/js/standalone.js and every module it imports, as one classic script (wire/jsbundle.py), which draws with
  the page's own views (heads.js, overview.js, retrieval.js) into the page's own panels, copied from
  templates/index.html into <template> elements (`PANELS`).

Nothing in the file names another host or file: it opens from disk, in a sandboxed iframe and with no network.
"""

from __future__ import annotations

import base64
import html
import importlib.resources
import json
import re
import zlib
from functools import cache
from pathlib import Path
from typing import Any, Literal

from wire.jsbundle import bundle

View = Literal["layer", "all", "head"]
VIEWS: tuple[str, ...] = ("layer", "all", "head")
ENTRY = "standalone.js"
WIDGET_ENTRY = "widget.js"  # attnlab.show's notebook widget
# the page's store, its effects and its fetches stay out: the standalone page has a state of the store's shape, and
# no server
FORBID = frozenset({"store.js", "main.js", "api.js", "effects.js", "answers.js", "panels.js"})
# what the file shows -> the page's panels it draws into (templates/index.html's elements with data-view=NAME)
PANELS: dict[str, tuple[str, ...]] = {"layer": ("heads",), "all": ("overview",), "head": ("retrieval",)}
ENCODING = "deflate+base64"
# the page's stylesheets under static/css, in cascade order: the page links them (server/routes/pages.py) and the
# exported file inlines them, in this order
PAGE_STYLESHEETS = ("attnlab.css", "claims.css", "screens.css")


def templates_dir() -> Path:
    """templates/ beside static/."""
    return static_dir().parent / "templates"


def panel_markup(page: str, view: str) -> str:
    """The element of the page's template with data-view=`view` (a <section> or <div>, with what it holds), as the
    template writes it: the markup the page's view module draws into."""
    m = re.search(rf'<(section|div)\b[^>]*\bdata-view="{re.escape(view)}"[^>]*>', page)
    if m is None:
        raise ValueError(f"templates/index.html has no element with data-view={view!r}")
    tag = m.group(1)
    depth, at = 1, m.end()
    for inner in re.finditer(rf"<(/?){tag}\b[^>]*>", page[at:]):
        depth += -1 if inner.group(1) else 1
        if depth == 0:
            return page[m.start() : at + inner.end()]
    raise ValueError(f"templates/index.html: the data-view={view!r} element is not closed")


@cache
def _panels(path: Path, stamp: int) -> str:
    del stamp  # part of the cache key only: an edited template is read again
    page = path.read_text(encoding="utf-8")
    shown = "\n".join(panel_markup(page, v) for v in PANELS["head"])
    parts = [
        f'<template id="sa-layer">{"".join(panel_markup(page, v) for v in PANELS["layer"])}</template>',
        f'<template id="sa-all">{"".join(panel_markup(page, v) for v in PANELS["all"])}</template>',
        '<template id="sa-head"><div class="sa-two"><section class="panel"><div id="sa-large"></div></section>'
        f"{shown}</div></template>",
    ]
    return "\n".join(parts)


def panels_html(templates: Path | None = None) -> str:
    """The page's panels the standalone views draw into, one <template id="sa-VIEW"> per view."""
    path = (templates or templates_dir()) / "index.html"
    return _panels(path, path.stat().st_mtime_ns)


def static_dir() -> Path:
    """static/ beside this package, where server/routes/pages.py finds it beside the server's: in a checkout and
    once installed (the wheel puts wire/, server/ and static/ side by side)."""
    return Path(str(importlib.resources.files("wire"))).parent / "static"


@cache
def _script(root: Path, stamp: tuple[tuple[str, int], ...]) -> str:
    del stamp  # part of the cache key only: a module edited on disk is bundled again
    return script_safe(bundle(ENTRY, root / "js", forbid=FORBID, call="boot"))


def viewer_script(root: Path | None = None) -> str:
    """The standalone viewer as one classic script, safe inside <script>...</script>."""
    js = (root or static_dir()) / "js"
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in js.glob("*.js")))
    return _script(root or static_dir(), stamp)


def script_safe(js: str) -> str:
    """JavaScript that cannot end its <script> element early: `</script` written `<\\/script` (the same string
    inside a string, template or regular expression literal). `<!--` would switch the HTML parser into an escaped
    state; no module of the page has one, so one is refused rather than rewritten."""
    if "<!--" in js:
        raise ValueError("a module holds '<!--', which an inline script must not contain")
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)


def embed(data: bytes | memoryview) -> str:
    """The arrays form, deflated and base64-encoded (ENCODING)."""
    return base64.b64encode(zlib.compress(data, 1)).decode("ascii")


def read_embedded(page: str) -> bytes:
    """The arrays form embedded in a standalone page (the inverse of `embed`, for tests and scripts)."""
    m = re.search(r'<script type="application/octet-stream" id="attnlab-data" data-encoding="([^"]+)">([^<]*)</', page)
    if m is None:
        raise ValueError("no embedded attnlab data in this page")
    raw = base64.b64decode(m.group(2))
    return zlib.decompress(raw) if m.group(1) == ENCODING else raw


def standalone_html(
    data: bytes | memoryview,
    *,
    view: View = "layer",
    title: str = "attnlab",
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    palette: str = "viridis",
    matrix: str = "weights",
    rollout: dict[str, Any] | None = None,
    positions_from: int = 0,
    static: Path | None = None,
) -> str:
    """The standalone page of a result in the arrays form (`data`), opening on `view` ("layer": the heads of one
    layer, "all": every layer's heads as thumbnails, "head": one head large with the retrieval of `query`); its
    heatmaps draw `matrix`: "weights", or "moved" (the result's value_norms). Each layer's `rollout` and
    `attention_flow` in the result are drawn in a section of their own, under a line naming `rollout` (the fuse of
    the heads and the residual: {"heads": "mean", "residual": true}). `positions_from`: the count its positions are
    printed in, 0 (the API's) or 1 (the chapter's)."""
    if view not in VIEWS:
        raise ValueError(f"view: got {view!r}; one of {', '.join(VIEWS)}")
    if positions_from not in (0, 1):
        raise ValueError(f"positions_from: got {positions_from!r}; 0 or 1")
    root = static or static_dir()
    shown: dict[str, Any] = {
        "view": view,
        "layer": layer,
        "head": head,
        "query": query,
        "palette": palette,
        "matrix": matrix,
        "rollout": rollout,
        "positions_from": positions_from,
    }
    shown_json = json.dumps(shown).replace("</", "<\\/")
    t = html.escape(title)
    return PAGE.format(
        title=t,
        css=style_safe(page_css(root)),
        data=embed(data),
        encoding=ENCODING,
        shown=shown_json,
        shell=SHELL.format(title=t, foot=FILE_FOOT, panels=panels_html(root.parent / "templates" if static else None)),
        script=viewer_script(root),
    )


def page_css(root: Path) -> str:
    """The page's stylesheets and the standalone viewer's, in cascade order."""
    names = (*PAGE_STYLESHEETS, "standalone.css")
    return "\n".join((root / "css" / name).read_text(encoding="utf-8") for name in names)


def style_safe(css: str) -> str:
    """CSS that cannot end its <style> element early."""
    return css.replace("</", "<\\/")


def widget_shell(title: str = "attnlab") -> str:
    """The markup and CSS attnlab.show's notebook widget draws into (static/js/widget.js puts it in a shadow root of
    the output): the file's own, its page-wide rules (`:root`, the tooltip's place on the page) made the shadow
    root's."""
    root = static_dir()
    css = page_css(root).replace(":root", ":host") + WIDGET_CSS
    shell = SHELL.format(title=html.escape(title), foot=WIDGET_FOOT, panels=panels_html())
    return f'<style>\n{style_safe(css)}\n</style>\n<div class="standalone sa-widget">\n{shell}\n</div>'


@cache
def _module(root: Path, stamp: tuple[tuple[str, int], ...]) -> str:
    del stamp  # part of the cache key only
    return bundle(WIDGET_ENTRY, root / "js", forbid=FORBID, as_module=True)


def widget_module(root: Path | None = None) -> str:
    """static/js/widget.js and every module it imports as one ES module (an anywidget's `_esm`: its default export
    holds `render`), inlined as the standalone file's script is: nothing fetched."""
    js = (root or static_dir()) / "js"
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in js.glob("*.js")))
    return _module(root or static_dir(), stamp)


FILE_FOOT = "A saved attnlab view: everything it needs is in this file."
WIDGET_FOOT = "attnlab.show's view: the kernel reads and sets what is shown (layer, head, query, selected)."
WIDGET_CSS = """
:host { display: block; }
.sa-widget { background: var(--bg); color: var(--ink); border: 1px solid var(--line); border-radius: 6px; }
.sa-widget .tooltip { position: fixed; }
"""

# No <meta> CSP: a sandboxed notebook iframe (srcdoc) and a file on disk both run this page's inline script, and it
# loads nothing (no src, no href, no fetch); the browser tests check that no request leaves it.
# the file's body, and the widget's: the controls, the view, the panels' templates and the tooltip
SHELL = """<header class="top">
  <div class="brand"><h1>attnlab</h1><p>{title}</p></div>
  <span id="sa-summary" class="muted small sa-summary"></span>
  <span id="sa-sinks" class="muted small sa-summary" data-testid="sinks-shown" hidden></span>
</header>
<div id="sa-error" class="banner" role="alert" data-testid="error-banner" hidden></div>
<main class="sa-main">
  <section class="panel sa-controls controls" aria-label="What to show">
    <div class="sa-field"><label for="sa-view-select">View</label><select id="sa-view-select"></select></div>
    <div class="sa-field" id="layer-field"><label for="layer-select">Layer</label>
      <select id="layer-select" data-testid="layer-select"></select></div>
    <div class="sa-field" id="head-field"><label for="head-select">Head</label><select id="head-select"></select></div>
    <div class="sa-field" id="query-field"><label for="query-select">Query</label>
      <select id="query-select"></select></div>
    <div class="sa-field"><label for="palette-select">Colours</label>
      <select id="palette-select"><option value="viridis">viridis</option><option value="cividis">cividis</option>
      </select></div>
  </section>
  <div id="sa-view" class="sa-view"></div>
  <section id="sa-stacked" class="panel sa-stacked" aria-label="Rollout and attention flow" hidden></section>
  <p class="muted small sa-foot">{foot} Hover a cell for its query, key and weight; press a head to open it
    large.</p>
</main>
{panels}
<div id="tooltip" class="tooltip" data-testid="tooltip" hidden></div>"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="attnlab">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body class="standalone">
{shell}
<script type="application/json" id="attnlab-view">{shown}</script>
<script type="application/octet-stream" id="attnlab-data" data-encoding="{encoding}">{data}</script>
<script>
{script}</script>
</body>
</html>
"""
