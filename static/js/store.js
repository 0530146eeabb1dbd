// The page's one store: the whole state, one pure reducer over named actions, and subscribers.
//
// state = {
//   models,          the /api/models list
//   ui,              what the person set (state.js): the URL holds exactly this
//   draft,           the text boxes as typed ({text, ...} with a page feature's boxes, features.js `draft`); Run
//                    copies them into ui
//   good,            ui as it was for the last run that succeeded: a failed run rolls ui back to it
//   run,             the /api/attention run: want (a counter: a change to it asks for a run), started and answered
//                    (the want the run in flight serves, and the last one answered: the views' drawn mark waits for
//                    answered === want), asking (the layer the run in flight asks for, or "all"), where (the element
//                    the person acted on), action (their words for it), status, the last good result and request,
//                    the previous result and the diff between them, the error, the one-layer notice, and oneLayer
//                    (the size key of an input whose every layer at once is over the server's result limit)
//   panels,          one slot per analysis panel: {key, result, status, message, nonce}
//   highlight,       the {q, k} lit up in every head
//   pending,         an example's pair, placed once its tokens come back
//   cursor,          the eligibility grid's active cell [q, k] (its roving tab stop)
//   tokensOpen,      a long token list shown whole
//   ...              a page feature's state beside ui (features.js `page`: the decoding steps playing on their own)
// }
//
// Views read the state (what they draw from it is selectors.js's) and dispatch actions; they never change it.
// Effects (effects.js) watch it and fetch; what each analysis panel asks is panels.js's; what a run's answer (or
// its failure) does to the state is answers.js's.

import { answerReducers } from "./answers.js";
import { movedIn } from "./contrib.js";
import { act } from "./actions.js";
import { modelInfo, singleOf } from "./selectors.js";
import { registered, slots, takenBy } from "./registry.js";
import { defaultState, stateForModel } from "./state.js";
import { exampleFields, featureDrafts, featurePage, featureReducers, keptOnModel, newTextFields } from "./features.js";

// ---- the store ------------------------------------------------------------------------------------------------

export function createStore(reducer, initial) {
  let state = initial;
  const subscribers = new Set();
  const queue = [];
  let busy = false;
  return {
    getState: () => state,
    dispatch(action) {
      // an action dispatched while subscribers run (an effect answering a change) waits its turn
      queue.push(action);
      if (busy) return state;
      busy = true;
      try {
        while (queue.length) {
          const a = queue.shift();
          const prev = state;
          state = reducer(state, a);
          if (state !== prev) for (const fn of subscribers) fn(state, prev, a);
        }
      } finally {
        busy = false;
        queue.length = 0;
      }
      return state;
    },
    subscribe(fn) {
      subscribers.add(fn);
      return () => subscribers.delete(fn);
    },
  };
}

// ---- the initial state ----------------------------------------------------------------------------------------

// the panels of panels.js PANEL_SPECS; a registered panel (registry.js) gets its slots from its declaration
export const PANELS = ["headTypes", "top", "perturb", "intervene", "compare", "decode", "nextWords"];

export function emptySlot() {
  return { key: null, result: null, status: "idle", message: "", nonce: 0 };
}

export function initialState() {
  const ui = defaultState();
  return {
    models: [],
    ui,
    draft: { text: ui.text, ...featureDrafts(ui) },
    good: null,
    run: {
      want: 0,
      started: 0,
      answered: 0,
      asking: null,
      oneLayer: null,
      where: null,
      action: "",
      status: "idle", // idle | loading | ready | error
      result: null, // the last good response as the views show it (one item of a batch)
      base: null, // the result as its first layer was drawn: unchanged while the other layers of a stream come
      rest: null, // "loading" while the other layers of a streamed answer come (the layer shown is drawn)
      full: null, // the last good response as it came
      request: null, // the /api/attention body that gave it
      prev: null,
      progress: null, // {stage, done, total, ahead} while it loads: the server's stage, then the download
      diff: null,
      skipDiff: false,
      notice: "",
      error: null, // {code, field, message, hint, where, action}
      loadError: null, // /api/models failed
    },
    panels: Object.fromEntries([...PANELS, ...slots().map(([name]) => name)].map((p) => [p, emptySlot()])),
    highlight: null,
    pending: { pair: null, open: false },
    cursor: null,
    tokensOpen: false,
    ...featurePage(),
  };
}

// ---- action creators: static/js/actions.js (pure, importable by a view that must not import the store) ---------

export { act };

// ---- the reducer ----------------------------------------------------------------------------------------------

