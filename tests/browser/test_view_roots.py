"""Views own their root: each view draws into the element it is given, wherever that is, and nothing else.

One page load: once the page has drawn its first answer, every view in DRAWN is bound and drawn again, from the
page's own state, into a fresh copy of its markup (its data-view or data-panel element as the server sends it) held
in a div that is not in the document. The view must draw into that copy (what DRAWN names appears inside it), and a
MutationObserver on the document's body must record nothing while it draws: a view that looked its parts up in the
whole document would draw into the page's copy instead. The Train workspace's kept runs (static/js/trainruns.js, a
part of the train view that fetches its list) are drawn the same way into a copy of their part, once their list has
come, while nothing changes in the page's Train workspace.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

# view or panel name -> what its draw puts in its root (a selector, matched in the div holding the root), absent
# from the markup the server sends
DRAWN: dict[str, str] = {
    "retrieval": "#retrieval line, #retrieval-context table",
    "flow": "#flow > *",
    "tophead": "#top-heads-panel .th-picks",
    "stats": "#stats tr",
    "serverinfo": "#server-info:not(:empty)",
    "qkterms": "#qk-body #qk-status",
    "audit": "#audit-summary p",
    "sinks": "#sinks-positions:not([hidden])",
    "blockwise": "#blockwise-out > *",
    "contrast": "#contrast-status:not(:empty)",
    "typed": '[data-view="typed"][data-shown]',
    "rollout": "#rollout-status:not(:empty)",
    "cost": "#cost-status:not(:empty)",
    "sweep": "#sweep-status:not(:empty)",
    "patch": "#patch-status:not(:empty)",
    "mechanics": "#decode-status:not(:empty)",
    "tokens": "#tokens > *",
    "focus": "#focus-plot[aria-label]",
    "headtypes": "#headtypes-status:not(:empty)",
    "experiments": "#iv-list > *",
    "lesson": "#lesson-name:not(:empty)",
    "heads": "#heads-grid canvas",
    "deepzoom": '#dz-toggle[aria-expanded="true"]',
    "busy": '[data-view="busy"][data-busy]',
    "eligibility": "#eligibility > *",
    "exporter": "#export-html[data-export-view]",
    "numbers": "#matrix-editors table",
    "maskcontrols": "#blocked-count:not(:empty)",
    "moreinputs": "#batch-help:not(:empty)",
    "controls": "#model-select option",
    "errors": '[data-view="errors"]:not([hidden])',
    # the jump row (bound into the copy) hides the jump to a panel the page hides: all layers at a glance, one shown
    "start": "button[data-jump][hidden]",
    "vision": "#vision-status:not(:empty)",
}
LOADING = {"status": "loading", "result": None, "message": ""}
RUN_ERROR = {
    "code": "given",
    "message": "A given failure",
    "hint": "Nothing to fix.",
    "field": "text",
    "where": "sequence-input",
    "action": "Run",
}
# What a view is drawn from here where the page's state would draw nothing new into a fresh copy: a panel's slot
# (those asked by a button, drawn while their answer is on its way), settings on top of the page's (`ui`), the
# slots of the page's own analyses (`panels`), the models offered or the run (`run`: a failed one)
GIVEN: dict[str, dict[str, object]] = {
    "audit": {"slot": LOADING},
    "contrast": {"slot": LOADING},
    "rollout": {"slot": LOADING},
    "cost": {"slot": LOADING},
    "sweep": {"slot": LOADING},
    "patch": {"slot": LOADING},
    "sinks": {"ui": {"sinks": [0]}},
    "headtypes": {"panels": {"headTypes": LOADING}},
    "lesson": {"ui": {"lesson": {"id": "ex-1", "picked": None, "feedback": None, "shown": False}}},
    # a model list of its own, which the page's deep zoom must not take for its own (DEEPZOOM_OFFERS_JS)
    "deepzoom": {"ui": {"deepzoom": 1}, "models": [{"name": "given-long", "reads": ["text"]}]},
    # a model that reads a typed matrix (this server offers none)
    "typed": {"ui": {"model": "given"}, "models": [{"name": "given", "reads": ["scores"]}]},
    # a failed run that names a control of the page's (the message beside it is the page's: actionerror.js)
    "errors": {"run": {"error": RUN_ERROR}},
}

DRAW_DETACHED_JS = """async ([drawn, given]) => {
  const { pageState } = await import('/static/js/main.js');
  const page = pageState();
  const sent = new DOMParser().parseFromString(await (await fetch('/')).text(), 'text/html');
  const out = {};
  for (const [name, sel] of Object.entries(drawn)) {
    const markup = sent.querySelector(`[data-view="${name}"], [data-panel="${name}"]`);
    const root = document.importNode(markup, true);
    const holder = document.createElement('div');
    holder.append(root);
    const mod = await import(`/static/js/${name}.js`);
    const g = given[name] || {};
    const s = { ...page, models: g.models || page.models, ui: { ...page.ui, ...g.ui }, run: { ...page.run, ...g.run } };
    s.panels = { ...page.panels, ...g.panels };
    // bound first, as the page binds each view once (its listeners, and the parts it adds to its markup)
    const store = { dispatch: () => {}, getState: () => s, subscribe: () => () => {} };
    if (root.dataset.panel) mod.panel.bind?.(root, store);
    else mod.bind?.(root, store);
    const before = holder.querySelectorAll(sel).length;
    const records = []; // delivered to the observer at a microtask's end, or taken below
    const seen = new MutationObserver((rs) => records.push(...rs));
    seen.observe(document.body, { subtree: true, childList: true, attributes: true, characterData: true });
    let error = null;
    try {
      if (root.dataset.panel) mod.panel.render(root, g.slot || s.panels[name], s, () => {});
      else mod.render(root, s, () => {});
    } catch (e) {
      error = String(e);
    }
    await Promise.resolve(); // what the draw left for a microtask (the start path's jump row) is done too
    // what changed, and inside which element with an id (still in the document or no longer)
    const where = (r) => {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      const at = el?.closest('[id]');
      return `${r.type} ${r.attributeName || ''} ${el?.nodeName} in #${at?.id} ${el?.isConnected ? '' : '(gone)'}`;
    };
    // plotly measures text in an element of its own that it keeps in the body (SVG nodes it adds there and takes
    // out again): its, not the view's
    const plotlys = (r) => {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      return !!el?.closest('#js-plotly-tester') || (!el?.isConnected && el instanceof SVGElement);
    };
    const changed = [...records, ...seen.takeRecords()].filter((r) => !plotlys(r)).map(where);
    seen.disconnect();
    out[name] = { before, after: holder.querySelectorAll(sel).length, changed: changed.slice(0, 5), error };
  }
  return out;
}"""

# The models the page's own deep zoom offers once its text changes (it offers them again from the list it holds).
DEEPZOOM_OFFERS_JS = """() => {
  const root = document.querySelector('[data-panel="deepzoom"]');
  root.querySelector('#dz-text').dispatchEvent(new Event('input'));
  return [...root.querySelectorAll('#dz-model option')].map((o) => o.value);
}"""

# The kept runs' part of the Train workspace bound into a copy outside the document and drawn from the server's list:
# how many rows it drew, what it counted, what it said, and what changed meanwhile in the page's Train workspace.
KEPT_RUNS_DETACHED_JS = """async () => {
  const { bindRuns } = await import('/static/js/trainruns.js');
  const sent = new DOMParser().parseFromString(await (await fetch('/')).text(), 'text/html');
  const root = document.importNode(sent.querySelector('[data-view="train"] #train-kept'), true);
  const holder = document.createElement('div');
  holder.append(root);
  const said = [];
  const refresh = bindRuns(root, ['a', 'b'], { show: () => {}, forget: () => {}, say: (text) => said.push(text) });
  const records = [];
  const seen = new MutationObserver((rs) => records.push(...rs));
  seen.observe(document.querySelector('[data-view="train"]'), { subtree: true, childList: true, attributes: true });
  await refresh();
  const changed = [...records, ...seen.takeRecords()].length;
  seen.disconnect();
  const list = holder.querySelector('#train-runs');
  return { rows: list.querySelectorAll('li[data-run]').length, count: list.dataset.count ?? null, said, changed };
}"""


def test_each_view_draws_into_a_detached_root_and_nothing_else(open_page: Callable[..., Page]) -> None:
    page = open_page("")
    got = page.evaluate(DRAW_DETACHED_JS, [DRAWN, GIVEN])
    for name, r in got.items():
        assert r["error"] is None, (name, r)
        assert r["before"] == 0, f"{name}: its markup already holds {DRAWN[name]!r}"
        assert r["after"] > 0, f"{name} drew nothing into its root: {r}"
        assert r["changed"] == [], f"{name} changed the page outside its root: {r}"
    # the deep zoom holds its run, its canvas and its models per root: the copy drawn above (bound and given a model
    # list of its own) left the page's panel what it had
    offered = page.evaluate(DEEPZOOM_OFFERS_JS)
    assert "given-long" not in offered, offered
    kept = page.evaluate(KEPT_RUNS_DETACHED_JS)
    assert kept["said"] == [] and kept["changed"] == 0, kept
    assert kept["count"] is not None and int(kept["count"]) == kept["rows"], kept
