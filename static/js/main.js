// attnlab's page: one state object, one `run()` that asks the API, one `render()` that redraws every view.
// Each view lives in its own module; this file wires controls to state and state to views.

import {
  ApiError,
  describeError,
  fetchAttention,
  fetchAttentionNpz,
  fetchHeadTypes,
  fetchModels,
  fetchTopHeads,
  isTooLarge,
} from "./api.js";
import { PALETTES, RDBU, maxAbsEligible, scaleFor } from "./colors.js";
import { renderEligibility } from "./eligibility.js";
import { EXAMPLES, exampleText, resolvePair } from "./examples.js";
import { download, headsPng } from "./exporter.js";
import { renderFlow } from "./flow.js";
import { renderFocus } from "./focus.js";
import { PAGE_SIZE, highlightHeads, renderHeads, visibleCanvases } from "./heads.js";
import { COLUMNS, measuredOn, renderBest, renderHeadTypes } from "./headtypes.js";
import {
  clampMasks,
  diffResults,
  paddedFromFlags,
  splitTokens,
  toggleBlocked,
  togglePadded,
} from "./masks.js";
import { renderMatrices, renderNumbers, setEntry } from "./matrices.js";
import { renderRetrieval } from "./retrieval.js";
import {
  RANDOM_OPTIONS,
  buildRequest,
  decodeState,
  defaultState,
  encodeState,
  fitRows,
  headTypesRequest,
  stateForModel,
  topHeadsRequest,
} from "./state.js";
import { renderStats } from "./stats.js";
import { renderTokens } from "./tokens.js";
import { TOP_K, renderTopHeads } from "./tophead.js";

const DEBOUNCE_MS = 80;
const WHITESPACE_MODELS = ["textbook", "random", "custom", "induction"];

const state = defaultState();
const app = {
  models: [],
  result: null, // the last good response
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
};

const $ = (id) => document.getElementById(id);

// ---- state -> API -------------------------------------------------------------------------------------------

function info(name = state.model) {
  return app.models.find((m) => m.name === name) || null;
}

function sameInput(result) {
  return result && result.model === state.model && app.resultText === state.text && app.resultOptions === JSON.stringify(state.options);
}

