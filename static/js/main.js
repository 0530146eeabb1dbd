// attnlab's page: one state object, one `run()` that asks the API, one `render()` that redraws every view.
// Each view lives in its own module; this file wires controls to state and state to views. The modules that act on
// state (controls.js, interactions.js, analysis-panels.js, experiments.js) get it as a context ({state, app, actions}) from here and
// never import this file; panels.js draws the small read-only panels from what it is given. mechanics.js holds the
// chapter's mechanics panels (decoding with a KV cache, cost, audit, the scaling sweep) the same way.

import { describeError, fetchAttention, fetchModels, isTooLarge } from "./api.js";
import { createAnalysisPanels } from "./analysis-panels.js";
import { drawnEligibility, renderBugBanner, renderSums } from "./bugs.js";
import { maxAbsEligible, scaleFor } from "./colors.js";
import { createControls } from "./controls.js";
import { createExperiments } from "./experiments.js";
import { renderEligibility } from "./eligibility.js";
import { resolvePair } from "./examples.js";
import { renderFlow } from "./flow.js";
import { renderFocus } from "./focus.js";
import { PAGE_SIZE, renderHeads } from "./heads.js";
import { createInteractions } from "./interactions.js";
import { createMechanics } from "./mechanics.js";
import { clampMasks, diffResults, paddedFromFlags, splitTokens } from "./masks.js";
import {
  hideError,
  renderLegend,
  renderNotice,
  renderNumbersPanel,
  renderPairs,
  renderSummary,
  setBusy,
  showError,
} from "./panels.js";
import { renderRetrieval } from "./retrieval.js";
import { itemResult, renderBatchBar } from "./batch.js";
import { decodeState, defaultState, stateForModel } from "./state.js";
import { batchOf, buildRequest, singleRequest, sourceOf } from "./requests.js";
import { renderStats } from "./stats.js";
import { renderTokens } from "./tokens.js";

const DEBOUNCE_MS = 80;
const WHITESPACE_MODELS = ["textbook", "random", "custom", "induction"];

const state = defaultState();
const app = {
  models: [],
  result: null, // the last good response, as the views show it (one item of a batch)
  full: null, // the last good response as it came (a batch keeps its leading axis)
  request: null, // the /api/attention body that gave it
  single: null, // that body as one sequence (the batch's item, no source, no bug): what every other endpoint runs
  prev: null, // the one before, for "what changed"
  diff: null,
  lastAction: "",
  highlight: null, // {q, k} lit up across every head
  controller: null,
  seq: 0,
  timer: null,
  view: null,
  skipDiff: false, // the next result shows another layer or input: no "what changed" for it
  notice: "", // why the page shows one layer when all were asked for
  pendingPair: null, // an example's {query, key} words, placed once its tokens come back
  pendingOpen: false, // open the pair's top head once it is known
  headTypes: { key: null, result: null, status: "idle", message: "", controller: null, seqLen: 0 },
  top: { key: null, result: null, status: "idle", message: "", controller: null },
  // the experiment panels: POST /api/perturb, /api/intervene and /api/compare
  perturb: { key: null, asked: null, result: null, status: "idle", message: "", controller: null },
  intervene: { key: null, asked: null, result: null, status: "idle", message: "", controller: null },
  compare: { key: null, asked: null, result: null, status: "idle", message: "", controller: null },
  editPrefill: null, // the cell the weight-edit form was last filled from
};

const $ = (id) => document.getElementById(id);

// The views that live in other modules get the state through this context, never by importing main.js.
const actions = { info, run, render, schedule };
const ctx = { state, app, actions };
const { refreshHeadTypes, refreshTopHeads, renderHeadTypesPanel, renderTopPanel, onPair, openHead } = createAnalysisPanels(ctx);
const { onPad, onSourcePad, onCellToggle, onOpen, onQuery, onTokenHover, onCellHover } = createInteractions(ctx);
const { writeControls, updateUrl, bindControls, fillModels } = createControls(ctx);
const { bindExperiments, renderExperiments, onAblate } = createExperiments(ctx);
const { bindMechanics, renderMechanics } = createMechanics(ctx);
Object.assign(actions, { updateUrl, renderHeadTypesPanel, refreshHeadTypes, refreshTopHeads, onPair, openHead });

// ---- state -> API -------------------------------------------------------------------------------------------

function info(name = state.model) {
  return app.models.find((m) => m.name === name) || null;
}

function sameInput(result) {
  return (
    result &&
    result.model === state.model &&
    app.resultText === state.text &&
    app.resultBatch === JSON.stringify(batchOf(state)) &&
    app.resultOptions === JSON.stringify(state.options)
  );
}

