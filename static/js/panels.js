// The analysis panels: what each one asks, from the state. effects.js sends each panel's request when it
// changes and the store (store.js) keeps each panel's slot; this module only says what to ask and how.

import {
  fetchAttentionJson,
  fetchCompareOrLayer,
  fetchDecode,
  fetchHeadTypes,
  fetchInterveneOrDeltas,
  fetchPerturb,
  fetchTopHeads,
  analyse,
} from "./api.js";
import {
  compareRequest,
  decodeRequest,
  headTypesRequest,
  interveneRequest,
  perturbRequest,
  topHeadsRequest,
} from "./requests.js";
import { perturbBatchRequest, perturbSourceRequest } from "./perturbbodies.js";
import { TOP_K } from "./tophead.js";
import { headTypesInclude } from "./headtypes.js";
import { probeRequest } from "./probe.js";
import { act } from "./actions.js";
import { slots } from "./registry.js";
import { defaultPerturbPosition, modelInfo, perturbItem, perturbSide, singleOf } from "./selectors.js";
import { can } from "./capabilities.js";

// One entry per panel: `request(state)` is the body to send now (null: nothing to ask, the panel clears), `fetch`
// sends it, `after(result)` does what the answer calls for outside the page state (a download), `then(state,
// result)` an action to dispatch once it lands. A panel that asks again on a button press folds its slot's
// `nonce` into the key. `debounce` (ms) waits for a slider to settle.
export const PANEL_SPECS = {
  headTypes: {
    fetch: fetchHeadTypes,
    request: (s) =>
      s.run.request ? { ...headTypesRequest(singleOf(s)), ...headTypesInclude(s.ui), ...probeRequest(s.ui) } : null,
    keep: true, // the old table stays while the new one loads
  },
  top: {
    fetch: fetchTopHeads,
    request: (s) => {
      const pair = s.ui.pair;
      if (!s.run.result || !pair || !pair.every((v) => v != null)) return null;
      const total = s.run.result.config.n_layers * s.run.result.config.n_heads;
      return topHeadsRequest(singleOf(s), pair, Math.min(TOP_K, total));
    },
    keep: true,
    then: (s, result) => {
      if (!s.pending.open || !result.heads.length) return null;
      const best = result.heads[0];
      return act.headOpened(best.layer, best.head, result.query, "top-heads-panel");
    },
  },
  perturb: {
    fetch: fetchPerturb,
    request: (s) => {
      if (!s.ui.perturbOn || !s.run.result) return null;
      // a cross-attention run perturbs a query or a source position, with the source as run
      const side = perturbSide(s);
      const S = side === "source" ? s.run.result.source_tokens.length : s.run.result.tokens.length;
      const p = Math.max(0, Math.min(S - 1, s.ui.perturb.position ?? defaultPerturbPosition(s)));
      if (side) return perturbSourceRequest(s.run.request, side, p, s.ui.perturb);
      // a batch perturbs one item inside the batch (every item padded to S); one sequence as before
      const item = perturbItem(s);
      if (item != null) return perturbBatchRequest(s.run.request, item, p, s.ui.perturb);
      return perturbRequest(singleOf(s), p, s.ui.perturb);
    },
    nonce: true,
  },
  intervene: {
    fetch: fetchInterveneOrDeltas,
    request: (s) => {
      if (!s.run.result || (!s.ui.ablate.length && !s.ui.edits.length)) return null;
      const { layer: _layer, ...attention } = singleOf(s);
      return interveneRequest({ ...attention, include: ["weights"] }, s.ui.ablate, s.ui.edits, INTERVENE_TOP_K);
    },
  },
  compare: {
    fetch: fetchCompareOrLayer,
    request: (s) => {
      if (!s.ui.pin || !s.run.request) return null;
      const m = modelInfo(s);
      const layer = !m || m.layers <= 1 || s.ui.layer === "all" ? null : s.ui.layer;
      return { ...compareRequest(s.ui.pin, singleOf(s), layer), fallbackLayer: s.ui.focus ? s.ui.focus[0] : 0 };
    },
  },
  decode: {
    fetch: fetchDecode,
    request: (s) => {
      if (!s.ui.decodeOn || !s.run.request) return null;
      return decodeRequest(singleOf(s), can(modelInfo(s), "predicts_tokens") ? s.ui.decodeGen : null);
    },
    nonce: true,
  },
  nextWords: {
    fetch: fetchAttentionJson,
    // a model that predicts tokens says what comes next in config.next_word, but only when the run went through its
    // last layer; a run that stopped early asks once more, without the matrices
    request: (s) => {
      const r = s.run.result;
      const m = modelInfo(s);
      const c = r ? r.config : null;
      if (!r || c.next_word?.length || !m?.vocab || c.layers_computed >= c.n_layers) return null;
      const { layer: _layer, ...rest } = s.run.request;
      return { ...rest, include: [] };
    },
  },
};

// PANEL_SPECS and a spec for each slot of the registered panels (registry.js slots), from its declaration: it asks
// its analysis by name with the body its `request` makes of the state, its panel's setting and its slot.
export function panelSpecs() {
  const declared = slots().map(([name, p]) => [
    name,
    {
      fetch: (req, signal) => analyse(p.analysis, req, signal),
      request: (s) => p.request(s, s.ui[p.panel], s.panels[name]),
      debounce: p.debounce,
      keep: p.keep,
      nonce: p.nonce,
      after: p.after,
    },
  ]);
  return { ...PANEL_SPECS, ...Object.fromEntries(declared) };
}

export const INTERVENE_TOP_K = 5;