// ui changed by `fields`, and a run asked for, credited to `action` (the person's words) done at `where`.
function runWith(s, fields, action, where = null, extra = {}) {
  return {
    ...s,
    ui: { ...s.ui, ...fields },
    run: { ...s.run, want: s.run.want + 1, action, where, ...extra },
  };
}

// ui changed by `fields`; the views redraw from the result they have.
function setUi(s, fields) {
  return { ...s, ui: { ...s.ui, ...fields } };
}

// Whether the page holds layer `layer` (an index, or "all") of the current input: in the last good result, and in
// the run in flight if there is one (it replaces that result). Then a layer switch is a change of view, not a run.
export function holdsLayer(s, layer) {
  const r = s.run.result;
  if (!r || r.config.n_layers <= 1) return false;
  if (s.run.rest && s.run.status !== "loading") return true; // every layer is on its way: drawn when it is in
  if (s.run.status === "loading" && s.run.asking !== "all") return false;
  if (layer === "all") return r.layers.length === r.config.n_layers;
  return r.layers.some((l) => l.index === layer);
}

// A layer switch drawn from what the page holds: ui changes (and the rollback point with it), no run; the last
// run's diff was of another layer's weights, so it goes, as it did when a switch ran again.
function switchHeld(s, fields) {
  const next = setUi(s, fields);
  return {
    ...next,
    good: s.good ? { ...s.good, ...fields } : s.good,
    run: s.run.diff ? { ...s.run, diff: null } : s.run,
  };
}

function setPanel(s, name, fields) {
  return { ...s, panels: { ...s.panels, [name]: { ...s.panels[name], ...fields } } };
}

// What a model change keeps of ui's core (state.js): the matrix shown; a registered panel's setting stays unless it
// drops on a model change, and a page feature's as its declaration keeps it (features.js)
const KEEP_ON_MODEL = ["view"];

function chooseModel(s, name, text, options, where) {
  const m = modelInfo(s, name);
  if (!m) return s;
  const ui = stateForModel(m, defaultState());
  for (const k of KEEP_ON_MODEL) ui[k] = s.ui[k];
  for (const [name, p] of registered()) if (p.setting && !p.setting.dropOnModel) ui[name] = s.ui[name];
  Object.assign(ui, keptOnModel(s.ui)); // a page feature's settings, as its declaration keeps them (features.js)
  if (text) ui.text = text;
  if (options) ui.options = { ...ui.options, ...options };
  const draft = { ...s.draft, text: ui.text };
  return {
    ...s,
    ui,
    draft,
    run: { ...s.run, want: s.run.want + 1, action: "", where, diff: null, skipDiff: true, notice: "" },
  };
}

// Whether a model choice is of the model in use with what ui already has: its text (when it names one) and options.
function sameModel(ui, { name, text, options }) {
  if (name !== ui.model || (text && text !== ui.text)) return false;
  return Object.entries(options || {}).every(([k, v]) => ui.options[k] === v);
}