// How many positions the request will have: whitespace models split the text here; others ask the server once.
async function sequenceLength(signal) {
  if (state.matrices) return state.matrices.x.length;
  if (WHITESPACE_MODELS.includes(state.model)) return splitTokens(state.text).length;
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
    if (S > 0) state.masks = clampMasks(state.masks, S);
    const req = buildRequest(state, info(), S);
    const result = await fetchAttention(req, controller.signal);
    if (seq !== app.seq) return;
    app.prev = app.result;
    app.result = result;
    app.request = req;
    app.resultText = state.text;
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
  if (state.pair && state.pair.some((p) => p != null && p >= S)) state.pair = null;
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
  return {
    tokens: r.tokens,
    eligible: r.eligible,
    masks: {
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
  };
}

function render() {
  writeControls();
  updateUrl();
  if (!app.result) return;
  const view = buildView();
  app.view = view;
  renderTokens($("tokens"), { tokens: view.tokens, masks: state.masks }, { onPad, onHover: onTokenHover });
  renderLegend(view);
  const hs = renderHeads($("heads-grid"), $("heads-pager"), view, { onOpen, onHover: onCellHover });
  state.page = hs.page;
  $("heads-title").textContent =
    `Heads: ${state.view} · ${view.heads.length} head${view.heads.length === 1 ? "" : "s"}` +
    (view.multiLayer ? (state.layer === "all" ? " · all layers" : ` · layer ${state.layer}`) : "");
  const [fl, fh] = view.focus;
  $("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  renderFocus($("focus-plot"), view, view.focusHead, fl, onCellToggle);
  $("retrieval-title").textContent = `Retrieval · ${view.multiLayer ? `L${fl} ` : ""}head ${fh} · query ${view.query} “${view.tokens[view.query]}”`;
  renderRetrieval($("retrieval"), view, view.focusHead, view.query, onQuery, (k) => onPair(view.query, k));
  $("flow-title").textContent = view.multiLayer ? `Multi-head flow · layer ${view.layer.index}` : "Multi-head flow";
  renderFlow($("flow"), $("flow-caption"), view, view.layer, onOpen);
  renderNumbersPanel(view);
  renderEligibility($("eligibility"), view, onCellToggle);
  renderStats($("stats"), $("similarity"), view, view.heads);
  renderSummary(view);
  renderNotice();
  renderHeadTypesPanel();
  renderTopPanel();
  const t = app.result.timings_ms;
  const total = Object.values(t).reduce((a, b) => a + b, 0);
  $("timing").textContent = `${app.result.config.device} · ${app.result.config.dtype} · ${total.toFixed(1)} ms`;
  $("server-info").textContent = `${app.result.model} · ${view.nHeads} head${view.nHeads === 1 ? "" : "s"} × ${app.result.config.n_layers} layer${app.result.config.n_layers === 1 ? "" : "s"}`;
}

function renderNotice() {
  const n = $("heads-notice");
  n.textContent = app.notice;
  n.hidden = !app.notice;
}

// ---- head types and top heads: their own requests, redrawn on their own when they answer ----------------------

function refreshHeadTypes() {
  const ht = app.headTypes;
  const req = headTypesRequest(app.request);
  const key = JSON.stringify(req);
  if (ht.key === key) return;
  ht.key = key;
  if (ht.controller) ht.controller.abort();
  const controller = new AbortController();
  ht.controller = controller;
  const seqLen = app.result.tokens.length;
  if (ht.result && ht.result.model !== req.model) ht.result = null;
  ht.status = "loading";
  renderHeadTypesPanel();
  fetchHeadTypes(req, controller.signal)
    .then((result) => {
      if (ht.controller !== controller) return;
      Object.assign(ht, { result, status: "ready", message: "", seqLen });
    })
    .catch((err) => {
      if (ht.controller !== controller || (err && err.name === "AbortError")) return;
      Object.assign(ht, { result: null, status: "error", message: describeError(err).message, key: null });
    })
    .finally(() => {
      if (ht.controller !== controller) return;
      ht.controller = null;
      renderHeadTypesPanel();
    });
}

function refreshTopHeads() {
  const t = app.top;
  const pair = state.pair;
  const ready = app.request && app.result && pair && pair.every((v) => v != null);
  const total = ready ? app.result.config.n_layers * app.result.config.n_heads : 0;
  const req = ready ? topHeadsRequest(app.request, pair, Math.min(TOP_K, total)) : null;
  const key = req ? JSON.stringify(req) : null;
  if (t.key === key) return;
  t.key = key;
  if (t.controller) t.controller.abort();
  t.controller = null;
  if (!req) {
    Object.assign(t, { result: null, status: "idle", message: "" });
    renderTopPanel();
    return;
  }
  const controller = new AbortController();
  t.controller = controller;
  t.status = "loading";
  renderTopPanel();
  fetchTopHeads(req, controller.signal)
    .then((result) => {
      if (t.controller !== controller) return;
      Object.assign(t, { result, status: "ready", message: "" });
      if (app.pendingOpen && result.heads.length) {
        // an example that names a pair opens the head that links them most
        app.pendingOpen = false;
        const best = result.heads[0];
        queueMicrotask(() => openHead(best.layer, best.head, result.query));
      }
    })
    .catch((err) => {
      if (t.controller !== controller || (err && err.name === "AbortError")) return;
      Object.assign(t, { result: null, status: "error", message: describeError(err).message, key: null });
    })
    .finally(() => {
      if (t.controller !== controller) return;
      t.controller = null;
      renderTopPanel();
    });
}

function headTypesFilter() {
  return { text: state.hfind, score: state.hscore, min: state.hmin };
}

function renderHeadTypesPanel() {
  const ht = app.headTypes;
  const panel = $("headtypes-panel");
  panel.dataset.state = ht.status;
  const result = ht.result;
  const rows = result ? result.heads : [];
  const multiLayer = result ? result.n_layers > 1 : false;
  const focus = state.focus || (app.view ? app.view.focus : null);
  const status = {
    idle: "",
    loading: "scoring every head…",
    ready: result ? `${rows.length} head${rows.length === 1 ? "" : "s"} · ${result.n_layers} layer${result.n_layers === 1 ? "" : "s"}` : "",
    error: "could not score the heads",
  }[ht.status];
  $("headtypes-status").textContent = status;
  const shown = renderHeadTypes(
    $("headtypes"),
    { rows, sort: state.hsort, dir: state.hdir, filter: headTypesFilter(), focus, multiLayer },
    { sort: onHeadSort, open: (l, h) => openHead(l, h) },
  );
  $("ht-count").textContent = rows.length ? `${shown} of ${rows.length} shown` : "";
  renderBest($("headtypes-best"), rows, multiLayer, (l, h) => openHead(l, h));
  // no rows yet (or none to be had): say why instead of drawing an empty table
  for (const sel of [".ht-best", ".ht-filter", ".ht-scroll", ".ht-legend"]) panel.querySelector(sel).hidden = !rows.length;
  const empty = $("headtypes-empty");
  const failed = ht.status === "error";
  empty.hidden = rows.length > 0;
  empty.classList.toggle("bad", failed);
  empty.textContent = ht.status === "error" ? ht.message : "Scoring every head…";
  $("headtypes-measured").textContent = result ? measuredOn(result, ht.seqLen) : "";
  const probe = $("headtypes-probe");
  probe.hidden = !(result && result.probe_tokens);
  if (result && result.probe_tokens) {
    const key = result.probe_tokens.join(" ");
    const box = $("headtypes-probe-tokens");
    if (box.dataset.key !== key) {
      box.dataset.key = key;
      box.replaceChildren(
        ...result.probe_tokens.map((t, i) => {
          const chip = document.createElement("span");
          chip.className = `probe-token${i >= result.probe_tokens.length / 2 ? " second" : ""}`;
          chip.textContent = t;
          return chip;
        }),
      );
    }
  }
  const legend = $("headtypes-legend");
  if (!legend.childElementCount) {
    for (const c of COLUMNS) {
      const dt = document.createElement("dt");
      dt.textContent = c.label;
      const dd = document.createElement("dd");
      dd.textContent = c.help;
      legend.append(dt, dd);
    }
  }
}

function onHeadSort(column) {
  const current = state.hsort || "head";
  const dir = state.hsort ? state.hdir : "asc";
  if (column === current) {
    state.hsort = column;
    state.hdir = dir === "asc" ? "desc" : "asc";
  } else {
    state.hsort = column;
    state.hdir = column === "head" ? "asc" : "desc";
  }
  if (state.hsort === "head" && state.hdir === "asc") state.hsort = null;
  updateUrl();
  renderHeadTypesPanel();
}

function renderTopPanel() {
  if (!app.result) return;
  const t = app.top;
  renderTopHeads(
    $("top-heads-panel"),
    {
      tokens: app.result.tokens,
      pair: state.pair,
      top: t.result,
      status: t.status,
      message: t.message,
      multiLayer: app.result.config.n_layers > 1,
      total: app.result.config.n_layers * app.result.config.n_heads,
      focus: state.focus || (app.view ? app.view.focus : null),
    },
    { pair: onPair, open: openHead },
  );
}

// Choose the query -> key pair whose top heads are listed; the retrieval diagram follows the query.
function onPair(q, k) {
  state.pair = q == null && k == null ? null : [q, k];
  if (q != null) state.query = q;
  render();
  refreshTopHeads();
}

// Open a head from the head-types table or the top-heads list: its layer in the Layer menu, the head large.
function openHead(layer, head, query) {
  state.focus = [layer, head];
  if (query != null) state.query = query;
  const multi = app.result && app.result.config.n_layers > 1;
  const scroll = () => $("focus-plot").scrollIntoView({ block: "nearest", behavior: "smooth" });
  if (multi && state.layer !== layer) {
    state.layer = layer;
    state.page = 0;
    app.skipDiff = true;
    app.lastAction = "";
    run().then(scroll);
    return;
  }
  render();
  scroll();
}

function renderLegend(view) {
  const root = $("legend");
  root.replaceChildren();
  const s = view.scale;
  const bar = document.createElement("span");
  bar.className = "legend-bar";
  bar.style.background = `linear-gradient(to right, ${s.stops.join(", ")})`;
  const lo = document.createElement("span");
  lo.textContent = s.min.toFixed(view.view === "scores" ? 2 : 0);
  const hi = document.createElement("span");
  hi.textContent = s.max.toFixed(view.view === "scores" ? 2 : 0);
  const name = document.createElement("span");
  name.className = "legend-name";
  name.textContent = s.label;
  const item = (cls, text) => {
    const w = document.createElement("span");
    w.className = "legend-item";
    const sw = document.createElement("span");
    sw.className = `swatch ${cls}`;
    const t = document.createElement("span");
    t.textContent = text;
    w.append(sw, t);
    return w;
  };
  root.append(name, lo, bar, hi, item("sw-masked", "masked"), item("sw-blocked", "blocked by you"), item("sw-changed", "changed by the last toggle"));
}

function renderSummary(view) {
  const p = $("change-summary");
  const d = app.diff;
  if (!d || !d.comparable) {
    p.textContent = "";
    return;
  }
  const facts = [];
  const n = (k, one, many) => `${k} ${k === 1 ? one : many}`;
  if (d.newlyMasked.length) facts.push(`${n(d.newlyMasked.length, "cell", "cells")} became masked`);
  if (d.newlyEligible.length) facts.push(`${n(d.newlyEligible.length, "cell", "cells")} became eligible`);
  if (d.where && d.maxDelta > 1e-6) {
    const w = d.where;
    facts.push(`largest weight change ${d.maxDelta.toFixed(3)} (head ${w.head}, query ${w.q} → key ${w.k})`);
  } else {
    facts.push("no weight changed");
  }
  p.textContent = `${app.lastAction ? `${app.lastAction}: ` : "Changed: "}${facts.join("; ")}.`;
  p.hidden = !view;
}

function renderNumbersPanel(view) {
  const d = $("numbers");
  const h = view.focusHead;
  if (!h.q && !h.contexts) {
    d.hidden = true;
    return;
  }
  d.hidden = false;
  const layer = view.layer;
  renderNumbers($("numbers-body"), view.tokens, [
    [`Q (head ${h.index})`, h.q],
    [`K (kv group ${h.kv_group})`, h.k],
    [`V (kv group ${h.kv_group})`, h.v],
    [`context = weights · V (head ${h.index})`, h.contexts],
    ["output", layer.output],
  ]);
}

// ---- errors, busy ---------------------------------------------------------------------------------------------

function showError(err) {
  const { message, hint } = describeError(err);
  const b = $("error-banner");
  b.querySelector("[data-role=message]").textContent = message;
  b.querySelector("[data-role=hint]").textContent = hint;
  b.hidden = false;
  b.dataset.code = err instanceof ApiError ? err.code || "" : "network";
  $("run-status").textContent = "last run failed; the views show the previous result";
}

function hideError() {
  $("error-banner").hidden = true;
}

function setBusy(busy) {
  $("views").setAttribute("aria-busy", busy ? "true" : "false");
  document.body.classList.toggle("busy", busy);
  $("run-status").textContent = busy ? "computing…" : "";
}

// ---- interactions -----------------------------------------------------------------------------------------------

function onPad(i) {
  state.masks = { ...state.masks, padded: togglePadded(state.masks.padded, i) };
  const on = state.masks.padded.includes(i);
  const tok = app.result ? app.result.tokens[i] : i;
  schedule(`position ${i} “${tok}” ${on ? "marked padding" : "is a real token again"}`);
  renderTokens($("tokens"), { tokens: app.result.tokens, masks: state.masks }, { onPad, onHover: onTokenHover });
}

function onCellToggle(q, k, event) {
  if (event && event.shiftKey) {
    onPair(q, k);
    return;
  }
  const was = state.masks.blocked.some(([a, b]) => a === q && b === k);
  state.masks = { ...state.masks, blocked: toggleBlocked(state.masks.blocked, q, k) };
  schedule(`cell query ${q} → key ${k} ${was ? "unblocked" : "blocked"}`);
}

function onOpen(layer, head, query) {
  state.focus = [layer, head];
  if (query !== null && query !== undefined) state.query = query;
  render();
  $("focus-plot").scrollIntoView({ block: "nearest", behavior: "smooth" });
}

function onQuery(q) {
  state.query = q;
  render();
}

function setHighlight(h) {
  app.highlight = h;
  if (app.view) highlightHeads(h);
  document.querySelectorAll("[data-testid=token]").forEach((b) => {
    const i = Number(b.dataset.index);
    b.classList.toggle("lit", !!h && (h.q === i || h.k === i));
  });
}

function onTokenHover(i) {
  setHighlight(i === null ? null : { q: i, k: i });
}

function onCellHover(cell, event) {
  const tip = $("tooltip");
  if (!cell || !app.view) {
    tip.hidden = true;
    setHighlight(null);
    return;
  }
  const v = app.view;
  const layer = app.result.layers.find((l) => l.index === cell.layer);
  const head = layer.heads[cell.head];
  const ok = v.eligible[cell.q][cell.k];
  const lines = [
    `${v.multiLayer ? `Layer ${cell.layer} · ` : ""}head ${cell.head}`,
    `query ${cell.q} “${v.tokens[cell.q]}” → key ${cell.k} “${v.tokens[cell.k]}”`,
    `score ${head.scores[cell.q][cell.k].toFixed(4)}${ok ? "" : " (before masking)"}`,
    ok ? `weight ${head.weights[cell.q][cell.k].toFixed(4)}` : `masked · weight ${head.weights[cell.q][cell.k].toFixed(4)}`,
  ];
  tip.replaceChildren(...lines.map((l) => Object.assign(document.createElement("div"), { textContent: l })));
  tip.hidden = false;
  const x = Math.min(window.innerWidth - 300, event.clientX + 14);
  tip.style.left = `${x + window.scrollX}px`;
  tip.style.top = `${event.clientY + window.scrollY + 14}px`;
  setHighlight({ q: cell.q, k: cell.k });
}

// ---- controls <-> state ---------------------------------------------------------------------------------------

function writeControls() {
  const m = info();
  $("model-select").value = state.model;
  $("model-description").textContent = m ? m.description : "";
  if (document.activeElement !== $("sequence-input")) $("sequence-input").value = state.text;
  $("mask-causal").checked = state.masks.causal;
  $("mask-window-on").checked = state.masks.window != null;
  if (state.masks.window != null) $("mask-window").value = String(state.masks.window);
  $("all-masked").value = state.allMasked;
  $("scale").checked = state.scale;
  document.querySelectorAll("input[name=view]").forEach((r) => {
    r.checked = r.value === state.view;
  });
  $("palette-select").value = state.palette;
  if (document.activeElement !== $("ht-find")) $("ht-find").value = state.hfind;
  $("ht-score").value = state.hscore;
  $("ht-min").disabled = !state.hscore;
  if (document.activeElement !== $("ht-min")) $("ht-min").value = String(state.hmin);
  const n = state.masks.blocked.length;
  $("blocked-count").textContent = n ? `${n} cell${n === 1 ? "" : "s"} blocked` : "no cells blocked";
  $("blocked-clear").disabled = n === 0;
  const hasOptions = RANDOM_OPTIONS.some((k) => k in state.options);
  $("random-options").hidden = !hasOptions;
  for (const k of RANDOM_OPTIONS) {
    const el = $(`opt-${k}`);
    if (!el) continue;
    if (k === "positions") el.checked = !!state.options[k];
    else el.value = state.options[k] ?? "";
  }
  const layers = m ? m.layers : 1;
  const sel = $("layer-select");
  const want = [...Array.from({ length: layers }, (_, i) => String(i)), ...(layers > 1 ? ["all"] : [])];
  if ([...sel.options].map((o) => o.value).join() !== want.join()) {
    sel.replaceChildren(
      ...want.map((v) => Object.assign(document.createElement("option"), { value: v, textContent: v === "all" ? "all layers" : `layer ${v}` })),
    );
  }
  sel.value = String(state.layer);
  sel.disabled = layers <= 1;
  const tb = $("textbook-matrices");
  const isTextbook = state.model === "textbook" && m && m.options && m.options.x;
  tb.hidden = !isTextbook;
  if (isTextbook) {
    const mats = state.matrices || { x: m.options.x, w_q: m.options.w_q, w_k: m.options.w_k, w_v: m.options.w_v };
    const key = JSON.stringify([mats, state.text]);
    if (tb.dataset.key !== key && !tb.contains(document.activeElement)) {
      tb.dataset.key = key;
      renderMatrices($("matrix-editors"), mats, splitTokens(state.text), onMatrixEdit);
    }
  }
}

function onMatrixEdit(name, i, j, raw) {
  const m = info();
  const base = state.matrices || { x: m.options.x, w_q: m.options.w_q, w_k: m.options.w_k, w_v: m.options.w_v };
  const next = setEntry(base, name, i, j, raw);
  if (!next) return false;
  state.matrices = next;
  schedule(`${name.toUpperCase().replace("_", "_")}[${i + 1}][${j + 1}] set to ${raw}`);
  return true;
}

function chooseModel(name, text, options) {
  const m = info(name);
  if (!m) return;
  const keep = {
    view: state.view, palette: state.palette, scale: state.scale, allMasked: state.allMasked,
    hsort: state.hsort, hdir: state.hdir,
  };
  Object.assign(state, stateForModel(m, defaultState()), keep);
  if (text) state.text = text;
  if (options) Object.assign(state.options, options);
  app.diff = null;
  app.lastAction = "";
  app.notice = "";
  writeControls();
  schedule();
}

function updateUrl() {
  const qs = encodeState(state);
  if (location.search !== `?${qs}`) history.replaceState(null, "", `?${qs}`);
}

function bindControls() {
  $("run-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.text = $("sequence-input").value;
    if (state.model === "textbook" && state.matrices) {
      state.matrices = { ...state.matrices, x: fitRows(state.matrices.x, splitTokens(state.text).length) };
    }
    app.lastAction = "new sequence";
    run();
  });
  $("sequence-input").addEventListener("input", (e) => {
    state.text = e.target.value;
  });
  $("sequence-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      $("run-form").requestSubmit();
    }
  });
  $("model-select").addEventListener("change", (e) => chooseModel(e.target.value));
  $("example-select").addEventListener("change", (e) => {
    const ex = EXAMPLES.concat(app.extraExamples || [])[Number(e.target.value)];
    e.target.value = "";
    if (!ex) return;
    if (ex.sort) {
      state.hsort = ex.sort;
      state.hdir = "desc";
    }
    app.pendingPair = ex.pair ? { ...ex.pair, model: ex.model } : null;
    app.pendingOpen = !!ex.pair;
    chooseModel(ex.model, exampleText(ex, info(ex.model)), ex.options);
  });
  $("mask-causal").addEventListener("change", (e) => {
    state.masks = { ...state.masks, causal: e.target.checked };
    schedule(`causal ${e.target.checked ? "on" : "off"}`);
  });
  const windowChanged = () => {
    const on = $("mask-window-on").checked;
    const w = Number.parseInt($("mask-window").value, 10);
    state.masks = { ...state.masks, window: on ? Math.max(1, Number.isFinite(w) ? w : 3) : null };
    schedule(on ? `window ${state.masks.window}` : "window off");
  };
  $("mask-window-on").addEventListener("change", windowChanged);
  $("mask-window").addEventListener("change", () => {
    $("mask-window-on").checked = true;
    windowChanged();
  });
  $("blocked-clear").addEventListener("click", () => {
    state.masks = { ...state.masks, blocked: [] };
    schedule("blocked cells cleared");
  });
  $("all-masked").addEventListener("change", (e) => {
    state.allMasked = e.target.value;
    schedule(`all-masked rows: ${e.target.value}`);
  });
  $("scale").addEventListener("change", (e) => {
    state.scale = e.target.checked;
    schedule(`scaling ${e.target.checked ? "on" : "off"}`);
  });
  document.querySelectorAll("input[name=view]").forEach((r) =>
    r.addEventListener("change", () => {
      state.view = r.value;
      render();
    }),
  );
  $("palette-select").addEventListener("change", (e) => {
    state.palette = e.target.value;
    render();
  });
  $("layer-select").addEventListener("change", (e) => {
    state.layer = e.target.value === "all" ? "all" : Number(e.target.value);
    state.page = 0;
    state.focus = null;
    app.notice = "";
    app.skipDiff = true;
    schedule();
  });
  for (const k of RANDOM_OPTIONS) {
    const el = $(`opt-${k}`);
    el?.addEventListener("change", () => {
      if (k === "positions") state.options[k] = el.checked;
      else {
        const v = Number.parseInt(el.value, 10);
        state.options[k] = Number.isFinite(v) ? v : k === "kv_heads" ? null : state.options[k];
      }
      state.focus = null;
      schedule(`${k} = ${state.options[k]}`);
    });
  }
  $("matrices-reset").addEventListener("click", () => {
    state.matrices = null;
    schedule("the chapter's numbers restored");
  });
  const pager = $("heads-pager");
  pager.querySelector("[data-role=prev]").addEventListener("click", () => {
    state.page = Math.max(0, state.page - 1);
    render();
  });
  pager.querySelector("[data-role=next]").addEventListener("click", () => {
    state.page += 1;
    render();
  });
  $("retrieval").addEventListener("keydown", (e) => {
    if (!app.result) return;
    const S = app.result.tokens.length;
    const step = { ArrowUp: -1, ArrowLeft: -1, ArrowDown: 1, ArrowRight: 1 }[e.key];
    if (!step) return;
    e.preventDefault();
    state.query = ((state.query ?? S - 1) + step + S) % S;
    render();
    $("retrieval").focus();
  });
  $("error-banner").querySelector("[data-role=dismiss]").addEventListener("click", hideError);
  $("ht-find").addEventListener("input", (e) => {
    state.hfind = e.target.value.slice(0, 40);
    updateUrl();
    renderHeadTypesPanel();
  });
  $("ht-score").addEventListener("change", (e) => {
    state.hscore = e.target.value;
    $("ht-min").disabled = !state.hscore;
    updateUrl();
    renderHeadTypesPanel();
  });
  $("ht-min").addEventListener("input", (e) => {
    const v = Number.parseFloat(e.target.value);
    if (!Number.isFinite(v)) return;
    state.hmin = v;
    updateUrl();
    renderHeadTypesPanel();
  });
  $("copy-link").addEventListener("click", async () => {
    updateUrl();
    try {
      await navigator.clipboard.writeText(location.href);
      $("share-status").textContent = "Link copied: it opens this exact view.";
    } catch {
      $("share-status").textContent = `Copy this link: ${location.href}`;
    }
  });
  $("export-png").addEventListener("click", async () => {
    if (!app.view) return;
    const cards = visibleCanvases().map(({ canvas, item }) => ({
      canvas,
      label: app.view.multiLayer ? `L${item.layer} H${item.head.index}` : `Head ${item.head.index}`,
    }));
    const title = `attnlab · ${app.result.model} · ${state.view} · “${state.text.slice(0, 60)}”`;
    const stops = state.view === "scores" ? RDBU : PALETTES[state.palette];
    const blob = await headsPng(cards, title, stops);
    if (blob) download(`attnlab-${app.result.model}-heads.png`, blob);
  });
  $("export-npz").addEventListener("click", async () => {
    if (!app.request) return;
    try {
      download(`attnlab-${app.result.model}.npz`, await fetchAttentionNpz(app.request));
    } catch (err) {
      showError(err);
    }
  });
  $("export-json").addEventListener("click", () => {
    if (!app.result) return;
    const data = { link: location.href, request: app.request, response: app.result };
    download(`attnlab-${app.result.model}.json`, new Blob([JSON.stringify(data, null, 1)], { type: "application/json" }));
  });
}

function fillModels() {
  const sel = $("model-select");
  sel.replaceChildren(
    ...app.models.map((m) =>
      Object.assign(document.createElement("option"), {
        value: m.name,
        textContent: `${m.name} · ${m.layers > 1 ? `${m.layers} layers × ` : ""}${m.heads} head${m.heads === 1 ? "" : "s"}`,
      }),
    ),
  );
  // custom needs numbers typed in as x; the page offers it through textbook's editors instead
  for (const o of sel.options) if (o.value === "custom") o.remove();
  const names = app.models.map((m) => m.name);
  const listed = new Set(EXAMPLES.map((e) => e.model));
  app.extraExamples = app.models
    .filter((m) => !listed.has(m.name) && m.default_text && m.name !== "custom")
    .map((m) => ({ model: m.name, text: m.default_text, label: `${m.name}: ${m.default_text.slice(0, 50)}` }));
  const ex = $("example-select");
  EXAMPLES.concat(app.extraExamples).forEach((e, i) => {
    if (!names.includes(e.model)) return;
    if (e.repeat && !exampleText(e, info(e.model))) return;
    ex.append(Object.assign(document.createElement("option"), { value: String(i), textContent: e.label }));
  });
}

async function init() {
  bindControls();
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
