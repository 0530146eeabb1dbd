// The large head's cells as data, apart from its drawing (focus.js): the axis labels thinned to what fits, the
// hover text and the touch readout of a cell, the one path around the masked cells and the one around the cells the
// last change touched (never a shape per cell), the head as an image, cell values, and the plot's shapes. Pure
// helpers a test can call; nothing here touches the page.

import { MASK_FILL, colorAt, inkOn, normalise } from "./colors.js";
import { paintPixels, sinkHover } from "./heatmap.js";
import { LAYER_WINDOW, REASONS, cellReasons } from "./masks.js";
import { pieceLabel, pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const ANNOTATE_MAX_TOKENS = 12; // print the value in each cell up to this many positions
export const ANNOTATE_MIN_PX = 40; // ... and when the plot gives each column at least this many px
export const MAX_TICKS = 24; // beyond this many positions every n-th one is labelled
export const TICK_PX = { x: 1.7, y: 1.35 }; // a label needs this many times its font size along its axis (x: at 45°)
export const FOCUS_HEIGHT = { min: 280, max: 560 }; // the plot is about as tall as it is wide, within these
export const TOP_BAND = 10; // px above the cells
export const INNER_EDGES_PX = 14; // cells at least this big get their own outline inside a changed region

// The plot's margins for its tick labels, worked out here rather than by plotly's automatic margins, which measure
// each label in the laid-out page and then plot again: a fresh 512-token large head took 325 ms to plot with them
// and 95 ms with margins given (bench/README.md). `measure(text)` is a label's width in px at the plot's font; the
// y labels stand left of the cells, the x labels hang below them at 45°, and each axis's title and the colour bar
// on the right get room of their own.
export const AXIS_TITLE_PX = 30; // a title, its standoff and the ticks
export const COLORBAR_PX = 84; // the colour bar, its numbers and its title
export function focusMargins(xText, yText, font, measure) {
  const widest = (labels) => labels.reduce((w, t) => Math.max(w, measure(plainText(t))), 0);
  const diagonal = Math.SQRT1_2 * (widest(xText) + font);
  return {
    l: Math.ceil(Math.max(widest(yText), diagonal) + AXIS_TITLE_PX),
    r: COLORBAR_PX,
    t: TOP_BAND,
    b: Math.ceil(diagonal + AXIS_TITLE_PX),
    autoexpand: false,
  };
}

// A label as it shows: plotlyText's escapes read back.
function plainText(s) {
  return String(s).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&amp;/g, "&");
}

