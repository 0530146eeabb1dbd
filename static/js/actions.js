// The page's actions: what a person or an effect did, as plain objects the store's reducer (store.js) takes.
// Pure and free of the store, so a view that must stay free of the page's store (overview.js, which an exported
// standalone page also runs) can name an action without writing its shape out again. A page feature's actions are
// its declaration's (features.js), added to `act` here.

import { featureActions } from "./features.js";

export const act = {
  modelsLoaded: (models) => ({ type: "modelsLoaded", models }),
  modelsFailed: (error) => ({ type: "modelsFailed", error }),
  restored: (ui) => ({ type: "restored", ui }),
  modelChosen: (name, where, extra = {}) => ({ type: "modelChosen", name, where, ...extra }),
  exampleChosen: (example, text) => ({ type: "exampleChosen", example, text }),
  draftTyped: (field, value) => ({ type: "draftTyped", field, value }),
  sequenceSubmitted: (where) => ({ type: "sequenceSubmitted", where }),
  viewSet: (view) => ({ type: "viewSet", view }),
  layerSet: (layer) => ({ type: "layerSet", layer }),
  optionSet: (key, value) => ({ type: "optionSet", key, value }),
  pageSet: (page) => ({ type: "pageSet", page }),
  querySet: (query) => ({ type: "querySet", query }),
  headOpened: (layer, head, query, where) => ({ type: "headOpened", layer, head, query, where }),
  pairSet: (q, k) => ({ type: "pairSet", q, k }),
  highlightSet: (highlight) => ({ type: "highlightSet", highlight }),
  tokensOpenSet: (open) => ({ type: "tokensOpenSet", open }),
  cursorSet: (cursor) => ({ type: "cursorSet", cursor }),
  errorDismissed: () => ({ type: "errorDismissed" }),
  // mechanics
  panelAsked: (name, extra = {}) => ({ type: "panelAsked", name, ...extra }),
  panelSet: (name, value) => ({ type: "panelSet", name, value }), // a registered panel's setting (registry.js)
  // effects
  runStarted: (asking = "all") => ({ type: "runStarted", asking }),
  layersTooMany: (key) => ({ type: "layersTooMany", key }),
  runProgress: (stage, done, total, ahead = null) => ({ type: "runProgress", stage, done, total, ahead }),
  // `sent`: the fields of ui as the run sent them (effects.js: the masks fitted to its positions), which ui takes;
  // `partial`: the answer's head (the layer shown), the other layers still to come (runRest or restFailed)
  runSucceeded: (result, request, sent, partial = false) => ({
    type: "runSucceeded",
    result,
    request,
    sent,
    partial,
  }),
  runRest: (result) => ({ type: "runRest", result }), // the whole answer, once every layer is in
  restFailed: (error) => ({ type: "restFailed", error }),
  runFailed: (error) => ({ type: "runFailed", error }),
  runTooLarge: (message, key = null) => ({ type: "runTooLarge", message, key }),
  panelStarted: (name, key) => ({ type: "panelStarted", name, key }),
  panelLoaded: (name, key, result) => ({ type: "panelLoaded", name, key, result }),
  panelFailed: (name, key, message) => ({ type: "panelFailed", name, key, message }),
  panelCleared: (name) => ({ type: "panelCleared", name }),
  ...featureActions(),
};
