// The large head (data-view="focus"): a plotly plot of the head as an image (one pixel a cell, painted here) with a
// colour bar, zoom and hover, cell values when they fit, the chosen query row and query -> key pair outlined. Masked
// cells are hatched, in the image's MASK_FILL (never a colour on the scale). Click a cell to block or unblock it; shift-click picks the pair. Under it: the row and column
// sums, and the form that sets one weight (an intervention).

import { renderSums } from "./bugs.js";
import { MASK_FILL, MASK_HATCH, colorAt, headScale, inkOn, normalise, plotlyScale } from "./colors.js";
import { halfRows } from "./arrays.js";
import { paintPixels, themeInk } from "./heatmap.js";
import { headName } from "./interventions.js";
import { REASONS, cellReasons } from "./masks.js";
import { act } from "./store.js";
import { selectView } from "./selectors.js";
import { positionLabel } from "./tophead.js";

const $ = (id) => document.getElementById(id);
export const needsPlotly = true; // main.js draws this view once plotly is loaded
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

export const ANNOTATE_MAX_TOKENS = 12; // print the value in each cell up to this many positions
export const ANNOTATE_MIN_PX = 40; // ... and when the plot gives each column at least this many px
export const MAX_TICKS = 24; // beyond this many positions every n-th one is labelled
export const FOCUS_HEIGHT = { min: 280, max: 560 }; // the plot is about as tall as it is wide, within these
export const TOOLBAR_BAND = 30; // px above the cells for plotly's toolbar

// Plotly reads a few HTML-like tags and entities in its strings; tokens are escaped so they stay text.
export function plotlyText(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function tickLabels(tokens) {
  return tokens.map((t, i) => `${plotlyText(t.length > 12 ? `${t.slice(0, 11)}…` : t)} ${i}`);
}

// One rectangle per run of masked cells along a row, as one null-separated path plotly fills with a hatch pattern
// (a causal mask at 512 tokens is 512 rectangles, not 130,816 of one cell each).
export function maskPath(eligible) {
  const x = [];
  const y = [];
  eligible.forEach((row, q) => {
    let start = -1;
    for (let k = 0; k <= row.length; k++) {
      const masked = k < row.length && !row[k];
      if (masked && start < 0) start = k;
      if (!masked && start >= 0) {
        x.push(start - 0.5, k - 0.5, k - 0.5, start - 0.5, start - 0.5, null);
        y.push(q - 0.5, q - 0.5, q + 0.5, q + 0.5, q - 0.5, null);
        start = -1;
      }
    }
  });
  return { x, y };
}

export function hoverText(view, head, q, k) {
  const reasons = cellReasons(view, q, k);
  const s = head.scores ? head.scores[q][k] : null;
  const w = head.weights ? head.weights[q][k] : null;
  const keys = view.keyTokens || view.tokens;
  return [
    `Query ${q} “${plotlyText(view.tokens[q])}” → key ${k} “${plotlyText(keys[k])}”`,
    reasons.length ? `masked (${reasons.join(", ")})` : "eligible",
    `score ${s === null ? "–" : s.toFixed(4)}${reasons.length ? " (before masking)" : ""}`,
    `weight ${w === null ? "–" : w.toFixed(4)}`,
  ].join("<br>");
}

// A list of n rows where row q is built by build(q) when first read, then kept. Plotly reads a heatmap's text only
// for the cell under the pointer (text[q][k]), so a row nobody hovers costs nothing.
export function lazyRows(n, build) {
  const rows = new Array(n);
  for (let q = 0; q < n; q++) {
    Object.defineProperty(rows, q, {
      configurable: true,
      enumerable: true,
      get() {
        const row = build(q);
        Object.defineProperty(rows, q, { value: row, writable: true, enumerable: true, configurable: true });
        return row;
      },
    });
  }
  return rows;
}

// hoverText for every cell, as rows built when hovered (lazyRows): the same strings, with each token escaped once
// rather than per cell and the mask reasons read from the grids in force (262,144 strings for one head at 512
// tokens took 1.5 s built eagerly the old way, 0.35 s the new).
export function hoverTexts(view, head) {
  const keys = view.keyTokens || view.tokens;
  const grids = view.reasons ? REASONS.filter((name) => view.reasons[name]).map((name) => [name, view.reasons[name]]) : null;
  const cols = keys.map((t, k) => `${k} “${plotlyText(t)}”<br>`);
  const num = (m, q, k) => (m ? m[q][k].toFixed(4) : "–");
  return lazyRows(view.tokens.length, (q) => {
    const start = `Query ${q} “${plotlyText(view.tokens[q])}” → key `;
    const row = new Array(keys.length);
    for (let k = 0; k < keys.length; k++) {
      let reasons;
      if (grids) {
        reasons = [];
        for (const [name, g] of grids) if (g[q]?.[k]) reasons.push(name);
      } else {
        reasons = view.eligible[q][k] ? [] : ["masked"];
      }
      const tail = `score ${num(head.scores, q, k)}${reasons.length ? " (before masking)" : ""}<br>weight ${num(head.weights, q, k)}`;
      row[k] = `${start}${cols[k]}${reasons.length ? `masked (${reasons.join(", ")})` : "eligible"}<br>${tail}`;
    }
    return row;
  });
}

// The head's colours, one pixel per cell (masked cells MASK_FILL), as a PNG that plotly shows as an image trace.
// A 512 x 512 heatmap trace made plotly colour 262,144 cells in JS on every draw (536 ms of a 1.4 s page at 512
// tokens); an image of the same pixels is painted by paintPixels in one pass and drawn by the browser.
export function headImage(matrix, eligible, scale, rows, cols) {
  const canvas = document.createElement("canvas");
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, rows);
  paintPixels(img.data, matrix, eligible, scale, rows, cols);
  ctx.putImageData(img, 0, 0);
  return canvas.toDataURL("image/png");
}

