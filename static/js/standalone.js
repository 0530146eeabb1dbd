// The standalone viewer: the page a saved export (POST /api/export, attnlab.show) opens with, no server behind it.
// The result is embedded in the file as the arrays form (float16, deflated, base64) in
// <script type="application/octet-stream" id="attnlab-data">; what to show first in <script type="application/json"
// id="attnlab-view">. wire/jsbundle.py inlines this module and what it imports (never the page's store) into one
// script that calls `boot()`.
//
// Three views, the page's own: "layer" (the heads of one layer as a grid of heatmaps), "all" (every head of every
// layer as thumbnails: overview.js) and "head" (one head large, with the retrieval of a chosen query). One state
// object; `render(state)` redraws from it. Hover a cell: query token, key token, weight, and the row and column light
// up in every head of the grid.

import { readArrays } from "./arrays.js";
import { PALETTES, VIRIDIS, colorAt, inkOn, rgbString, scaleFor } from "./colors.js";
import { el, node } from "./dom.js";
import { cellAt, drawHeatmap, layoutFor, repaintHighlight, sizeCanvas } from "./heatmap.js";
import { cellReasons } from "./masks.js";
import { drawOverview } from "./overview.js";

export const VIEWS = { layer: "Heads of one layer", all: "All layers", head: "One head, with retrieval" };
export const GRID_PLOT_PX = { few: 220, many: 150 }; // a head's side in the grid: up to 4 heads, and more
export const MAX_CELL = 34;
export const LARGE_PLOT_PX = 560; // the large head's side
export const RETRIEVAL_KEYS = 24; // past this many keys the retrieval diagram shows the keys with the most weight
export const ROW_PX = 22;

const $ = (id) => document.getElementById(id);

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

// ---- pure helpers ------------------------------------------------------------------------------------------------

// The state the file opens with, from the embedded view settings and the result: every index clamped into range.
export function initialState(result, shown = {}) {
  const layers = result.layers.map((l) => l.index);
  const layer = layers.includes(shown.layer) ? shown.layer : layers[0];
  const nHeads = result.layers[0].heads.length;
  const S = result.tokens.length;
  const view = shown.view in VIEWS ? shown.view : "layer";
  return {
    view: view === "all" && layers.length < 2 ? "layer" : view,
    layer,
    head: Number.isInteger(shown.head) && shown.head >= 0 && shown.head < nHeads ? shown.head : 0,
    query: Number.isInteger(shown.query) && shown.query >= 0 && shown.query < S ? shown.query : S - 1,
    palette: shown.palette in PALETTES ? shown.palette : "viridis",
    hover: null, // {layer, head, q, k} under the pointer
  };
}

export function layerOf(result, index) {
  return result.layers.find((l) => l.index === index) || result.layers[0];
}

// Cell size (px; fractional below 1) for `n` heads of S x K in the grid: no plot side past the target.
export function gridCell(S, K, n) {
  const target = n <= 4 ? GRID_PLOT_PX.few : GRID_PLOT_PX.many;
  const side = Math.max(S, K, 1);
  const cell = Math.min(MAX_CELL, Math.floor(target / side));
  return cell >= 1 ? cell : target / side;
}

export function largeCell(S, K) {
  const side = Math.max(S, K, 1);
  const cell = Math.min(MAX_CELL, Math.floor(LARGE_PLOT_PX / side));
  return cell >= 1 ? cell : LARGE_PLOT_PX / side;
}

// The keys the retrieval diagram draws for query q: every key of a short sequence; for a long one the
// RETRIEVAL_KEYS eligible keys with the most weight, in position order. [{k, token, eligible, reasons, weight}].
export function retrievalKeys(result, head, q, limit = RETRIEVAL_KEYS) {
  const keys = result.source_tokens || result.tokens;
  const w = head.weights[q];
  const rows = keys.map((token, k) => ({
    k,
    token,
    eligible: !!result.eligible[q][k],
    reasons: cellReasons(result, q, k),
    weight: w[k],
  }));
  if (rows.length <= limit) return rows;
  return rows
    .filter((r) => r.eligible)
    .sort((a, b) => b.weight - a.weight || a.k - b.k)
    .slice(0, limit)
    .sort((a, b) => a.k - b.k);
}

export function describeCell(result, cell) {
  const keys = result.source_tokens || result.tokens;
  const head = layerOf(result, cell.layer).heads[cell.head];
  const ok = !!result.eligible[cell.q][cell.k];
  const w = head.weights[cell.q][cell.k];
  return [
    `${result.layers.length > 1 || result.config.n_layers > 1 ? `Layer ${cell.layer} · ` : ""}head ${cell.head}`,
    `query ${cell.q} “${result.tokens[cell.q]}” → key ${cell.k} “${keys[cell.k]}”`,
    ok ? `weight ${w.toFixed(4)}` : `masked (${cellReasons(result, cell.q, cell.k).join("+") || "masked"}) · weight ${w.toFixed(4)}`,
  ];
}

