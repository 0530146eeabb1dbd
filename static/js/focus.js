// The large head (data-view="focus"): a plotly plot of the head as an image (one pixel a cell, painted here) with a
// colour bar, zoom and hover, cell values when they fit, the chosen query row and query -> key pair outlined. Masked
// cells are hatched, in the image's MASK_FILL (never a colour on the scale). The cells the last toggle changed are
// outlined by one dotted path (changedPath), whatever their number. Click a cell to block or unblock it; shift-click
// picks the pair. On touch a tap shows the cell's numbers in the readout under the plot, whose buttons block it or
// pick it. By keyboard the plot is one tab stop: the arrow keys move a cell cursor (announced in the readout), Enter
// or Space blocks or unblocks, Shift+Enter picks the pair. Under it: the row and column sums, and the form that sets
// one weight (an intervention).

import { renderSums } from "./bugs.js";
import { MASK_FILL, MASK_HATCH, colorAt, headScale, inkOn, normalise, plotlyScale } from "./colors.js";
import { halfRows } from "./arrays.js";
import { paintPixels, themeInk } from "./heatmap.js";
import { headName } from "./interventions.js";
import { moveCursor } from "./eligibility.js";
import { REASONS, cellReasons } from "./masks.js";
import { PLOT_CONFIG } from "./plotly.js";
import { act } from "./store.js";
import { selectView } from "./selectors.js";
import { positionLabel } from "./tophead.js";

const $ = (id) => document.getElementById(id);
export const needsPlotly = true; // main.js draws this view once plotly is loaded

export const ANNOTATE_MAX_TOKENS = 12; // print the value in each cell up to this many positions
export const ANNOTATE_MIN_PX = 40; // ... and when the plot gives each column at least this many px
export const MAX_TICKS = 24; // beyond this many positions every n-th one is labelled
export const TICK_PX = { x: 1.7, y: 1.35 }; // a label needs this many times its font size along its axis (x: at 45°)
export const FOCUS_HEIGHT = { min: 280, max: 560 }; // the plot is about as tall as it is wide, within these
export const TOP_BAND = 10; // px above the cells
export const INNER_EDGES_PX = 14; // cells at least this big get their own outline inside a changed region

