// The page's one state object, its defaults, and its round trip through the URL.
// Everything a person sets lives here, so a link reproduces the view. Pure: no DOM, no fetch.
//
// The core of ui, the fields written here: what the run is and what every view is looking at, read across the
// page, so no page feature owns them. Every other setting is a page feature's (features.js) or a registered panel's
// (registry.js), declared in its own module. The core (tests/test_page_modules.py holds defaultState to this list):
//   model    the model run: every view draws its answer, and a change of model resets the rest of the core
//   text     the sequence run (the store's draft holds it as typed until Run)
//   options  the model's options (a random layer's heads, width, seed, positions), part of every body
//   view     the matrix every head is drawn as (weights, scores, moved); the body's include follows it
//   layer    the layer every view draws and the run asks for (an index or "all"); a switch to a layer the page holds
//            draws without a run (store.js holdsLayer)
//   focus    the head opened large, [layer, head]: the heads grid, the large head, retrieval, top heads, flow,
//            stats, the analyses' requests and the exports read it; a layer switch keeps it or closes it
//   query    the query position the large head, the retrieval diagram, the claim and the exports share; opening a
//            head sets it
//   page     the heads grid's page of the layer shown: a layer switch and an opened head (core actions) set it back,
//            and an answer with fewer heads than it needs brings it back to its last page (answers.js settle)
//   pair     the [query, key] whose top heads are listed: picked in the large head, the retrieval diagram or top
//            heads, and read by QK terms, contrast, the analyses' requests and the workspaces' link keys

import { optionsOf } from "./capabilities.js";
import { registered } from "./registry.js";
import { featureDefaults, featuresForModel, readFeatureLinks, writeFeatureLinks } from "./features.js";

export const VIEWS = ["weights", "scores", "moved"];
export const SMALL_MODEL_VALUES = 4096; // below this many S*D numbers the page also asks for Q, K, V and contexts

export function defaultState() {
  const s = {
    model: "textbook",
    text: "",
    options: {},
    view: "weights",
    layer: 0, // a layer index, or "all"
    focus: null, // [layer, head] opened large
    query: null, // the query the retrieval diagram shows; null = the last position
    page: 0,
    pair: null, // [query, key] whose top heads are listed; null = none chosen
    ...featureDefaults(), // the page features' settings (features.js)
  };
  for (const [name, panel] of registered()) if (panel.setting) s[name] = null; // a registered panel's setting
  return s;
}

// The state a person gets on choosing a model: its example text, options, and what a page feature sets for it (the
// model's own masks: features.js).
export function stateForModel(info, base = defaultState()) {
  const s = {
    ...base,
    model: info.name,
    focus: null,
    query: null,
    page: 0,
    layer: 0,
    pair: null,
  };
  s.text = info.default_text || base.text || "the cat sat on the mat";
  s.options = optionsOf(info);
  return Object.assign(s, featuresForModel(info));
}

const int = (v) => {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) ? n : null;
};

// State -> query string. Every field that differs from a fresh state is written; the model always is.
export function encodeState(s) {
  const p = new URLSearchParams();
  p.set("m", s.model);
  if (s.text) p.set("t", s.text);
  for (const [k, v] of Object.entries(s.options || {})) {
    if (v === undefined || v === null) continue;
    p.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  if (s.view !== "weights") p.set("view", s.view);
  if (s.layer !== 0) p.set("layer", String(s.layer));
  if (s.focus) p.set("focus", `${s.focus[0]}.${s.focus[1]}`);
  if (s.query != null) p.set("query", String(s.query));
  if (s.page) p.set("page", String(s.page));
  if (s.pair && s.pair.every((v) => v != null)) p.set("pair", `${s.pair[0]}-${s.pair[1]}`);
  for (const [name, panel] of registered()) {
    if (panel.setting && s[name] != null) p.set(panel.setting.key, panel.setting.encode(s[name]));
  }
  writeFeatureLinks(s, p);
  return p.toString();
}

// Query string -> state, or null when the string names no model (the page then starts from defaults).
// Values it cannot read fall back to a fresh state's, so a mangled link still opens a page. A link that
// sets no mask at all (a bare "?m=induction") gives masks = null: the model's default masks apply.
// `optionsOf(model)`: the options a model takes, {name: default} (its /api/models entry's): the link's values of
// those are read, each as its default's type (a boolean "1" or "0", a number).
export function decodeState(search, optionsOf = () => ({})) {
  const p = new URLSearchParams(search);
  const model = p.get("m");
  if (!model) return null;
  const s = defaultState();
  s.model = model;
  s.text = p.get("t") ?? "";
  for (const [k, dflt] of Object.entries(optionsOf(model) || {})) {
    if (!p.has(k)) continue;
    s.options[k] = typeof dflt === "boolean" ? p.get(k) === "1" : typeof dflt === "string" ? p.get(k) : int(p.get(k));
  }
  if (VIEWS.includes(p.get("view"))) s.view = p.get("view");
  const layer = p.get("layer");
  s.layer = layer === "all" ? "all" : Math.max(0, int(layer) ?? 0);
  const f = (p.get("focus") || "").split(".").map(int);
  s.focus = f.length === 2 && f.every((v) => v != null && v >= 0) ? f : null;
  const q = int(p.get("query"));
  s.query = q != null && q >= 0 ? q : null;
  s.page = Math.max(0, int(p.get("page")) ?? 0);
  const pair = (p.get("pair") || "").split("-").map(int);
  s.pair = pair.length === 2 && pair.every((v) => v != null && v >= 0) ? pair : null;
  for (const [name, panel] of registered()) {
    if (panel.setting && p.has(panel.setting.key)) s[name] = panel.setting.decode(p.get(panel.setting.key));
  }
  Object.assign(s, readFeatureLinks(p));
  return s;
}
