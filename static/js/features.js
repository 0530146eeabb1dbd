// The page's features outside the analysis panels (registry.js): a control with settings of its own in the state
// and the link, actions of its own, and perhaps a field of its own in the /api/attention body. Each is one module
// whose `feature` export is its one declaration, and one line in FEATURES below; the generic modules read them from
// here and name none: state.js (its fields' defaults, its link keys), actions.js (its action creators, act.TYPE),
// store.js (its reducer cases, what a model change keeps), requests.js (its body fields) and controls.js (the
// control an error on its field marks). Adding a feature is its module (the view, with its declaration), its
// template element (included by index.html) and its line here. A view that dispatches the page's other actions
// (act, actions.js) keeps its feature's declaration in a module of settings beside it that imports nothing
// (headfilters.js, claimsettings.js, interventionsettings.js): actions.js reads the declarations, so the view itself
// would import itself back, and the exported file, which runs the page's actions, would carry the view along.
// A declaration:
//
//   ui         {FIELD: default}: its settings, kept in the state's ui (state.js defaultState; each state a copy)
//   forModel(info) -> {FIELD: value}: what a model (its /api/models entry) opens with (state.js stateForModel);
//              absent: the defaults
//   link       {write(ui, params), read(params) -> {FIELD: value}}: its URL keys (state.js encodeState and
//              decodeState); read gets the link's URLSearchParams and returns its fields as the link sets them, a
//              value it cannot read falling back to the default
//   page       {FIELD: default}: state of its own beside ui, not in the link (store.js initialState)
//   draft      [FIELD]: its settings typed in a box of their own, kept as typed in the store's draft until Run
//              copies them into ui (store.js sequenceSubmitted)
//   keep(ui)   {FIELD: value} kept on a model change from the old ui (store.js chooseModel); absent: every field
//   example(ex) -> {FIELD: value}: what choosing an example (examples.js) sets of its settings; absent: nothing
//   newText(ui, n) -> {FIELD: value}: what a new sequence of n words (Run) sets of its settings; absent: nothing
//   actions    {TYPE: creator(...) -> {type: TYPE, ...}}: what its control dispatches; actions.js adds each to `act`
//   reduce     {TYPE: (state, action, {runWith, setUi, setPanel}) -> state}: its reducer cases; runWith(s, fields,
//              words, where) changes ui and asks for a run credited to the person's words, setUi(s, fields) changes
//              ui only, setPanel(s, slot, fields) changes an analysis slot, single(s) is the run's body as one
//              sequence (selectors.js singleOf: a declaration that needs it would import the features' table back)
//   request(ui, info, seqLen) -> {FIELD: value}: what it adds to the /api/attention body over seqLen positions
//              (0: not known; requests.js buildRequest)
//   body       the names of the body fields its request may add
//   reshape(body, ui, info, seqLen) -> body: the /api/attention body as its settings reshape it (a batch, a
//              source; requests.js buildRequest), every feature's fields in
//   alone(body, item) -> body: the body as one plain sequence, item `item` of its own kind (requests.js
//              singleRequest: what the one-sequence analyses run)
//   extent(body, words) -> {queries?, keys?, items?}: how many queries, keys and items its fields give an answer
//              (requests.js resultValues; `words(text)` counts a text's positions at most)
//   replace(body, ui, info) -> body | null: a body of its own that the model `info` is sent instead of the
//              /api/attention body (which it gets whole, every feature's fields in), with no batch or source; null:
//              the attention body
//   reach      where its body fields go beyond /api/attention: "attention" (nowhere else: every analysis computes
//              without them), "weights" (the bodies answered with weights too, intervene and compare; not the
//              claims' bodies, nor the size of an answer) or "claims" (every analysis of the code on screen:
//              intervene, compare, perturb; not those that run the correct code, head types, top heads and decoding,
//              nor the size of an answer) or "every" (every body the page sends, but not the size of an answer);
//              absent: every body the page sends, and the size of an answer
//   errors     {BODY FIELD: control id}: the control an error on that field marks (controls.js controlFor)
// Pure: no DOM.

import { feature as sinks } from "./sinks.js";
import { feature as counting } from "./counting.js";
import { feature as dtype } from "./dtype.js";
import { feature as bugs } from "./bugs.js";
import { feature as palette } from "./palette.js";
import { feature as scoring } from "./scoring.js";
import { feature as headfilters } from "./headfilters.js";
import { feature as decode } from "./decode.js";
import { feature as interventions } from "./interventionsettings.js";
import { feature as claims } from "./claimsettings.js";
import { feature as trained } from "./trainmeasures.js";
import { feature as pin } from "./pin.js";
import { feature as masks } from "./masks.js";
import { feature as sourcebatch } from "./sourcebatch.js";
import { feature as numbers } from "./numbersettings.js";
import { feature as typed } from "./typedsettings.js";