// Plotly reads a few HTML-like tags and entities in its strings; tokens are escaped so they stay text.
export function plotlyText(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function tickLabels(tokens) {
  return tokens.map((t, i) => `${plotlyText(t.length > 12 ? `${t.slice(0, 11)}…` : t)} ${i}`);
}

// Label every n-th of `count` positions: as many labels as fit along `lengthPx` of axis at `perLabel` px each, at
// most MAX_TICKS.
export function tickEvery(count, lengthPx, perLabel) {
  const fit = Math.max(1, Math.min(MAX_TICKS, Math.floor(lengthPx / perLabel)));
  return Math.max(1, Math.ceil(count / fit));
}

// The axis ticks for labels of every n-th position.
function ticksOf(labels, every) {
  const vals = [];
  const text = [];
  for (let i = 0; i < labels.length; i += every) {
    vals.push(i);
    text.push(labels[i]);
  }
  return { tickvals: vals, ticktext: text };
}

// The outline of a set of cells ([q, k] pairs in an S x K grid) as one SVG path in data coordinates (what a plotly
// shape of type "path" takes): each edge between a cell in the set and one outside it (inner: every edge of every
// cell in it), joined into the longest straight runs. A causal mask turned on at 512 tokens changes 130,816 cells;
// their outline is about 1,000 runs, in one path element.
export function changedPath(changed, S, K, inner = false) {
  const parts = [];
  if (!changed.length) return { path: "", runs: 0 };
  const grid = new Uint8Array(S * K);
  for (const [q, k] of changed) if (q >= 0 && k >= 0 && q < S && k < K) grid[q * K + k] = 1;
  const at = (q, k) => (q >= 0 && k >= 0 && q < S && k < K ? grid[q * K + k] : 0);
  const edge = (a, b) => (inner ? a || b : a !== b);
  let runs = 0;
  // horizontal edges: above row q, between cells (q - 1, k) and (q, k)
  for (let q = 0; q <= S; q++) {
    let start = -1;
    for (let k = 0; k <= K; k++) {
      const on = k < K && edge(at(q - 1, k), at(q, k));
      if (on && start < 0) start = k;
      if (!on && start >= 0) {
        parts.push(`M${start - 0.5},${q - 0.5}L${k - 0.5},${q - 0.5}`);
        runs++;
        start = -1;
      }
    }
  }
  // vertical edges: left of column k, between cells (q, k - 1) and (q, k)
  for (let k = 0; k <= K; k++) {
    let start = -1;
    for (let q = 0; q <= S; q++) {
      const on = q < S && edge(at(q, k - 1), at(q, k));
      if (on && start < 0) start = q;
      if (!on && start >= 0) {
        parts.push(`M${k - 0.5},${start - 0.5}L${k - 0.5},${q - 0.5}`);
        runs++;
        start = -1;
      }
    }
  }
  return { path: parts.join(""), runs };
}

// What the readout says about cell (q, k): both tokens, the score, the weight and which masks exclude it.
export function cellReadout(view, head, q, k) {
  const reasons = cellReasons(view, q, k);
  const keys = view.keyTokens || view.tokens;
  const num = (m) => (m ? Number(m[q][k]).toFixed(4) : "–");
  return {
    text:
      `query ${q} “${view.tokens[q]}” → key ${k} “${keys[k]}”: score ${num(head.scores)}` +
      `${reasons.length ? " (before masking)" : ""}, weight ${num(head.weights)}, ` +
      `${reasons.length ? `masked by ${reasons.join(", ")}` : "eligible"}`,
    blocked: reasons.includes("blocked"),
  };
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

// The outlines drawn as plotly shapes, a handful whatever the length: what the last toggle changed (`outline`, one
// changedPath: a white path under a dotted black one, readable on every colour and on the hatch), the retrieval
// diagram's query row, the chosen query -> key pair, and the cell cursor (white under black).
export function focusShapes(view, S, K, ink, cursor, outline = "") {
  const shapes = [];
  if (outline) {
    for (const [color, width, dash] of [["#fff", 2.5, "solid"], ["#000", 1.5, "dot"]]) {
      shapes.push({ type: "path", path: outline, line: { color, width, dash }, name: "changed" });
    }
  }
  const q = view.query;
  if (q != null && q < S) {
    shapes.push({ type: "rect", x0: -0.5, x1: K - 0.5, y0: q - 0.5, y1: q + 0.5, line: { color: ink.text, width: 2 }, name: "query" });
  }
  if (view.pair && view.pair.every((v) => v != null)) {
    const [pq, pk] = view.pair;
    shapes.push({ type: "rect", x0: pk - 0.5, x1: pk + 0.5, y0: pq - 0.5, y1: pq + 0.5, line: { color: "#e8590c", width: 3 }, name: "pair" });
  }
  if (cursor && cursor[0] < S && cursor[1] < K) {
    const [cq, ck] = cursor;
    for (const [color, width] of [["#fff", 4], ["#000", 2]]) {
      shapes.push({ type: "rect", x0: ck - 0.5, x1: ck + 0.5, y0: cq - 0.5, y1: cq + 0.5, line: { color, width }, name: "cursor" });
    }
  }
  return shapes;
}

export function renderFocus(el, view, head, layer) {
  if (!window.Plotly || !head) return;
  const scale = headScale(view, head);
  const S = view.tokens.length;
  const key = view.view === "scores" ? "scores" : "weights"; // head[key] of a float16 answer widens when first read
  const hover = hoverTexts(view, head);
  const keys = view.keyTokens || view.tokens;
  const K = keys.length;
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
  const width = el.clientWidth || 480;
  const height = Math.round(Math.min(FOCUS_HEIGHT.max, Math.max(FOCUS_HEIGHT.min, width * 0.9)));
  // what the last toggle changed: one path whatever the number of cells, never a shape per cell (130,816 dotted
  // rectangles at 512 tokens froze the tab for minutes)
  const cellPx = Math.min(width, height) / Math.max(S, K);
  el.outline = changedPath(view.changed || [], S, K, cellPx >= INNER_EDGES_PX).path;
  const shapes = focusShapes(view, S, K, ink, el.cursor, el.outline);
  // as many labels as fit along each axis (the length the plot had last time, else a guess from its width)
  const font = S > 16 ? 9 : 11;
  const prevLen = el._fullLayout?.xaxis?._length;
  const guess = Math.max(120, Math.min(width - 160, height - 120));
  const xTicks = ticksOf(tickLabels(keys), tickEvery(K, prevLen || guess, font * TICK_PX.x));
  const yTicks = ticksOf(tickLabels(view.tokens), tickEvery(S, el._fullLayout?.yaxis?._length || guess, font * TICK_PX.y));
  const axis = (title, t) => ({
    title: { text: title, standoff: 6 }, tickmode: "array", ...t,
    showgrid: false, zeroline: false, fixedrange: false, automargin: true,
    tickfont: { size: font },
  });
  const bg = ink.panel;
  const layout = {
    height,
    margin: { l: 10, r: 10, t: TOP_BAND, b: 10 },
    xaxis: {
      ...axis(view.keyTokens ? "Key position (source)" : "Key position", xTicks),
      side: "bottom", tickangle: -45, constrain: "domain",
    },
    yaxis: { ...axis("Query position", yTicks), autorange: "reversed", scaleanchor: "x", constrain: "domain" },
    shapes,
    // a value in each cell when the cells are wide enough to hold it
    annotations:
      Math.max(S, K) <= ANNOTATE_MAX_TOKENS && (el.clientWidth || 480) / K >= ANNOTATE_MIN_PX ? cellAnnotations(head[key], view.eligible, scale, S, K) : [],
    plot_bgcolor: bg,
    paper_bgcolor: bg,
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: ink.text },
    hoverlabel: { bgcolor: "#fff", bordercolor: "#555", font: { color: "#111" } },
  };
  el.dataset.layer = String(layer);
  el.dataset.head = String(head.index);
  el.dataset.height = String(height);
  // what the image shows, for tests and tools: the matrix (read, and so widened, only when asked), its mask, its scale
  el.drawn = { get matrix() { return head[key]; }, eligible: view.eligible, scale };
  el.drawnView = view;
  el.dataset.ticks = "";
  // the labels again for the length the axes took once plotly has placed them (its automatic margins are worked out
  // after the first pass): data-ticks says they are final
  const fitTicks = () => {
    if (el.drawnView !== view || !el._fullLayout?.xaxis) return;
    const fit = {};
    for (const [name, count, labels, per, had] of [
      ["xaxis", K, tickLabels(keys), font * TICK_PX.x, xTicks],
      ["yaxis", S, tickLabels(view.tokens), font * TICK_PX.y, yTicks],
    ]) {
      const t = ticksOf(labels, tickEvery(count, el._fullLayout[name]._length, per));
      if (t.tickvals.length !== had.tickvals.length) Object.assign(fit, { [`${name}.tickvals`]: t.tickvals, [`${name}.ticktext`]: t.ticktext });
    }
    const done = () => {
      el.dataset.ticks = String(el._fullLayout.xaxis.tickvals.length);
    };
    if (Object.keys(fit).length) Promise.resolve(window.Plotly.relayout(el, fit)).then(done);
    else done();
  };
  Promise.resolve(window.Plotly.react(el, traces, layout, PLOT_CONFIG)).then(fitTicks);
  plainHoverColours(el);
  if (!el.dataset.clicks && clicked) {
    el.on("plotly_click", clicked); // on the first plot: plotly gives the element `on` when it first plots
    // a drag zooms in; "Reset zoom" shows while it is zoomed (a new draw shows the whole head again)
    el.on("plotly_relayout", (e) => {
      const keys = Object.keys(e || {});
      if (keys.some((k) => k.includes(".range"))) $("focus-reset").hidden = false;
      else if (keys.some((k) => k.endsWith(".autorange"))) $("focus-reset").hidden = true;
    });
    el.dataset.clicks = "1";
  }
  $("focus-reset").hidden = true;
}

const optionsFor = new WeakMap(); // the edit form's query select -> the tokens its options list

// A click on a cell blocks or unblocks it; shift-click picks the pair (set by bind).
let clicked = null;

export function deps(s) {
  return [s.run.result, s.run.diff, s.ui.view, s.ui.palette, s.ui.scoreScale, s.ui.layer, s.ui.focus, s.ui.query, s.ui.pair, s.cursor];
}

// The cell cursor within this view's grid, or null.
function cursorIn(view, cursor) {
  const K = (view.keyTokens || view.tokens).length;
  return cursor && cursor[0] < view.tokens.length && cursor[1] < K ? cursor : null;
}

// The readout under the plot: the cursor's cell in words (a live region, so a keyboard move is announced) and the
// buttons that do what a click and a shift-click do (on touch, a tap only shows the numbers).
function renderReadout(view, cursor) {
  const box = $("focus-readout");
  box.hidden = !cursor;
  if (!cursor) return;
  const [q, k] = cursor;
  const r = cellReadout(view, view.focusHead, q, k);
  box.dataset.q = String(q);
  box.dataset.k = String(k);
  box.querySelector("[data-role=text]").textContent = r.text;
  box.querySelector("[data-role=block]").textContent = r.blocked ? "Unblock this cell" : "Block this cell";
}

export function render(root, s) {
  const view = selectView(s);
  if (!view) return;
  const [fl, fh] = view.focus;
  const el = $("focus-plot");
  const cursor = cursorIn(view, s.cursor);
  renderReadout(view, cursor);
  el.setAttribute("aria-label", `${view.multiLayer ? `Layer ${fl} head ${fh}` : `Head ${fh}`}: ${view.tokens.length} queries by ${(view.keyTokens || view.tokens).length} keys. Arrow keys move the cell cursor, Enter or Space blocks or unblocks it, Shift+Enter picks the pair`);
  if (el.drawnView === view && el.cursor !== cursor && el._fullLayout) {
    // only the cursor moved: its outline, not the head's image, is drawn again
    el.cursor = cursor;
    const S = view.tokens.length;
    window.Plotly.relayout(el, { shapes: focusShapes(view, S, (view.keyTokens || view.tokens).length, themeInk(), cursor, el.outline) });
    return;
  }
  el.cursor = cursor;
  $("focus-title").textContent = view.multiLayer ? `Layer ${fl} · head ${fh}, large` : `Head ${fh}, large`;
  renderFocus(el, view, view.focusHead, fl);
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

// Whether a plotly click came from a finger: the event plotly hands on, else the device's main pointer.
export function fromTouch(e) {
  if (e && (String(e.type).startsWith("touch") || e.pointerType === "touch" || e.sourceCapabilities?.firesTouchEvents)) return true;
  return typeof matchMedia === "function" && matchMedia("(hover: none) and (pointer: coarse)").matches;
}

function readoutBox() {
  const box = document.createElement("div");
  box.id = "focus-readout";
  box.className = "focus-readout";
  box.dataset.testid = "focus-readout";
  box.hidden = true;
  const text = Object.assign(document.createElement("p"), { className: "readout-text" });
  text.dataset.role = "text";
  text.setAttribute("aria-live", "polite");
  const block = Object.assign(document.createElement("button"), { type: "button", className: "secondary small-btn" });
  block.dataset.role = "block";
  const pair = Object.assign(document.createElement("button"), { type: "button", className: "secondary small-btn", textContent: "Top heads for this pair" });
  pair.dataset.role = "pair";
  box.append(text, block, pair);
  return box;
}

export function bind(root, store) {
  const el = $("focus-plot");
  if (!$("focus-readout")) el.after(readoutBox());
  const reset = Object.assign(document.createElement("button"), { type: "button", id: "focus-reset", className: "secondary small-btn", textContent: "Reset zoom", hidden: true });
  reset.addEventListener("click", () => window.Plotly?.relayout(el, { "xaxis.autorange": true, "yaxis.autorange": "reversed" }));
  $("focus-title").after(reset);
  el.tabIndex = 0;
  el.setAttribute("role", "application");
  el.setAttribute("aria-roledescription", "attention heatmap");
  el.setAttribute("aria-describedby", "focus-readout");
  const here = () => {
    const view = selectView(store.getState());
    return view ? [view, cursorIn(view, store.getState().cursor)] : [null, null];
  };
  clicked = (ev) => {
    const p = ev.points && ev.points[0];
    if (!p || !Number.isInteger(p.x) || !Number.isInteger(p.y)) return;
    if (ev.event && ev.event.shiftKey) store.dispatch(act.pairSet(p.y, p.x));
    else if (fromTouch(ev.event)) store.dispatch(act.cursorSet([p.y, p.x])); // a tap shows the numbers; the readout blocks
    else store.dispatch(act.cellToggled(p.y, p.x, "focus-plot"));
  };
  el.addEventListener("focus", (e) => {
    if (e.target !== el) return;
    const [view, cursor] = here();
    if (view && !cursor) store.dispatch(act.cursorSet(view.pair && view.pair.every((v) => v != null) ? [...view.pair] : [0, 0]));
  });
  el.addEventListener("keydown", (e) => {
    if (e.target !== el) return;
    const [view, cursor] = here();
    if (!view) return;
    const [q, k] = cursor || [0, 0];
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      if (e.shiftKey) store.dispatch(act.pairSet(q, k));
      else store.dispatch(act.cellToggled(q, k, "focus-plot"));
      return;
    }
    const S = view.tokens.length;
    const to = moveCursor([q, k], e.key, S, (view.keyTokens || view.tokens).length, Math.max(8, Math.ceil(S / 16)));
    if (!to) return;
    e.preventDefault();
    store.dispatch(act.cursorSet(to));
  });
  $("focus-readout").addEventListener("click", (e) => {
    const b = e.target instanceof Element ? e.target.closest("button[data-role]") : null;
    const [, cursor] = here();
    if (!b || !cursor) return;
    if (b.dataset.role === "block") store.dispatch(act.cellToggled(cursor[0], cursor[1], "focus-plot"));
    else store.dispatch(act.pairSet(cursor[0], cursor[1]));
  });
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