// ---- drawing -----------------------------------------------------------------------------------------------------

let drawn = null; // {key, cards}: the grid last painted, so a hover repaints only the highlight

function renderGrid(root, result, state, set) {
  const layer = layerOf(result, state.layer);
  const S = result.tokens.length;
  const keys = result.source_tokens || result.tokens;
  const key = [result, state.layer, state.palette].join("|");
  if (drawn && drawn.key === key && root.contains(drawn.grid)) {
    highlight(drawn.cards, state.hover);
    return;
  }
  const grid = node("div", { className: "heads-grid" });
  root.replaceChildren(grid);
  const cell = gridCell(S, keys.length, layer.heads.length);
  const labels = layer.heads.length <= 12 && cell >= 7;
  const L = layoutFor(S, { cell, labels, maxLabel: 6, cols: keys.length });
  const scale = scaleFor("weights", state.palette, 1);
  const eligible = result.eligible;
  const cards = layer.heads.map((head) => {
    const fig = node("figure", { className: "head-card", tabIndex: 0 });
    fig.setAttribute("data-testid", "head-heatmap");
    fig.setAttribute("role", "button");
    fig.setAttribute("aria-label", `Layer ${layer.index} head ${head.index}: press Enter to open it large`);
    fig.dataset.layer = String(layer.index);
    fig.dataset.head = String(head.index);
    fig.dataset.layout = JSON.stringify({ left: L.left, top: L.top, cell: L.cell });
    const cap = node("figcaption");
    cap.append(node("strong", {}, `Head ${head.index}`), node("span", { className: "meta" }, `L${layer.index}`));
    const canvas = node("canvas");
    canvas.setAttribute("aria-hidden", "true");
    fig.append(cap, canvas);
    grid.append(fig);
    const ctx = sizeCanvas(canvas, L);
    drawHeatmap(ctx, { matrix: head.weights, eligible, tokens: result.tokens, keyTokens: result.source_tokens, scale, layout: L });
    const base = node("canvas");
    base.width = canvas.width;
    base.height = canvas.height;
    base.getContext("2d").drawImage(canvas, 0, 0);
    const at = (e) => {
      const r = canvas.getBoundingClientRect();
      return cellAt(L, e.clientX - r.left, e.clientY - r.top);
    };
    canvas.addEventListener("mousemove", (e) => {
      const c = at(e);
      set({ hover: c ? { ...c, layer: layer.index, head: head.index } : null }, e);
    });
    canvas.addEventListener("mouseleave", () => set({ hover: null }));
    fig.addEventListener("click", (e) => {
      const c = at(e);
      set({ view: "head", head: head.index, query: c ? c.q : state.query, hover: null });
    });
    fig.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        set({ view: "head", head: head.index, hover: null });
      }
    });
    return { fig, canvas, ctx, base, L };
  });
  drawn = { key, grid, cards };
  highlight(cards, state.hover);
}

function highlight(cards, hover) {
  for (const card of cards) {
    repaintHighlight(card.canvas, card.base, card.L, hover ? { q: hover.q, k: hover.k } : null);
    card.fig.dataset.highlight = hover ? `${hover.q},${hover.k}` : "";
  }
}

function renderAll(root, result, state, set) {
  const box = node("div", { className: "ov-scroll" });
  root.replaceChildren(
    node("p", { className: "muted small" }, "Rows: layers · columns: heads · each pixel: the largest weight in its block. Press a head to open it large."),
    box,
  );
  drawOverview(box, result.layers, {
    palette: state.palette,
    selected: [state.layer, state.head],
    eligible: result.eligible,
    onPick: (layer, head) => set({ view: "head", layer, head, hover: null }),
  });
}