// name -> declaration, in the order the link writes their keys
export const FEATURES = {
  masks,
  sourcebatch,
  numbers,
  typed,
  pin,
  scoring,
  palette,
  headfilters,
  interventions,
  claims,
  decode,
  bugs,
  sinks,
  counting,
  dtype,
  trained,
};

const declared = () => Object.values(FEATURES);

// {FIELD: default} of every feature's settings.
export function featureDefaults() {
  return structuredClone(Object.assign({}, ...declared().map((f) => f.ui || {})));
}

// What every feature sets for a model `info` (its /api/models entry) a person chooses.
export function featuresForModel(info) {
  return Object.assign({}, ...declared().map((f) => (f.forModel ? f.forModel(info) : {})));
}

// {FIELD: default} of every feature's state beside ui.
export function featurePage() {
  return Object.assign({}, ...declared().map((f) => f.page || {}));
}

// Every feature's link keys written into URLSearchParams `p` from `ui`.
export function writeFeatureLinks(ui, p) {
  for (const f of declared()) f.link?.write(ui, p);
}

// Every feature's fields as the link's URLSearchParams `p` sets them.
export function readFeatureLinks(p) {
  return Object.assign({}, ...declared().map((f) => (f.link ? f.link.read(p) : {})));
}

// What a model change keeps of every feature's settings in `ui`.
export function keptOnModel(ui) {
  const kept = (f) => (f.keep ? f.keep(ui) : Object.fromEntries(Object.keys(f.ui || {}).map((k) => [k, ui[k]])));
  return Object.assign({}, ...declared().map(kept));
}

// What a new sequence of n words sets of every feature's settings.
export function newTextFields(ui, n) {
  return Object.assign({}, ...declared().map((f) => (f.newText ? f.newText(ui, n) : {})));
}

// The first body a feature sends instead of `body` for the model `info`; null when none does.
export function replacedBody(body, ui, info) {
  for (const f of declared()) {
    const own = f.replace ? f.replace(body, ui, info) : null;
    if (own) return own;
  }
  return null;
}

// {FIELD: value} of every feature's settings typed in a box of their own (the store's draft), from `ui`.
export function featureDrafts(ui) {
  return Object.fromEntries(declared().flatMap((f) => (f.draft || []).map((k) => [k, ui[k]])));
}

// `body` as every feature reshapes it, in turn.
export function reshapedBody(body, ui, info, seqLen) {
  return declared().reduce((b, f) => (f.reshape ? f.reshape(b, ui, info, seqLen) : b), body);
}

// `body` as one plain sequence, item `item`, as every feature gives it back.
export function oneSequence(body, item) {
  return declared().reduce((b, f) => (f.alone ? f.alone(b, item) : b), body);
}

// The queries, keys and items every feature's fields of `body` give its answer.
export function bodyExtent(body, words) {
  return Object.assign({}, ...declared().map((f) => (f.extent ? f.extent(body, words) : {})));
}

// What choosing example `ex` sets of every feature's settings.
export function exampleFields(ex) {
  return Object.assign({}, ...declared().map((f) => (f.example ? f.example(ex) : {})));
}

// {TYPE: creator} of every feature's actions; a type declared twice is a mistake of the declarations.
export function featureActions() {
  const out = {};
  for (const [name, f] of Object.entries(FEATURES)) {
    for (const [type, make] of Object.entries(f.actions || {})) {
      if (type in out) throw new Error(`action ${type} is declared twice (again by ${name})`);
      out[type] = make;
    }
  }
  return out;
}

// {TYPE: (state, action) -> state} of every feature's reducer cases, given the store's helpers.
export function featureReducers(tools) {
  const out = {};
  for (const f of declared()) {
    for (const [type, fn] of Object.entries(f.reduce || {})) out[type] = (s, a) => fn(s, a, tools);
  }
  return out;
}

// The fields every feature adds to the /api/attention body of `ui` for the model `info`.
export function featureBody(ui, info, seqLen = 0) {
  return Object.assign({}, ...declared().map((f) => (f.request ? f.request(ui, info, seqLen) : {})));
}

// The body fields of the features whose reach is `reach` ("attention", "weights", "claims" or "every"), by name.
export function bodyFields(reach) {
  return declared()
    .filter((f) => f.reach === reach)
    .flatMap((f) => f.body || []);
}

// {BODY FIELD: control id} of every feature.
export function errorControls() {
  return Object.assign({}, ...declared().map((f) => f.errors || {}));
}

// `body` without the fields named.
export function without(body, fields) {
  const out = { ...body };
  for (const k of fields) delete out[k];
  return out;
}