// plotly's image trace hands its hover label the pixel's colour as a typed array, which its colour checks reject
// with a console warning on every hover (plotly.js 4.1): the trace's own scaler is wrapped to return a plain array.
function plainHoverColours(el) {
  for (const t of el._fullData || []) {
    if (t.type === "image" && typeof t._scaler === "function" && !t._scaler.plain) {
      const scaler = t._scaler;
      t._scaler = Object.assign((c) => Array.from(scaler(c)), { plain: true });
    }
  }
}

// A value printed in each cell, in the ink that reads on its colour (only when the cells are wide enough).
function cellAnnotations(matrix, eligible, scale, rows, cols) {
  const out = [];
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k < cols; k++) {
      if (!eligible[q][k]) continue;
      const v = matrix[q][k];
      out.push({
        x: k, y: q, text: v.toFixed(2), showarrow: false, font: { size: 11, color: inkOn(colorAt(scale.stops, normalise(v, scale))) },
      });
    }
  }
  return out;
}

export function renderFocus(el, view, head, layer) {
  if (!window.Plotly || !head) return;
  const scale = headScale(view, head);
  const S = view.tokens.length;
  const key = view.view === "scores" ? "scores" : "weights"; // head[key] of a float16 answer widens when first read
  const hover = hoverTexts(view, head);
  const keys = view.keyTokens || view.tokens;
  const K = keys.length;
  const idx = view.tokens.map((_, i) => i);
  const kidx = keys.map((_, i) => i);
  const every = Math.ceil(Math.max(S, K) / MAX_TICKS);
  const tickIdx = idx.filter((i) => i % every === 0);
  const ticks = tickLabels(view.tokens).filter((_, i) => i % every === 0);
  const kTickIdx = kidx.filter((i) => i % every === 0);
  const kTicks = tickLabels(keys).filter((_, i) => i % every === 0);
  const path = maskPath(view.eligible);
  const traces = [
    {
      // every cell, masked ones included (their hover says why), one pixel each, never smoothed
      // a float16 answer is painted from its bit patterns (arrays.js halfRows), with no widening
      type: "image", source: headImage(halfRows(head, key) ?? head[key], view.eligible, scale, S, K), x0: 0, y0: 0, dx: 1, dy: 1, zsmooth: false,
      text: hover, hovertemplate: "%{text}<extra></extra>",
    },
    {
      type: "scatter", mode: "lines", x: path.x, y: path.y, fill: "toself", hoverinfo: "skip",
      line: { width: 0 }, fillcolor: MASK_FILL, showlegend: false,
      fillpattern: { shape: "/", fgcolor: MASK_HATCH, bgcolor: MASK_FILL, size: 7, solidity: 0.15 },
    },
    {
      // the colour bar: a marker-less trace that carries the scale
      type: "scatter", mode: "markers", x: [null], y: [null], hoverinfo: "skip", showlegend: false,
      marker: {
        color: [scale.min], cmin: scale.min, cmax: scale.max, colorscale: plotlyScale(scale.stops), showscale: true,
        colorbar: { title: { text: scale.label, side: "right" }, thickness: 14, len: 0.9 },
      },
    },
  ];
  if (view.blocked.length) {
    traces.push({
      type: "scatter", mode: "markers", hoverinfo: "skip", showlegend: false,
      x: view.blocked.map(([, k]) => k), y: view.blocked.map(([q]) => q),
      marker: { symbol: "x-thin-open", color: "#202020", size: Math.max(8, Math.min(22, 260 / S)), line: { width: 2, color: "#202020" } },
    });
  }
  const ink = themeInk();
  const shapes = (view.changed || []).map(([q, k]) => ({
    type: "rect", x0: k - 0.45, x1: k + 0.45, y0: q - 0.45, y1: q + 0.45,
    line: { color: ink.text, width: 1.5, dash: "dot" },
  }));
  // the retrieval diagram's query row, and the chosen query -> key pair
  const q = view.query;
  if (q != null && q < S) {
    shapes.push({ type: "rect", x0: -0.5, x1: keys.length - 0.5, y0: q - 0.5, y1: q + 0.5, line: { color: ink.text, width: 2 }, name: "query" });
  }
  if (view.pair && view.pair.every((v) => v != null)) {
    const [pq, pk] = view.pair;
    shapes.push({ type: "rect", x0: pk - 0.5, x1: pk + 0.5, y0: pq - 0.5, y1: pq + 0.5, line: { color: "#e8590c", width: 3 }, name: "pair" });
  }
  const width = el.clientWidth || 480;
  const height = Math.round(Math.min(FOCUS_HEIGHT.max, Math.max(FOCUS_HEIGHT.min, width * 0.9)));
  const axis = (title, vals = tickIdx, text = ticks) => ({
    title: { text: title, standoff: 6 }, tickmode: "array", tickvals: vals, ticktext: text,
    showgrid: false, zeroline: false, fixedrange: false, automargin: true,
    tickfont: { size: S > 16 ? 9 : 11 },
  });
  const bg = ink.panel;
  const layout = {
    height,
    margin: { l: 10, r: 10, t: TOOLBAR_BAND, b: 10 },
    xaxis: {
      ...axis(view.keyTokens ? "Key position (source)" : "Key position", kTickIdx, kTicks),
      side: "bottom", tickangle: -45, constrain: "domain",
    },
    yaxis: { ...axis("Query position"), autorange: "reversed", scaleanchor: "x", constrain: "domain" },
    shapes,
    // a value in each cell when the cells are wide enough to hold it
    annotations:
      Math.max(S, K) <= ANNOTATE_MAX_TOKENS && (el.clientWidth || 480) / K >= ANNOTATE_MIN_PX ? cellAnnotations(head[key], view.eligible, scale, S, K) : [],
    plot_bgcolor: bg,
    paper_bgcolor: bg,
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: ink.text },
    hoverlabel: { bgcolor: "#fff", bordercolor: "#555", font: { color: "#111" } },
    modebar: { orientation: "h", bgcolor: "rgba(0,0,0,0)", color: ink.muted, activecolor: ink.text },
  };
  el.dataset.layer = String(layer);
  el.dataset.head = String(head.index);
  el.dataset.height = String(height);
  // what the image shows, for tests and tools: the matrix (read, and so widened, only when asked), its mask, its scale
  el.drawn = { get matrix() { return head[key]; }, eligible: view.eligible, scale };
  window.Plotly.react(el, traces, layout, PLOT_CONFIG);
  plainHoverColours(el);
  if (!el.dataset.clicks && clicked) {
    el.on("plotly_click", clicked); // on the first plot: plotly gives the element `on` when it first plots
    el.dataset.clicks = "1";
  }
}