function renderHead(root, result, state, set) {
  const layer = layerOf(result, state.layer);
  const head = layer.heads[state.head] || layer.heads[0];
  const S = result.tokens.length;
  const keys = result.source_tokens || result.tokens;
  const cell = largeCell(S, keys.length);
  const L = layoutFor(S, { cell, labels: cell >= 7, maxLabel: 10, cols: keys.length });
  const fig = node("figure", { className: "head-card sa-large", tabIndex: 0 });
  fig.setAttribute("data-testid", "head-heatmap");
  fig.dataset.layer = String(layer.index);
  fig.dataset.head = String(head.index);
  fig.dataset.layout = JSON.stringify({ left: L.left, top: L.top, cell: L.cell });
  fig.setAttribute("aria-label", `Layer ${layer.index} head ${head.index}, query ${state.query}: up and down arrows choose the query`);
  const cap = node("figcaption");
  cap.append(node("strong", {}, `Layer ${layer.index} · head ${head.index}`), node("span", { className: "meta" }, "click a row to retrieve for that query"));
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(cap, canvas);
  const ctx = sizeCanvas(canvas, L);
  drawHeatmap(ctx, {
    matrix: head.weights,
    eligible: result.eligible,
    tokens: result.tokens,
    keyTokens: result.source_tokens,
    scale: scaleFor("weights", state.palette, 1),
    layout: L,
    highlight: { q: state.query, k: state.hover && state.hover.head === head.index ? state.hover.k : undefined },
  });
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return cellAt(L, e.clientX - r.left, e.clientY - r.top);
  };
  canvas.addEventListener("mousemove", (e) => {
    const c = at(e);
    set({ hover: c ? { ...c, layer: layer.index, head: head.index } : null }, e, { tipOnly: true });
  });
  canvas.addEventListener("mouseleave", () => set({ hover: null }, null, { tipOnly: true }));
  canvas.addEventListener("click", (e) => {
    const c = at(e);
    if (c) set({ query: c.q });
  });
  fig.addEventListener("keydown", (e) => {
    const step = { ArrowUp: -1, ArrowDown: 1 }[e.key];
    if (!step) return;
    e.preventDefault();
    set({ query: (state.query + step + S) % S });
  });
  const svg = el("svg", { class: "retrieval", "data-testid": "retrieval-diagram", role: "img" });
  renderRetrieval(svg, result, head, state, (q) => set({ query: q }));
  const side = node("div", { className: "sa-retrieval scroll" });
  side.append(node("h2", {}, `Retrieval · query ${state.query} “${result.tokens[state.query]}”`), svg);
  const two = node("div", { className: "sa-two" });
  two.append(fig, side);
  root.replaceChildren(two);
}

// One query linked to its keys: line width and colour by weight, masked keys struck through with the reason.
function renderRetrieval(svg, result, head, state, onQuery) {
  const q = state.query;
  const rows = retrievalKeys(result, head, q);
  const palette = PALETTES[state.palette] || VIRIDIS;
  const n = Math.max(rows.length, 1);
  const height = 34 + n * ROW_PX + 8;
  const width = 470;
  const col = { query: 4, key: 200, boxW: 110, labels: 320 };
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", "100%");
  svg.style.maxWidth = `${width * 1.25}px`;
  svg.dataset.query = String(q);
  const all = rows.length === (result.source_tokens || result.tokens).length;
  svg.append(
    el("text", { x: col.query, y: 16, class: "rd-head" }, "Query"),
    el("text", { x: col.key, y: 16, class: "rd-head" }, all ? "Keys" : `Top ${rows.length} keys`),
    el("text", { x: col.labels, y: 16, class: "rd-head" }, "weight"),
  );
  const y = (i) => 30 + i * ROW_PX + ROW_PX / 2;
  const yq = y((n - 1) / 2);
  for (const [i, r] of rows.entries()) {
    const x1 = col.query + col.boxW;
    const x2 = col.key;
    const d = `M ${x1} ${yq} C ${(x1 + x2) / 2} ${yq}, ${(x1 + x2) / 2} ${y(i)}, ${x2} ${y(i)}`;
    const attrs = r.eligible
      ? { stroke: rgbString(colorAt(palette, 0.15 + 0.85 * r.weight)), "stroke-width": 0.75 + Math.max(0, Math.min(1, r.weight)) * 15, "stroke-opacity": 0.85 }
      : { stroke: "#9a9a9a", "stroke-width": 1, "stroke-dasharray": "3 4" };
    svg.append(el("path", { d, fill: "none", "stroke-linecap": "round", class: "rd-line", "data-key": r.k, ...attrs }));
  }
  const g = el("g", { class: "rd-query rd-chosen", "data-query": q });
  g.append(
    el("rect", { x: col.query, y: yq - ROW_PX / 2 + 2, width: col.boxW, height: ROW_PX - 4, rx: 4 }),
    el("text", { x: col.query + 8, y: yq + 4, "font-size": 13 }, `${q}  ${clip(result.tokens[q], 12)}`),
  );
  svg.append(g);
  for (const [i, r] of rows.entries()) {
    const kg = el("g", { class: `rd-key${r.eligible ? "" : " rd-masked"}`, "data-key": r.k });
    const rgb = colorAt(palette, r.weight);
    kg.append(el("rect", { x: col.key, y: y(i) - ROW_PX / 2 + 2, width: col.boxW, height: ROW_PX - 4, rx: 4, fill: r.eligible ? rgbString(rgb) : "#3a3a3a" }));
    const label = el("text", { x: col.key + 8, y: y(i) + 4, "font-size": 13 }, `${r.k}  ${clip(r.token, 12)}`);
    label.style.fill = r.eligible ? inkOn(rgb) : "#f2f2f2";
    if (!r.eligible) label.setAttribute("text-decoration", "line-through");
    kg.append(label);
    const txt = r.eligible ? r.weight.toFixed(3) : `✕ ${r.reasons.join("+") || "masked"}`;
    kg.append(el("text", { x: col.labels, y: y(i) + 4, "font-size": 12, class: "rd-num" }, txt));
    kg.addEventListener("click", () => r.k < result.tokens.length && !result.source_tokens && onQuery(r.k));
    svg.append(kg);
  }
  svg.setAttribute("aria-label", `Retrieval for query ${q} “${result.tokens[q]}”: ${rows.filter((r) => r.eligible).length} keys drawn`);
}