const reducers = {
  modelsLoaded: (s, a) => ({ ...s, models: a.models }),
  modelsFailed: (s, a) => ({
    ...s,
    run: { ...s.run, status: "error", loadError: a.error, error: { ...a.error, where: null } },
  }),
  restored: (s, a) => ({
    ...s,
    ui: a.ui,
    draft: { text: a.ui.text, ...featureDrafts(a.ui) },
    run: { ...s.run, want: s.run.want + 1, action: "", where: null },
  }),
  // the model in use chosen again, asking nothing it does not already have (the same text and options): nothing
  // changes, no run (a person re-picking it keeps their masks, options and text); another model starts afresh
  modelChosen: (s, a) => (sameModel(s.ui, a) ? s : chooseModel(s, a.name, a.text, a.options, a.where)),
  exampleChosen: (s, a) => {
    const ex = a.example;
    let next = chooseModel(s, ex.model, a.text, ex.options, "example-select");
    next = setUi(next, exampleFields(ex)); // what the example sets of a page feature's settings (features.js)
    return { ...next, pending: { pair: ex.pair ? { ...ex.pair, model: ex.model } : null, open: !!ex.pair } };
  },
  draftTyped: (s, a) => ({ ...s, draft: { ...s.draft, [a.field]: a.value } }),
  sequenceSubmitted: (s, a) => {
    const n = s.draft.text.trim() ? s.draft.text.trim().split(/\s+/).length : 0;
    const fields = { text: s.draft.text, ...featureDrafts(s.draft) };
    // what a sequence of n words sets of a page feature's settings (features.js)
    return runWith(s, { ...fields, ...newTextFields(s.ui, n) }, "new sequence", a.where);
  },
  // the moved view draws value norms and each head's contribution, which a result has only when asked for: ask
  // once, then views switch freely
  viewSet: (s, a) =>
    a.view === "moved" && s.run.result && !movedIn(s.run.result.layers[0]?.heads[0])
      ? runWith(s, { view: a.view }, "view: what each key moves (weight × |v·W_O|)", "view")
      : setUi(s, { view: a.view }),
  layerSet: (s, a) => {
    // the open head stays open where the new choice shows it: every layer, or its own layer
    const keep = s.ui.focus && (a.layer === "all" || s.ui.focus[0] === a.layer);
    const fields = { layer: a.layer, page: 0, focus: keep ? s.ui.focus : null };
    if (holdsLayer(s, a.layer)) return switchHeld(s, fields);
    return runWith(s, fields, "", "layer-select", { skipDiff: true, notice: "" });
  },
  optionSet: (s, a) => {
    // a change event that repeats the value (the box losing focus) is no change: no run
    if (s.ui.options[a.key] === a.value) return s;
    const options = { ...s.ui.options, [a.key]: a.value };
    return runWith(s, { options, focus: null }, `${a.key} = ${a.value}`, `opt-${a.key}`);
  },
  pageSet: (s, a) => setUi(s, { page: Math.max(0, a.page) }),
  querySet: (s, a) => setUi(s, { query: a.query }),
  headOpened: (s, a) => {
    const fields = { focus: [a.layer, a.head] };
    if (a.query != null) fields.query = a.query;
    const multi = s.run.result && s.run.result.config.n_layers > 1;
    if (multi && s.ui.layer !== "all" && s.ui.layer !== a.layer) {
      if (holdsLayer(s, a.layer)) return switchHeld(s, { ...fields, layer: a.layer, page: 0 });
      return runWith(s, { ...fields, layer: a.layer, page: 0 }, "", a.where, { skipDiff: true });
    }
    return setUi(s, fields);
  },
  pairSet: (s, a) => {
    const fields = { pair: a.q == null && a.k == null ? null : [a.q, a.k] };
    if (a.q != null) fields.query = a.q;
    return setUi(s, fields);
  },
  highlightSet: (s, a) => {
    const h = a.highlight;
    const same = h === s.highlight || (h && s.highlight && h.q === s.highlight.q && h.k === s.highlight.k);
    return same ? s : { ...s, highlight: h };
  },
  tokensOpenSet: (s, a) => ({ ...s, tokensOpen: a.open }),
  cursorSet: (s, a) => ({ ...s, cursor: a.cursor }),
  errorDismissed: (s) => ({ ...s, run: { ...s.run, error: null } }),
  panelSet: (s, a) => setUi(s, { [a.name]: a.value }),
  panelAsked: (s, a) => {
    // asked while a run is wanted or in flight: the fields were read off the last run, so the answer to that run
    // re-reads them (answers.js askedDuringRun) and the analysis is of the settings on screen
    const waiting = s.run.status === "loading" || s.run.answered !== s.run.want ? s.run.want : null;
    return setPanel(s, a.name, { nonce: s.panels[a.name].nonce + 1, ...(a.fields || {}), waiting });
  },
  ...answerReducers,
  ...featureReducers({ runWith, setUi, setPanel, single: singleOf }), // the page features' cases (features.js)
  panelStarted: (s, a) => setPanel(s, a.name, { key: a.key, status: "loading" }),
  panelLoaded: (s, a) =>
    s.panels[a.name].key === a.key ? setPanel(s, a.name, { result: a.result, status: "ready", message: "" }) : s,
  panelFailed: (s, a) =>
    s.panels[a.name].key === a.key ? setPanel(s, a.name, { result: null, status: "error", message: a.message }) : s,
  panelCleared: (s, a) => setPanel(s, a.name, { key: null, result: null, status: "idle", message: "" }),
};

export function reducer(s, a) {
  const fn = reducers[a.type];
  if (!fn) throw new Error(`unknown action ${a.type}`);
  // a registered panel may take a click as its own (a lesson's answer, lesson.js): `take` gives its new setting
  const taken = takenBy(s, a);
  if (taken?.only) return setUi(s, { [taken.name]: taken.value });
  const next = taken ? setUi(fn(s, a), { [taken.name]: taken.value }) : fn(s, a);
  // opening a head uses up an example's "open its head"
  if (a.type === "headOpened" && s.pending.open) return { ...next, pending: { ...next.pending, open: false } };
  return next;
}