// Plotly reads a few HTML-like tags and entities in its strings; tokens are escaped so they stay text.
export function plotlyText(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function tickLabels(tokens) {
  return tokens.map((t, i) => `${plotlyText(pieceLabel(t, 12))} ${pos(i)}`);
}

// Label every n-th of `count` positions: as many labels as fit along `lengthPx` of axis at `perLabel` px each, at
// most MAX_TICKS.
export function tickEvery(count, lengthPx, perLabel) {
  const fit = Math.max(1, Math.min(MAX_TICKS, Math.floor(lengthPx / perLabel)));
  return Math.max(1, Math.ceil(count / fit));
}

// The axis ticks for labels of every n-th position.
export function ticksOf(labels, every) {
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
      `query ${pos(q)} ${pieceQuote(view.tokens[q])} → key ${pos(k)} ${pieceQuote(keys[k])}: score ${num(head.scores)}` +
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
    `Query ${pos(q)} ${plotlyText(pieceQuote(view.tokens[q]))} → key ${pos(k)} ${plotlyText(pieceQuote(keys[k]))}`,
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
  const grids = view.reasons
    ? REASONS.filter((name) => view.reasons[name]).map((name) => [name, view.reasons[name]])
    : null;
  const cols = keys.map((t, k) => `${pos(k)} ${plotlyText(pieceQuote(t))}<br>`);
  const num = (m, q, k) => (m ? m[q][k].toFixed(4) : "–");
  return lazyRows(view.tokens.length, (q) => {
    const start = `Query ${pos(q)} ${plotlyText(pieceQuote(view.tokens[q]))} → key `;
    const row = new Array(keys.length);
    for (let k = 0; k < keys.length; k++) {
      let reasons;
      if (grids) {
        reasons = [];
        for (const [name, g] of grids) if (g[q]?.[k]) reasons.push(name);
        if (!reasons.length && !view.eligible[q][k]) reasons.push(LAYER_WINDOW);
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
  return headCanvas(matrix, eligible, scale, rows, cols).toDataURL("image/png");
}

// The same pixels on a canvas of cols x rows (focus.js sketch shows it before plotly's first plot).
export function headCanvas(matrix, eligible, scale, rows, cols) {
  const canvas = document.createElement("canvas");
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, rows);
  paintPixels(img.data, matrix, eligible, scale, rows, cols);
  ctx.putImageData(img, 0, 0);
  return canvas;
}

// A value printed in each cell, in the ink that reads on its colour (only when the cells are wide enough).
export function cellAnnotations(matrix, eligible, scale, rows, cols) {
  const out = [];
  for (let q = 0; q < rows; q++) {
    for (let k = 0; k < cols; k++) {
      if (!eligible[q][k]) continue;
      const v = matrix[q][k];
      out.push({
        x: k,
        y: q,
        text: v.toFixed(2),
        showarrow: false,
        font: { size: 11, color: inkOn(colorAt(scale.stops, normalise(v, scale))) },
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
    for (const [color, width, dash] of [
      ["#fff", 2.5, "solid"],
      ["#000", 1.5, "dot"],
    ]) {
      shapes.push({ type: "path", path: outline, line: { color, width, dash }, name: "changed" });
    }
  }
  const q = view.query;
  if (q != null && q < S) {
    shapes.push({
      type: "rect",
      x0: -0.5,
      x1: K - 0.5,
      y0: q - 0.5,
      y1: q + 0.5,
      line: { color: ink.text, width: 2 },
      name: "query",
    });
  }
  if (view.pair && view.pair.every((v) => v != null)) {
    const [pq, pk] = view.pair;
    shapes.push({
      type: "rect",
      x0: pk - 0.5,
      x1: pk + 0.5,
      y0: pq - 0.5,
      y1: pq + 0.5,
      line: { color: "#e8590c", width: 3 },
      name: "pair",
    });
  }
  if (cursor && cursor[0] < S && cursor[1] < K) {
    const [cq, ck] = cursor;
    for (const [color, width] of [
      ["#fff", 4],
      ["#000", 2],
    ]) {
      shapes.push({
        type: "rect",
        x0: ck - 0.5,
        x1: ck + 0.5,
        y0: cq - 0.5,
        y1: cq + 0.5,
        line: { color, width },
        name: "cursor",
      });
    }
  }
  return shapes;
}

// A head's learned sink (its weight per query) beside the K key columns of the large head, as plotly data: an image
// trace one pixel wide at x = K + 0.5 (half a cell apart from the keys), on the keys' colour scale, with its hover;
// the dashed outline that sets it apart; and its tick, "sink".
export function sinkColumn(sink, scale, K, ink) {
  const x = K + 0.5;
  const S = sink.length;
  return {
    trace: {
      type: "image",
      x0: x,
      y0: 0,
      dx: 1,
      dy: 1,
      zsmooth: false,
      colormodel: "rgb",
      z: Array.from(sink, (w) => [colorAt(scale.stops, normalise(w, scale)).map(Math.round)]),
      text: Array.from(sink, (w, q) => [sinkHover(q, w)]),
      hovertemplate: "%{text}<extra></extra>",
    },
    shape: {
      type: "rect",
      x0: x - 0.5,
      x1: x + 0.5,
      y0: -0.5,
      y1: S - 0.5,
      line: { color: ink.text, width: 1, dash: "dot" },
      layer: "above",
    },
    tick: { value: x, text: "sink" },
  };
}
