// One attention matrix drawn on a canvas: rows = query positions, columns = key positions (S x S, or S_q x S_k with
// cross-attention, where the keys come from another sequence).
// Eligible cells take the colour scale; masked cells are hatched grey, never a colour on the scale.
// Geometry helpers are pure so tests can call them; `drawHeatmap` only paints.

import { halfValues, widenHalf } from "./arrays.js";
import { BLOCKED_MARK, MASK_FILL, MASK_HATCH, colorAt, hexToRgb, normalise, rgbStops, rgbString } from "./colors.js";
import { pieceLabel } from "./piece.js";
import { pos } from "./positions.js";

export const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
export const MIN_LABEL_CELL = 9; // below this cell size tick labels are thinned to every n-th position
export const HATCH_GAP = 5;
export const DOWNSAMPLE_BELOW = 3; // cells smaller than this (px) are painted one pixel each, then scaled down
export const HATCH_FROM = 4; // cells at least this big (px) are hatched; smaller masked cells are a flat MASK_FILL
export const SINK_GAP = 6; // px between the last key column and a head's learned sink column

let inkRead = null; // {dark, ink}: the colours last read, and for which colour scheme

// The page's ink colours and its panels' ground from its CSS (they follow the light or dark theme); fallbacks for
// a bare document. Read once a colour scheme, the only thing that changes them: a computed style read after a
// view has written to the page makes the browser work out the style of the whole page there and then, in the
// middle of the draw.
export function themeInk() {
  const dark = typeof matchMedia === "function" && matchMedia("(prefers-color-scheme: dark)").matches;
  if (inkRead && inkRead.dark === dark) return inkRead.ink;
  const css = typeof document !== "undefined" ? getComputedStyle(document.documentElement) : null;
  const v = (name, fallback) => (css && css.getPropertyValue(name).trim()) || fallback;
  const ink = {
    text: v("--ink", "#222"),
    muted: v("--muted", "#555"),
    frame: v("--frame", "#9a9a9a"),
    panel: v("--panel", "#fff"),
  };
  if (css) inkRead = { dark, ink };
  return ink;
}

