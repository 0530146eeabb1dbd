// The standalone viewer: the page a saved export (POST /api/export, attnlab.show) opens with, no server behind it.
// The result is embedded in the file as the arrays form (float32 up to 65,536 weights, else float16; deflated, base64) in
// <script type="application/octet-stream" id="attnlab-data">; what to show first in <script type="application/json"
// id="attnlab-view">. wire/jsbundle.py inlines this module and what it imports (never the page's store) into one
// script that calls `boot()`.
//
// It draws with the page's own views: the heads of one layer are heads.js, every layer at a glance is overview.js,
// the retrieval of one query is retrieval.js, each rendering into the same markup as on the page (wire/standalone.py
// copies those panels from templates/index.html) from a state of the store's shape (`initialState`). What the views
// dispatch (actions.js) is applied by `reduce`, the few actions a file with no server can honour; the rest are
// dropped. Only the large head is this file's own: a canvas heatmap (heatmap.js) where the page plots with plotly.
// An export with rollout or attention flow draws each layer's map under the view (sastacked.js), whatever is shown.
// The file is this module's own: it finds its elements by id in its root (dom.js `within`: the document, or a
// notebook widget's shadow root: store.root); the page's views it draws find theirs in the root it hands each one
// (viewRoot).

import { act } from "./actions.js";
import { readArrays } from "./arrays.js";
import { PALETTES, matrixKey } from "./colors.js";
import { node, within } from "./dom.js";
import { bind as bindHeads, render as renderHeads } from "./heads.js";
import { cellAt, drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { cellReasons } from "./masks.js";
import { render as renderOverview } from "./overview.js";
import { bind as bindRetrieval, render as renderRetrieval } from "./retrieval.js";
import { STACKED, renderStacked, stackedFields } from "./sastacked.js";
import { selectView } from "./selectors.js";
import { pieceLabel, pieceQuote } from "./piece.js";
import { sinksLine } from "./sinks.js";
import { countFrom1, pos } from "./positions.js";

export const SHOWS = { layer: "Heads of one layer", all: "All layers", head: "One head, with retrieval" };
export const MAX_CELL = 34;
export const LARGE_PLOT_PX = 560; // the large head's side

// ---- decoding ----------------------------------------------------------------------------------------------------

export function base64Bytes(text) {
  const bin = atob(text.trim());
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// The embedded bytes as an ArrayBuffer: `encoding` "deflate+base64" (zlib data; the browser's own
// DecompressionStream inflates it) or "base64".
export async function decodeEmbedded(text, encoding) {
  const bytes = base64Bytes(text);
  if (encoding === "base64") return bytes.buffer;
  if (encoding !== "deflate+base64") throw new Error(`unknown encoding ${encoding} of the embedded data`);
  if (typeof DecompressionStream === "undefined") {
    throw new Error("this browser has no DecompressionStream (Chrome 80, Firefox 113, Safari 16.4 and later have it)");
  }
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Response(stream).arrayBuffer();
}

// ---- the state ---------------------------------------------------------------------------------------------------

// The state the file opens with, in the page store's shape (run, ui, highlight) plus `show`, which of SHOWS is on
// screen: every index from the embedded view settings clamped into range. No ablation list: nothing here can run
// an intervention, so the heads grid offers none.
export function initialState(result, shown = {}) {
  const layers = result.layers.map((l) => l.index);
  const layer = layers.includes(shown.layer) ? shown.layer : layers[0];
  const nHeads = result.layers[0].heads.length;
  const S = result.tokens.length;
  const show = shown.view in SHOWS ? shown.view : "layer";
  const head = Number.isInteger(shown.head) && shown.head >= 0 && shown.head < nHeads ? shown.head : 0;
  return {
    show: show === "all" && layers.length < 2 ? "layer" : show,
    models: [],
    run: { result, request: null, diff: null, notice: "" },
    ui: {
      // the page's moved view is exported with each head's value norms; without them (an older file) weights
      view: shown.matrix === "moved" && result.layers[0].heads[0].value_norms != null ? "moved" : "weights",
      palette: shown.palette in PALETTES ? shown.palette : "viridis",
      scoreScale: "head",
      layer,
      page: 0,
      focus: [layer, head],
      query: Number.isInteger(shown.query) && shown.query >= 0 && shown.query < S ? shown.query : null,
      pair: null,
      ablate: null,
    },
    highlight: null,
  };
}

const setUi = (s, fields) => ({ ...s, ui: { ...s.ui, ...fields } });

// What an action does here: the page's for the views' own actions (actions.js), and the file's controls.
export function reduce(s, a) {
  switch (a.type) {
    case "headOpened":
      return {
        ...setUi(s, { focus: [a.layer, a.head], layer: a.layer, ...(a.query != null ? { query: a.query } : {}) }),
        show: "head",
        highlight: null,
      };
    case "highlightSet":
      return a.highlight === s.highlight ? s : { ...s, highlight: a.highlight };
    case "querySet":
      return setUi(s, { query: a.query });
    case "pairSet":
      return setUi(s, { pair: a.q == null && a.k == null ? null : [a.q, a.k], ...(a.q != null ? { query: a.q } : {}) });
    case "pageSet":
      return setUi(s, { page: Math.max(0, a.page) });
    case "paletteSet":
      return setUi(s, { palette: a.palette });
    case "layerSet":
      return { ...setUi(s, { layer: a.layer, focus: [a.layer, s.ui.focus[1]], page: 0 }), highlight: null };
    case "showSet":
      return { ...s, show: a.show, highlight: null };
    case "headSet":
      return { ...setUi(s, { focus: [s.ui.focus[0], a.head] }), highlight: null };
    default:
      return s; // an action that asks the server (ablate, ...): nothing to ask here
  }
}

// Cell size (px; fractional below 1) of the large head: no side past LARGE_PLOT_PX.
export function largeCell(S, K) {
  const side = Math.max(S, K, 1);
  const cell = Math.min(MAX_CELL, Math.floor(LARGE_PLOT_PX / side));
  return cell >= 1 ? cell : LARGE_PLOT_PX / side;
}

export function describeCell(view, head, cell) {
  const keys = view.keyTokens || view.tokens;
  const ok = !!view.eligible[cell.q][cell.k];
  const w = head.weights[cell.q][cell.k];
  const moved = view.view === "moved" ? [`moved ${head.value_norms[cell.q][cell.k].toFixed(4)}`] : [];
  return [
    `${view.multiLayer ? `Layer ${cell.layer} · ` : ""}head ${cell.head}`,
    `query ${pos(cell.q)} ${pieceQuote(view.tokens[cell.q])} → key ${pos(cell.k)} ${pieceQuote(keys[cell.k])}`,
    ok
      ? `weight ${w.toFixed(4)}`
      : `masked (${cellReasons(view, cell.q, cell.k).join("+") || "masked"}) · weight ${w.toFixed(4)}`,
    ...moved,
  ];
}

// ---- drawing -----------------------------------------------------------------------------------------------------

function showTip(lines, event, root) {
  const tip = within(root)("tooltip");
  tip.hidden = !lines;
  if (!lines) return;
  tip.replaceChildren(...lines.map((line) => node("div", {}, line)));
  const x = Math.min(window.innerWidth - 300, event.clientX + 14);
  tip.style.left = `${Math.max(0, x) + window.scrollX}px`;
  tip.style.top = `${event.clientY + window.scrollY + 14}px`;
}

// The large head of the "head" view: its weights with the retrieval's query outlined; a click picks the query.
function renderLarge(el, s, dispatch, root) {
  const view = selectView(s);
  const [layer, index] = view.focus;
  const head = view.focusHead;
  const S = view.tokens.length;
  const cell = largeCell(S, (view.keyTokens || view.tokens).length);
  const L = layoutFor(S, { cell, labels: cell >= 7, maxLabel: 10, cols: (view.keyTokens || view.tokens).length });
  const fig = node("figure", { className: "head-card sa-large", tabIndex: 0 });
  fig.setAttribute("data-testid", "head-heatmap");
  fig.dataset.layer = String(layer);
  fig.dataset.head = String(index);
  fig.dataset.layout = JSON.stringify({ left: L.left, top: L.top, cell: L.cell });
  fig.setAttribute(
    "aria-label",
    `Layer ${layer} head ${index}, query ${pos(view.query)}: up and down arrows choose the query`,
  );
  const cap = node("figcaption");
  cap.append(
    node("strong", {}, `Layer ${layer} · head ${index}`),
    node("span", { className: "meta" }, "click a row to retrieve for that query"),
  );
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(cap, canvas);
  el.replaceChildren(fig);
  drawHeatmap(sizeCanvas(canvas, L), {
    ...heatmapOf(view, head),
    scale: view.scale,
    layout: L,
    highlight: { q: view.query },
  });
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return cellAt(L, e.clientX - r.left, e.clientY - r.top);
  };
  canvas.addEventListener("mousemove", (e) => {
    const c = at(e);
    showTip(c && describeCell(view, head, { ...c, layer, head: index }), e, root);
  });
  canvas.addEventListener("mouseleave", () => showTip(null, null, root));
  canvas.addEventListener("click", (e) => {
    const c = at(e);
    if (c) dispatch({ ...act.querySet(c.q), key: c.k }); // the key: which cell was pressed, for a notebook widget
  });
  fig.addEventListener("keydown", (e) => {
    const step = { ArrowUp: -1, ArrowDown: 1 }[e.key];
    if (!step) return;
    e.preventDefault();
    dispatch(act.querySet((view.query + step + S) % S));
  });
}

function heatmapOf(view, head) {
  return {
    matrix: head[matrixKey(view.view)],
    eligible: view.eligible,
    tokens: view.tokens,
    keyTokens: view.keyTokens,
  };
}

// ---- the page ----------------------------------------------------------------------------------------------------

function option(value, text, selected) {
  const o = node("option", { value: String(value) }, text);
  o.selected = selected;
  return o;
}

function renderControls(s, root) {
  const $ = within(root);
  const result = s.run.result;
  const show = $("sa-view-select");
  show.replaceChildren(
    ...Object.entries(SHOWS)
      .filter(([name]) => name !== "all" || result.layers.length > 1)
      .map(([name, text]) => option(name, text, name === s.show)),
  );
  const layer = $("layer-select");
  layer.replaceChildren(...result.layers.map((l) => option(l.index, `Layer ${l.index}`, l.index === s.ui.layer)));
  layer.disabled = result.layers.length < 2;
  $("layer-field").hidden = s.show === "all";
  const view = selectView(s);
  const head = $("head-select");
  head.replaceChildren(
    ...view.focusLayer.heads.map((h) => option(h.index, `Head ${h.index}`, h.index === view.focus[1])),
  );
  $("head-field").hidden = s.show !== "head";
  const query = $("query-select");
  if (query.options.length !== result.tokens.length) {
    query.replaceChildren(
      ...result.tokens.map((t, i) => option(i, `${pos(i)}  ${pieceLabel(t, 16)}`, i === view.query)),
    );
  }
  query.value = String(view.query);
  $("query-field").hidden = s.show !== "head";
  $("palette-select").value = s.ui.palette;
}

// What each of SHOWS draws, with the page's views into the page's markup: a copy of its <template id="sa-NAME">
// (wire/standalone.py fills them from templates/index.html) put on screen when it is shown, so that only the view
// shown is in the document, and `bind` once a copy.
const SHOWN = {
  layer: {
    bind: (root, store) => bindHeads(root, store),
    draw: (s, store) => renderHeads(viewRoot("heads", store.root), s, store.dispatch),
  },
  all: {
    bind: () => {},
    draw: (s, store) => renderOverview(within(store.root)("overview-panel"), s, store.dispatch),
  },
  head: {
    bind: (root, store) => bindRetrieval(root, store),
    draw: (s, store) => {
      renderLarge(within(store.root)("sa-large"), s, store.dispatch, store.root);
      renderRetrieval(viewRoot("retrieval", store.root), s, store.dispatch);
    },
  },
};

// The root of the page's view `name` (its data-view element) in the copy on screen.
function viewRoot(name, root) {
  return root.querySelector(`#sa-view [data-view="${name}"]`);
}

// `store.root`: the document or shadow root the file's elements are in; `store.host`: the element that counts the
// draws (data-drawn).
export function render(s, store, prev = null) {
  const $ = within(store.root);
  const root = $("sa-view");
  if (!prev || prev.show !== s.show) {
    root.replaceChildren($(`sa-${s.show}`).content.cloneNode(true));
    SHOWN[s.show].bind(root, store);
  } else if (prev.highlight !== s.highlight && prev.ui === s.ui) {
    SHOWN[s.show].draw(s, store); // a hover: the grid repaints its highlight, nothing else is redrawn
    return;
  }
  renderControls(s, store.root);
  if (!prev || prev.ui.palette !== s.ui.palette)
    renderStacked($("sa-stacked"), s.run.result, s.rollout, s.ui.palette, (lines, e) => showTip(lines, e, store.root));
  root.dataset.view = s.show;
  SHOWN[s.show].draw(s, store);
  store.host.dataset.drawn = String(Number(store.host.dataset.drawn || 0) + 1);
  performance.mark("attnlab:drawn");
}

// The line under the title: the model, the sequence, the layers and heads embedded and how their weights are held.
export function summaryLine(result, state) {
  return (
    `${result.model} · ${result.tokens.length} tokens · ${result.layers.length} of ${result.config.n_layers ?? result.layers.length} ` +
    `layer${(result.config.n_layers ?? 1) === 1 ? "" : "s"} · ${result.layers[0].heads.length} heads · weights as ${result.config.precision === "float16" ? "float16" : "float32"}` +
    (state.ui.view === "moved" ? " · drawn: moved, weight × |v·W_O|" : "") +
    stackedFields(result)
      .map((f) => ` · ${STACKED[f].name.toLowerCase()} of each layer`)
      .join("")
  );
}

// The file's controls (view, layer, head, query, colours), each dispatching to `store`; bound once.
export function bindControls(store) {
  const $ = within(store.root);
  $("sa-view-select").addEventListener("change", (e) => store.dispatch({ type: "showSet", show: e.target.value }));
  $("layer-select").addEventListener("change", (e) => store.dispatch(act.layerSet(Number(e.target.value))));
  $("head-select").addEventListener("change", (e) => store.dispatch({ type: "headSet", head: Number(e.target.value) }));
  $("query-select").addEventListener("change", (e) => store.dispatch(act.querySet(Number(e.target.value))));
  $("palette-select").addEventListener("change", (e) => store.dispatch(act.paletteSet(e.target.value)));
}

function fail(err) {
  const banner = within(document)("sa-error");
  banner.hidden = false;
  banner.textContent = `Could not open this attnlab export: ${err && err.message ? err.message : err}`;
  document.body.dataset.drawn = "error";
  throw err;
}

export async function boot() {
  const $ = within(document);
  let result;
  let shown;
  try {
    const data = $("attnlab-data");
    shown = JSON.parse($("attnlab-view").textContent);
    result = readArrays(await decodeEmbedded(data.textContent, data.dataset.encoding));
  } catch (err) {
    fail(err);
    return;
  }
  countFrom1(shown.positions_from === 1); // every position printed in the page's count when it was saved
  let state = { ...initialState(result, shown), rollout: shown.rollout || null };
  $("sa-summary").textContent = summaryLine(result, state);
  $("sa-sinks").textContent = sinksLine(result.sinks, result.source_tokens || result.tokens);
  $("sa-sinks").hidden = !result.sinks;
  const store = {
    root: document,
    host: document.body,
    getState: () => state,
    dispatch(a) {
      const prev = state;
      state = reduce(state, a);
      if (state !== prev) render(state, store, prev);
    },
  };
  bindControls(store);
  render(state, store);
}