// How many positions the request will have: whitespace models split the text here (a batch: its longest text);
// others ask the server once.
async function sequenceLength(signal) {
  if (state.matrices) return state.matrices.x.length;
  const texts = batchOf(state);
  if (WHITESPACE_MODELS.includes(state.model)) {
    return texts ? Math.max(...texts.map((t) => splitTokens(t).length)) : splitTokens(state.text).length;
  }
  if (sameInput(app.result)) return app.result.tokens.length;
  if (!state.masks.padded.length && !state.masks.blocked.length) return 0;
  const probe = { ...buildRequest({ ...state, masks: { ...state.masks, padded: [], blocked: [] } }, info(), 0), include: [] };
  const r = await fetchAttention(probe, signal);
  return r.tokens.length;
}

function schedule(action) {
  if (action) app.lastAction = action;
  clearTimeout(app.timer);
  app.timer = setTimeout(run, DEBOUNCE_MS);
}

async function run() {
  clearTimeout(app.timer);
  if (app.controller) app.controller.abort();
  const controller = new AbortController();
  app.controller = controller;
  const seq = ++app.seq;
  setBusy(true);
  let retry = false;
  try {
    const S = await sequenceLength(controller.signal);
    const source = sourceOf(state);
    if (S > 0) state.masks = clampMasks(state.masks, S, source ? splitTokens(source).length : S);
    const req = buildRequest(state, info(), S);
    const result = await fetchAttention(req, controller.signal);
    if (seq !== app.seq) return;
    app.prev = app.result;
    app.full = result;
    state.item = Math.min(state.item, (result.config.batch || 1) - 1);
    app.result = itemResult(result, state.item);
    app.request = req;
    app.single = singleRequest(req, state.item);
    app.resultText = state.text;
    app.resultBatch = JSON.stringify(batchOf(state));
    app.resultOptions = JSON.stringify(state.options);
    settle(result);
    app.diff = app.skipDiff ? null : diffResults(app.prev, result, currentLayerIndex());
    app.skipDiff = false;
    if (state.layer === "all") app.notice = "";
    hideError();
    placePendingPair(result);
    refreshHeadTypes();
    refreshTopHeads();
  } catch (err) {
    if (err && err.name === "AbortError") return;
    if (seq !== app.seq) return;
    if (isTooLarge(err) && state.layer === "all") {
      // every layer at once is more than the server sends: show one layer and say why
      const layer = state.focus ? state.focus[0] : 0;
      app.notice =
        `${describeError(err).message} The page shows layer ${layer}; pick another in the Layer menu. ` +
        "The head-types table below still covers every layer.";
      state.layer = layer;
      state.page = 0;
      app.skipDiff = true;
      retry = true;
    } else {
      showError(err);
    }
  } finally {
    if (seq === app.seq) setBusy(false);
  }
  if (retry) return run();
  render();
}

// An example that names a pair by its words ("it" -> "animal") gets it placed on the model's own tokens.
function placePendingPair(result) {
  const want = app.pendingPair;
  if (!want) return;
  app.pendingPair = null;
  if (want.model !== result.model) return;
  const pair = resolvePair(result.tokens, want);
  if (!pair) return;
  state.pair = pair;
  state.query = pair[0];
}

// Keep state inside what the new result allows (a query past the end, a head that no longer exists).
function settle(result) {
  const S = result.tokens.length;
  if (state.query != null && state.query >= S) state.query = S - 1;
  const K = result.source_tokens ? result.source_tokens.length : S;
  if (state.pair && (state.pair[0] >= S || state.pair[1] >= K)) state.pair = null;
  const nLayers = result.config.n_layers;
  if (state.layer !== "all" && state.layer >= nLayers) state.layer = 0;
  if (state.focus) {
    const [l, h] = state.focus;
    const layer = result.layers.find((x) => x.index === l);
    if (!layer || h >= layer.heads.length) state.focus = null;
  }
}

function currentLayerIndex() {
  if (!app.result) return 0;
  if (state.layer === "all") return state.focus ? state.focus[0] : 0;
  return state.layer;
}

// ---- render ---------------------------------------------------------------------------------------------------