export function truncate(token, n) {
  const t = String(token);
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

// Where everything goes for a matrix of `seqLen` query rows and `cols` key columns (default: square) with cells of
// `cell` px. `plot` is the height of the matrix, `plotW` its width. `sink`: one more column, SINK_GAP px right of
// the keys at `sinkX`, for a head with a learned sink (a layout without it has no `sinkX`).
export function layoutFor(seqLen, { cell, labels = true, maxLabel = 8, cols = seqLen, sink = false }) {
  const font = Math.max(8, Math.min(12, Math.round(cell * 0.75)));
  const labelWidth = labels ? Math.ceil(font * 0.62 * (maxLabel + 3)) : 0;
  const titleBand = labels ? font + 8 : 0;
  const left = titleBand + labelWidth + 4;
  const top = 4;
  const plot = seqLen * cell;
  const plotW = cols * cell;
  const bottom = labels ? Math.ceil(labelWidth * 0.75) + titleBand + 4 : 4;
  const L = {
    seqLen,
    cols,
    cell,
    font,
    labels,
    maxLabel,
    left,
    top,
    plot,
    plotW,
    titleBand,
    labelWidth,
    width: left + plotW + 6,
    height: top + plot + bottom,
    step: cell >= MIN_LABEL_CELL ? 1 : Math.ceil(MIN_LABEL_CELL / Math.max(cell, 1)),
  };
  if (sink) {
    L.sinkX = left + plotW + SINK_GAP;
    L.width += SINK_GAP + cell;
  }
  return L;
}

// The sink weight each query of a head gave its learned sink, one number a query (a batch answer's `sink` is B x S:
// item `item`'s row), or null for a head without a sink.
export function sinkWeights(head, item = 0) {
  const sink = head?.sink;
  if (sink == null) return null;
  return typeof sink[0] === "number" ? sink : (sink[item] ?? null);
}

// What hovering query q's sink cell says: the sink weight w, and what it leaves the keys.
export function sinkHover(q, w) {
  return `query ${pos(q)} → the head's sink: ${w.toFixed(4)} (no value; the row's weights over the keys sum to 1 - ${w.toFixed(4)} = ${(1 - w).toFixed(4)})`;
}

// A head's mean learned sink weight for its card's caption (apart from `sink_mass`, the weight on the first or hidden
// keys), or "" without one.
export function sinkCaption(stats) {
  return stats?.mean_sink_weight != null ? `learned sink w̄ ${stats.mean_sink_weight.toFixed(2)}` : "";
}

// The cell under canvas point (x, y), or null outside the matrix; over a sink column, {q, k: null, sink: true}.
export function cellAt(layout, x, y) {
  const k = Math.floor((x - layout.left) / layout.cell);
  const q = Math.floor((y - layout.top) / layout.cell);
  if (layout.sinkX != null && x >= layout.sinkX && x < layout.sinkX + layout.cell && q >= 0 && q < layout.seqLen) {
    return { q, k: null, sink: true };
  }
  if (k < 0 || q < 0 || k >= (layout.cols ?? layout.seqLen) || q >= layout.seqLen) return null;
  return { q, k };
}

// Masked cells as "q-k" strings, row by row: what the canvas hatches (exposed on the element for tests).
export function maskedCells(eligible) {
  const out = [];
  eligible.forEach((row, q) => row.forEach((ok, k) => ok || out.push(`${q}-${k}`)));
  return out;
}

// The colour of each eligible cell and null for a masked one: the z a heatmap draws. Rows may be typed arrays (the
// arrays form), whose own map could not hold a null: Array.from makes plain rows.
export function drawnValues(matrix, eligible) {
  return matrix.map((row, q) => Array.from(row, (v, k) => (eligible[q][k] ? v : null)));
}

function hatch(ctx, x, y, w, h) {
  ctx.save();
  ctx.beginPath();
  ctx.rect(x, y, w, h);
  ctx.clip();
  ctx.strokeStyle = MASK_HATCH;
  ctx.lineWidth = 1;
  ctx.beginPath();
  // lines x + y = C for C on a global grid, so the stripes of neighbouring runs line up
  for (let C = Math.floor((x + y) / HATCH_GAP) * HATCH_GAP; C <= x + w + y + h; C += HATCH_GAP) {
    ctx.moveTo(C - y - h, y + h);
    ctx.lineTo(C - y, y);
  }
  ctx.stroke();
  ctx.restore();
}

// One RGBA pixel per cell into `data` (an ImageData's): colorAt(stops, normalise(v, scale)) for an eligible cell,
// MASK_FILL for a masked one, the same numbers written in place, with no array per cell or per row (12 heads at
// 512 tokens are 3.1 million cells: the arrays cost most of the heads' draw). Rows of float16 bit patterns
// (Uint16Array, arrays.js halfRows) are painted from a table of every pattern's colour, worked out by this same
// arithmetic once a scale: the same pixels as their widened values give, at one lookup a cell.
export function paintPixels(data, matrix, eligible, scale, rows, cols) {
  if (rows > 0 && matrix[0] instanceof Uint16Array && data.byteOffset % 4 === 0) {
    paintHalf(new Uint32Array(data.buffer, data.byteOffset, rows * cols), matrix, eligible, scale, rows, cols);
    return;
  }
  const rgb = rgbStops(scale.stops);
  const last = rgb.length - 2;
  const [mr, mg, mb] = hexToRgb(MASK_FILL);
  const { min } = scale;
  const span = scale.max - scale.min;
  for (let q = 0; q < rows; q++) {
    const row = matrix[q];
    const ok = eligible[q];
    let o = q * cols * 4;
    for (let k = 0; k < cols; k++, o += 4) {
      data[o + 3] = 255;
      if (!ok[k]) {
        data[o] = mr;
        data[o + 1] = mg;
        data[o + 2] = mb;
        continue;
      }
      const t = (row[k] - min) / span;
      const x = Number.isFinite(t) ? Math.min(1, Math.max(0, t)) : 0;
      const pos = x * (last + 1);
      const i = Math.min(last, Math.floor(pos));
      const f = pos - i;
      const a = rgb[i];
      const b = rgb[i + 1];
      data[o] = a[0] + (b[0] - a[0]) * f;
      data[o + 1] = a[1] + (b[1] - a[1]) * f;
      data[o + 2] = a[2] + (b[2] - a[2]) * f;
    }
  }
}

const halfColours = new Map(); // "min,max,stops" -> Uint32Array(65536): each float16 pattern's RGBA as one word
const HALF_COLOURS_KEPT = 16;

// The RGBA word of every float16 bit pattern on `scale` (and, at index 65536, MASK_FILL's), painted by
// paintPixels' own loop over one row of all 65536 values, read back as 32-bit words in the platform's byte order.
export function halfColourTable(scale) {
  const key = `${scale.min},${scale.max},${scale.stops.join(",")}`;
  let table = halfColours.get(key);
  if (!table) {
    const bytes = new Uint8ClampedArray((65536 + 1) * 4);
    const ok = new Uint8Array(65536 + 1).fill(1);
    ok[65536] = 0;
    const values = new Float32Array(65536 + 1);
    values.set(halfValues());
    paintPixels(bytes, [values], [ok], scale, 1, 65536 + 1);
    table = new Uint32Array(bytes.buffer);
    if (halfColours.size >= HALF_COLOURS_KEPT) halfColours.delete(halfColours.keys().next().value);
    halfColours.set(key, table);
  }
  return table;
}

const runsCache = new WeakMap(); // eligibility matrix -> [Int32Array]: each row's eligible runs

// Each row's runs of eligible keys, as [start, end, start, end, ...]: worked out once a result, not once a head.
export function eligibleRuns(eligible) {
  let runs = runsCache.get(eligible);
  if (!runs) {
    runs = eligible.map((ok) => {
      const out = [];
      for (let k = 0; k < ok.length; k++) {
        if (!ok[k]) continue;
        const start = k;
        while (k < ok.length && ok[k]) k++;
        out.push(start, k);
      }
      return Int32Array.from(out);
    });
    runsCache.set(eligible, runs);
  }
  return runs;
}

// Masked stretches of a row filled with the mask's word, each eligible run looked up cell by cell.
function paintHalf(out, matrix, eligible, scale, rows, cols) {
  const table = halfColourTable(scale);
  const mask = table[65536];
  const runs = eligibleRuns(eligible);
  for (let q = 0; q < rows; q++) {
    const row = matrix[q];
    const o = q * cols;
    const r = runs[q];
    let from = 0;
    for (let i = 0; i < r.length; i += 2) {
      const end = Math.min(r[i + 1], cols);
      if (r[i] > from) out.fill(mask, o + from, o + Math.min(r[i], cols));
      for (let k = r[i]; k < end; k++) out[o + k] = table[row[k]];
      from = Math.max(from, end);
    }
    if (from < cols) out.fill(mask, o + from, o + cols);
  }
}

// A matrix as drawnValues and the big-cell path read it: float16 bit rows widened, any other rows as they are.
function valuesOf(matrix) {
  return matrix.length && matrix[0] instanceof Uint16Array ? matrix.map((row) => widenHalf(row)) : matrix;
}

// Paint one heatmap. opts: {matrix (rows of numbers, or of float16 bit patterns), eligible, blocked, tokens,
// keyTokens (default tokens), scale, layout, highlight: {q?, k?}, changed: [[q,k]]}
export function drawHeatmap(ctx, opts) {
  const { matrix, eligible, tokens, scale, layout: L } = opts;
  const keyTokens = opts.keyTokens || tokens;
  const blocked = opts.blocked || [];
  const c = L.cell;
  const cols = L.cols ?? L.seqLen;
  const plotW = L.plotW ?? L.plot;
  ctx.save();
  ctx.clearRect(0, 0, L.width, L.height);
  if (opts.background) {
    ctx.fillStyle = opts.background;
    ctx.fillRect(0, 0, L.width, L.height);
  }
  const ink = themeInk();
  if (c < DOWNSAMPLE_BELOW) {
    // one pixel per cell on a canvas of its own, scaled down into the plot: the thumbnail averages the cells it
    // covers instead of dropping rows, and costs S² pixels, not S² rectangles
    const src = document.createElement("canvas");
    src.width = cols;
    src.height = L.seqLen;
    const img = src.getContext("2d").createImageData(cols, L.seqLen);
    paintPixels(img.data, matrix, eligible, scale, L.seqLen, cols);
    src.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(src, L.left, L.top, plotW, L.plot);
    finish(ctx, L, opts, tokens, keyTokens, ink);
    return;
  }
  const values = drawnValues(valuesOf(matrix), eligible);
  for (let q = 0; q < L.seqLen; q++) {
    for (let k = 0; k < cols; k++) {
      const x = L.left + k * c;
      const y = L.top + q * c;
      const v = values[q][k];
      if (v === null) {
        ctx.fillStyle = MASK_FILL;
        ctx.fillRect(x, y, c, c);
      } else {
        ctx.fillStyle = rgbString(colorAt(scale.stops, normalise(v, scale)));
        ctx.fillRect(x, y, c, c);
      }
    }
  }
  // hatch each masked run along a row at once
  for (let q = 0; q < (c >= HATCH_FROM ? L.seqLen : 0); q++) {
    let start = -1;
    for (let k = 0; k <= cols; k++) {
      const masked = k < cols && values[q][k] === null;
      if (masked && start < 0) start = k;
      if (!masked && start >= 0) {
        hatch(ctx, L.left + start * c, L.top + q * c, (k - start) * c, c);
        start = -1;
      }
    }
  }
  if (c >= 6) {
    ctx.strokeStyle = BLOCKED_MARK;
    ctx.lineWidth = Math.max(1, c / 10);
    for (const [q, k] of blocked) {
      if (q >= L.seqLen || k >= cols) continue;
      const x = L.left + k * c;
      const y = L.top + q * c;
      const m = c * 0.25;
      ctx.beginPath();
      ctx.moveTo(x + m, y + m);
      ctx.lineTo(x + c - m, y + c - m);
      ctx.moveTo(x + c - m, y + m);
      ctx.lineTo(x + m, y + c - m);
      ctx.stroke();
    }
  }
  if (opts.changed && opts.changed.length && c >= 6) {
    ctx.setLineDash([2, 2]);
    ctx.lineWidth = 1.5;
    ctx.strokeStyle = "#000";
    for (const [q, k] of opts.changed) ctx.strokeRect(L.left + k * c + 1, L.top + q * c + 1, c - 2, c - 2);
    ctx.setLineDash([]);
  }
  finish(ctx, L, opts, tokens, keyTokens, ink);
}

function finish(ctx, L, opts, tokens, keyTokens, ink) {
  ctx.strokeStyle = ink.frame;
  ctx.lineWidth = 1;
  ctx.strokeRect(L.left - 0.5, L.top - 0.5, (L.plotW ?? L.plot) + 1, L.plot + 1);
  drawSink(ctx, L, opts.sink, opts.scale, ink);
  const hl = opts.highlight || {};
  if (L.labels) drawAxes(ctx, L, tokens, keyTokens, hl, ink);
  drawHidden(ctx, L, opts.hidden);
  drawHighlight(ctx, L, hl);
  ctx.restore();
}

// A head's learned sink (`opts.sink`, its weight per query) as one column apart at L.sinkX, on the keys' colour
// scale, in a dashed frame of its own and named "sink" under it. Nothing without a sink or a layout that has room.
function drawSink(ctx, L, sink, scale, ink) {
  if (!sink || L.sinkX == null) return;
  const c = L.cell;
  for (let q = 0; q < L.seqLen; q++) {
    ctx.fillStyle = rgbString(colorAt(scale.stops, normalise(sink[q], scale)));
    ctx.fillRect(L.sinkX, L.top + q * c, c, c);
  }
  ctx.save();
  ctx.setLineDash([3, 2]);
  ctx.strokeStyle = ink.text;
  ctx.lineWidth = 1;
  ctx.strokeRect(L.sinkX - 1.5, L.top - 1.5, c + 3, L.plot + 3);
  ctx.restore();
  if (!L.labels) return;
  ctx.save();
  ctx.font = `italic ${L.font}px ${FONT}`;
  ctx.fillStyle = ink.text;
  ctx.translate(L.sinkX + c / 2, L.top + L.plot + 4);
  ctx.rotate(-Math.PI / 4);
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  ctx.fillText("sink", 0, 0);
  ctx.restore();
}

// The key columns a sinks view hides (`opts.hidden`): a dashed frame down each, so that their 0 reads as hidden,
// not as a key the queries look past.
function drawHidden(ctx, L, hidden) {
  if (!hidden?.length || L.cell < 3) return;
  const c = L.cell;
  ctx.save();
  ctx.setLineDash([3, 2]);
  ctx.lineWidth = 1.5;
  ctx.strokeStyle = "#fff";
  for (const k of hidden)
    if (k < (L.cols ?? L.seqLen)) ctx.strokeRect(L.left + k * c + 1, L.top + 1, c - 2, L.plot - 2);
  ctx.restore();
}

// Outline query row hl.q and key column hl.k (white under black, visible on every colour).
// A head drawn before (its pixels kept in `base`, a canvas) painted back onto its own canvas, with hl's row and
// column outlined: moving a highlight never redraws a heatmap.
export function repaintHighlight(canvas, base, L, hl) {
  const ctx = canvas.getContext("2d");
  ctx.save();
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(base, 0, 0);
  ctx.restore();
  if (hl) drawHighlight(ctx, L, hl);
}

export function drawHighlight(ctx, L, hl) {
  if (!hl) return;
  const c = L.cell;
  const cols = L.cols ?? L.seqLen;
  for (const [color, width] of [
    ["#fff", 4],
    ["#000", 2],
  ]) {
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    if (hl.q != null && hl.q < L.seqLen) ctx.strokeRect(L.left, L.top + hl.q * c, L.plotW ?? L.plot, c);
    if (hl.k != null && hl.k < cols) ctx.strokeRect(L.left + hl.k * c, L.top, c, L.plot);
  }
}

function drawAxes(ctx, L, tokens, keyTokens, hl, ink) {
  const c = L.cell;
  const cols = L.cols ?? L.seqLen;
  const plotW = L.plotW ?? L.plot;
  ctx.font = `${L.font}px ${FONT}`;
  ctx.fillStyle = ink.text;
  ctx.textBaseline = "middle";
  for (let i = 0; i < L.seqLen; i += L.step) {
    const label = `${pieceLabel(tokens[i], L.maxLabel)} ${pos(i)}`;
    ctx.font = `${i === hl.q ? "bold " : ""}${L.font}px ${FONT}`;
    ctx.textAlign = "right";
    ctx.fillText(label, L.left - 4, L.top + i * c + c / 2);
  }
  for (let i = 0; i < cols; i += L.step) {
    const label = `${pieceLabel(keyTokens[i], L.maxLabel)} ${pos(i)}`;
    ctx.save();
    ctx.font = `${i === hl.k ? "bold " : ""}${L.font}px ${FONT}`;
    ctx.translate(L.left + i * c + c / 2, L.top + L.plot + 4);
    ctx.rotate(-Math.PI / 4);
    ctx.textAlign = "right";
    ctx.fillText(label, 0, 0);
    ctx.restore();
  }
  ctx.font = `600 ${L.font}px ${FONT}`;
  ctx.fillStyle = ink.muted;
  ctx.textAlign = "center";
  ctx.save();
  ctx.translate(L.font / 2 + 2, L.top + L.plot / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.fillText("Query position", 0, 0);
  ctx.restore();
  ctx.fillText(
    keyTokens === tokens ? "Key position" : "Key position (source)",
    L.left + plotW / 2,
    L.height - L.font / 2 - 2,
  );
}

// A canvas sized for the layout, sharp on high-density screens.
export function sizeCanvas(canvas, L) {
  const r = window.devicePixelRatio || 1;
  canvas.width = Math.round(L.width * r);
  canvas.height = Math.round(L.height * r);
  canvas.style.width = `${L.width}px`;
  canvas.style.height = `${L.height}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  return ctx;
}