const optionsFor = new WeakMap(); // the edit form's query select -> the tokens its options list

// A click on a cell blocks or unblocks it; shift-click picks the pair (set by bind).
let clicked = null;

export function deps(s) {
  return [s.run.result, s.run.diff, s.ui.view, s.ui.palette, s.ui.scoreScale, s.ui.layer, s.ui.focus, s.ui.query, s.ui.pair];
}

export function render(root, s) {
  const view = selectView(s);
  if (!view) return;
  const [fl, fh] = view.focus;
  $("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  renderFocus($("focus-plot"), view, view.focusHead, fl);
  renderSums($("sums"), { weights: view.focusHead.weights, tokens: view.tokens, keyTokens: view.keyTokens, bug: view.bug });
  // the weight-edit form: this head, the pair (or the query) as its cell
  $("edit-head").textContent = headName(fl, fh, view.multiLayer);
  const S = view.tokens.length;
  if (optionsFor.get($("edit-query")) !== view.tokens) {
    // one option a position, built once a tokens array (512 each at 512 tokens), the second select a clone
    const query = $("edit-query");
    query.replaceChildren(...view.tokens.map((_, i) => Object.assign(document.createElement("option"), { value: String(i), textContent: positionLabel(view.tokens, i) })));
    $("edit-key").replaceChildren(...[...query.options].map((o) => o.cloneNode(true)));
    optionsFor.set(query, view.tokens);
  }
  const pair = view.pair && view.pair.every((v) => v != null) ? view.pair : [Math.min(view.query, S - 1), 0];
  $("edit-query").value = String(pair[0]);
  $("edit-key").value = String(pair[1]);
}

export function bind(root, store) {
  clicked = (ev) => {
    const p = ev.points && ev.points[0];
    if (!p || !Number.isInteger(p.x) || !Number.isInteger(p.y)) return;
    if (ev.event && ev.event.shiftKey) store.dispatch(act.pairSet(p.y, p.x));
    else store.dispatch(act.cellToggled(p.y, p.x, "focus-plot"));
  };
  $("edit-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const view = selectView(store.getState());
    const weight = Number.parseFloat($("edit-weight").value);
    const query = Number($("edit-query").value);
    const key = Number($("edit-key").value);
    const bad = !view || !(weight >= 0 && weight <= 1) || !Number.isInteger(query) || !Number.isInteger(key);
    $("edit-weight").setAttribute("aria-invalid", bad ? "true" : "false");
    $("edit-error").textContent = bad ? "The weight must be a number from 0 to 1." : "";
    if (bad) return;
    store.dispatch(act.editAdded({ layer: view.focus[0], head: view.focus[1], query, key, weight }));
  });
}