function clip(s, n) {
  const t = String(s);
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

// ---- the page ----------------------------------------------------------------------------------------------------

function option(value, text, selected) {
  const o = node("option", { value: String(value) }, text);
  o.selected = selected;
  return o;
}

function renderControls(result, state) {
  const view = $("sa-view-select");
  view.replaceChildren(
    ...Object.entries(VIEWS)
      .filter(([name]) => name !== "all" || result.layers.length > 1)
      .map(([name, text]) => option(name, text, name === state.view)),
  );
  const layer = $("layer-select");
  layer.replaceChildren(...result.layers.map((l) => option(l.index, `Layer ${l.index}`, l.index === state.layer)));
  layer.disabled = result.layers.length < 2;
  $("layer-field").hidden = state.view === "all";
  const heads = layerOf(result, state.layer).heads;
  const head = $("head-select");
  head.replaceChildren(...heads.map((h) => option(h.index, `Head ${h.index}`, h.index === state.head)));
  $("head-field").hidden = state.view !== "head";
  const query = $("query-select");
  if (query.options.length !== result.tokens.length) {
    query.replaceChildren(...result.tokens.map((t, i) => option(i, `${i}  ${clip(t, 16)}`, i === state.query)));
  }
  query.value = String(state.query);
  $("query-field").hidden = state.view !== "head";
  $("palette-select").value = state.palette;
}

function showTip(result, hover, event) {
  const tip = $("tooltip");
  if (!hover) {
    tip.hidden = true;
    return;
  }
  tip.replaceChildren(...describeCell(result, hover).map((line) => node("div", {}, line)));
  tip.hidden = false;
  if (event) {
    const x = Math.min(window.innerWidth - 300, event.clientX + 14);
    tip.style.left = `${Math.max(0, x) + window.scrollX}px`;
    tip.style.top = `${event.clientY + window.scrollY + 14}px`;
  }
}

export function render(result, state, set) {
  renderControls(result, state);
  const root = $("sa-view");
  root.dataset.view = state.view;
  if (state.view === "all") renderAll(root, result, state, set);
  else if (state.view === "head") renderHead(root, result, state, set);
  else renderGrid(root, result, state, set);
  document.body.dataset.drawn = String(Number(document.body.dataset.drawn || 0) + 1);
  performance.mark("attnlab:drawn");
}

function fail(err) {
  const banner = $("sa-error");
  banner.hidden = false;
  banner.textContent = `Could not open this attnlab export: ${err && err.message ? err.message : err}`;
  document.body.dataset.drawn = "error";
  throw err;
}

export async function boot() {
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
  let state = initialState(result, shown);
  $("sa-summary").textContent =
    `${result.model} · ${result.tokens.length} tokens · ${result.layers.length} of ${result.config.n_layers ?? result.layers.length} ` +
    `layer${(result.config.n_layers ?? 1) === 1 ? "" : "s"} · ${result.layers[0].heads.length} heads · weights as float16`;
  const set = (patch, event = null, { tipOnly = false } = {}) => {
    state = { ...state, ...patch };
    showTip(result, state.hover, event);
    if (tipOnly) return;
    render(result, state, set);
  };
  $("sa-view-select").addEventListener("change", (e) => set({ view: e.target.value, hover: null }));
  $("layer-select").addEventListener("change", (e) => set({ layer: Number(e.target.value), hover: null }));
  $("head-select").addEventListener("change", (e) => set({ head: Number(e.target.value), hover: null }));
  $("query-select").addEventListener("change", (e) => set({ query: Number(e.target.value) }));
  $("palette-select").addEventListener("change", (e) => set({ palette: e.target.value }));
  render(result, state, set);
}