function buildView() {
  const r = app.result;
  const layers = state.layer === "all" ? r.layers : r.layers.filter((l) => l.index === state.layer);
  const shown = layers.length ? layers : r.layers.slice(0, 1);
  const heads = shown.flatMap((l) => l.heads.map((head) => ({ layer: l.index, head })));
  const allHeads = heads.map((h) => h.head);
  const maxAbs = maxAbsEligible(allHeads, r.eligible);
  const wanted = state.focus && r.layers.find((l) => l.index === state.focus[0]);
  const focus = wanted ? state.focus : [heads[0].layer, heads[0].head.index];
  const focusLayer = wanted || shown[0];
  const diff = app.diff && app.diff.comparable ? app.diff : null;
  const cross = !!r.source_tokens;
  return {
    tokens: r.tokens,
    keyTokens: cross ? r.source_tokens : null, // cross-attention: the columns are the source's positions
    item: r.item ?? 0,
    eligible: drawnEligibility(r.eligible, r.demo_bug?.name),
    masks: cross
      ? { causal: false, window: null, padded: paddedFromFlags(app.request.source?.padding), blocked: r.masks.blocked }
      : {
          causal: r.masks.causal,
          window: r.masks.window,
          padded: paddedFromFlags(r.masks.padding),
          blocked: r.masks.blocked,
        },
    blocked: r.masks.blocked,
    view: state.view,
    palette: state.palette,
    multiLayer: r.config.n_layers > 1,
    heads,
    page: state.page,
    nHeads: r.config.n_heads,
    kvGroups: r.config.n_kv_heads,
    config: r.config,
    scale: scaleFor(state.view, state.palette, maxAbs),
    weightScale: scaleFor("weights", state.palette, maxAbs),
    changed: diff ? [...diff.newlyMasked, ...diff.newlyEligible] : [],
    focus,
    query: state.query ?? r.tokens.length - 1,
    focusLayer,
    focusHead: focusLayer.heads[focus[1]] || focusLayer.heads[0],
    layer: focusLayer,
    highlight: app.highlight,
    pair: state.pair,
    ablate: state.ablate,
  };
}

function render() {
  writeControls();
  updateUrl();
  if (!app.result) return;
  const view = buildView();
  app.view = view;
  const batched = !!app.result.config.batch;
  renderTokens(
    $("tokens"),
    // a batch item's padding comes from its length; with a source, padding applies to the source's positions
    {
      tokens: view.tokens,
      masks: batched ? view.masks : view.keyTokens ? { padded: [] } : state.masks,
      locked: batched || !!view.keyTokens,
    },
    { onPad, onHover: onTokenHover },
  );
  renderBatchBar($("batch-bar"), {
    full: app.full,
    item: view.item,
    sourceTokens: view.keyTokens,
    sourcePadded: view.masks.padded,
    onSourcePad,
  });
  renderPairs($("pair-counts"), app.result.pairs);
  renderBugBanner($("demo-bug"), app.result.demo_bug);
  renderLegend(view);
  const hs = renderHeads($("heads-grid"), $("heads-pager"), view, { onOpen, onHover: onCellHover, onAblate });
  state.page = hs.page;
  $("heads-title").textContent =
    `Heads: ${state.view} · ${view.heads.length} head${view.heads.length === 1 ? "" : "s"}` +
    (view.multiLayer ? (state.layer === "all" ? " · all layers" : ` · layer ${state.layer}`) : "");
  const [fl, fh] = view.focus;
  $("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  renderFocus($("focus-plot"), view, view.focusHead, fl, onCellToggle);
  renderSums($("sums"), {
    weights: view.focusHead.weights,
    tokens: view.tokens,
    keyTokens: view.keyTokens,
    bug: app.result.demo_bug?.name,
  });
  $("retrieval-title").textContent = `Retrieval · ${view.multiLayer ? `L${fl} ` : ""}head ${fh} · query ${view.query} “${view.tokens[view.query]}”`;
  renderRetrieval($("retrieval"), view, view.focusHead, view.query, onQuery, (k) => onPair(view.query, k));
  $("flow-title").textContent = view.multiLayer ? `Multi-head flow · layer ${view.layer.index}` : "Multi-head flow";
  renderFlow($("flow"), $("flow-caption"), view, view.layer, onOpen);
  renderNumbersPanel(view);
  renderEligibility($("eligibility"), view, onCellToggle);
  renderStats($("stats"), $("similarity"), view, view.heads);
  renderSummary(view, app.diff, app.lastAction);
  renderNotice(app.notice);
  renderHeadTypesPanel();
  renderTopPanel();
  renderExperiments();
  renderMechanics();
  const t = app.result.timings_ms;
  const total = Object.values(t).reduce((a, b) => a + b, 0);
  $("timing").textContent = `${app.result.config.device} · ${app.result.config.dtype} · ${total.toFixed(1)} ms`;
  $("server-info").textContent = `${app.result.model} · ${view.nHeads} head${view.nHeads === 1 ? "" : "s"} × ${app.result.config.n_layers} layer${app.result.config.n_layers === 1 ? "" : "s"}`;
  performance.mark("attnlab:drawn"); // every view of this result is painted (the claim panels follow on their own)
}

async function init() {
  bindControls();
  bindExperiments();
  bindMechanics();
  try {
    app.models = await fetchModels();
  } catch (err) {
    showError(err);
    return;
  }
  fillModels();
  const fromUrl = decodeState(location.search);
  if (fromUrl && info(fromUrl.model)) {
    const base = stateForModel(info(fromUrl.model));
    Object.assign(state, fromUrl, {
      options: { ...base.options, ...fromUrl.options },
      masks: fromUrl.masks ?? base.masks,
    });
    if (!state.text) state.text = base.text;
  } else {
    const first = info("textbook") || app.models[0];
    Object.assign(state, stateForModel(first));
  }
  writeControls();
  await run();
}

init();

export { state, PAGE_SIZE };
