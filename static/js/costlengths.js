// Dense against blockwise attention, measured at several lengths (the `measure_lengths` of the cost analysis): the
// cost panel's `lengths` part. The server runs one layer's random Q, K, V of this shape (batch 1) at each length
// twice, once with the S x S scores held whole and once with the online softmax over blocks of keys
// (engine/blockwise.py), and answers each pass's measured peak bytes and ms, the predicted H·S²·bytes and how far
// apart their contexts are. Here: the lengths asked, the points drawn on the cost plot over the predicted S² curve,
// and their table. Pure helpers a test imports, and one render.

import { formatBytes } from "./decode.js";
import { node } from "./dom.js";

export const LENGTHS = [256, 512, 1024, 2048, 4096]; // the default lengths, the longest that fit the server's limits
export const MAX_LENGTHS = 12; // as many as the server takes
export const LENGTH_COLORS = { predicted: "#e69f00", dense: "#d55e00", blockwise: "#009e73", block: "#56b4e9" };
const RUNS = 3; // the server measures each pass three times (a warm-up, a timed run, a run for its memory)

// "256, 1024 4096" -> [256, 1024, 4096]; null when any entry is not a whole number of at least 1 or there are none
// or too many (the page says so; the server would refuse them).
export function parseLengths(raw) {
  const parts = String(raw || "")
    .split(/[\s,]+/)
    .filter(Boolean);
  if (!parts.length || parts.length > MAX_LENGTHS) return null;
  const out = parts.map((p) => (/^\d+$/.test(p) ? Number(p) : NaN));
  return out.every((n) => Number.isInteger(n) && n >= 1) ? out : null;
}

// The work the server counts against ATTNLAB_MAX_LENGTHS_FLOPS (engine/analysis/lengths.py lengths_flops): both
// passes, 4·H·S²·d_head each, three runs of each.
export function lengthsFlops(query, lengths) {
  const dHead = Math.floor(query.d_model / query.heads);
  return lengths.reduce((sum, s) => sum + 2 * RUNS * 4 * query.heads * s * s * dHead, 0);
}

// The default lengths for a shape: the shortest of LENGTHS and as many longer ones as fit the server's limits
// (`limits` of the cost analysis's answer: max_lengths_flops, max_lengths_scores); every one when the limits are unknown.
export function defaultLengths(query, limits = {}) {
  const out = [];
  for (const s of LENGTHS) {
    const next = [...out, s];
    const flopsOk = !limits.max_lengths_flops || lengthsFlops(query, next) <= limits.max_lengths_flops;
    const scoresOk = !limits.max_lengths_scores || query.heads * s * s <= limits.max_lengths_scores;
    if (out.length && !(flopsOk && scoresOk)) break;
    out.push(s);
  }
  return out;
}

// The plotly traces of a measured answer's `lengths`: the predicted H·S² score bytes (a line through the lengths),
// one block's scores, and the measured peaks of both passes as points on it; [] without a measurement.
export function lengthsTraces(lengths) {
  if (!lengths || !lengths.points.length) return [];
  const p = lengths.points;
  const xs = p.map((d) => d.seq_len);
  const measured = (name, key, ms, color, symbol) => ({
    type: "scatter",
    mode: "markers",
    name,
    x: xs,
    y: p.map((d) => d[key]),
    customdata: p.map((d) => d[ms]),
    marker: { color, symbol, size: 10, line: { width: 1, color: "#000000" } },
    hovertemplate: `S = %{x}: ${name} %{y:.3s}B in %{customdata:.1f} ms<extra></extra>`,
  });
  return [
    {
      type: "scatter",
      mode: "lines",
      name: "predicted: one layer's scores, H·S²·bytes",
      x: xs,
      y: p.map((d) => d.predicted_score_bytes),
      line: { color: LENGTH_COLORS.predicted, width: 2, dash: "dot" },
      hovertemplate: "S = %{x}: H·S²·bytes %{y:.3s}B<extra></extra>",
    },
    {
      type: "scatter",
      mode: "lines",
      name: `one block of ${lengths.block} keys`,
      x: xs,
      y: p.map((d) => d.predicted_block_bytes),
      line: { color: LENGTH_COLORS.block, width: 1.5, dash: "dashdot" },
      hovertemplate: "S = %{x}: one block %{y:.3s}B<extra></extra>",
    },
    measured("measured peak, dense", "dense_peak_bytes", "dense_ms", LENGTH_COLORS.dense, "diamond"),
    measured(
      "measured peak, blockwise",
      "blockwise_peak_bytes",
      "blockwise_ms",
      LENGTH_COLORS.blockwise,
      "triangle-up",
    ),
  ];
}

// Every x and y the traces draw, for the plot's ranges.
export function lengthsExtent(lengths) {
  if (!lengths) return { xs: [], ys: [] };
  const p = lengths.points;
  const ys = p.flatMap((d) => [
    d.predicted_score_bytes,
    d.predicted_block_bytes,
    d.dense_peak_bytes,
    d.blockwise_peak_bytes,
  ]);
  return { xs: p.map((d) => d.seq_len), ys: ys.filter((v) => v > 0) };
}

const TABLE_HEAD = [
  "S",
  "dense peak",
  "dense ms",
  "blockwise peak",
  "blockwise ms",
  "predicted H·S²·bytes",
  "max |Δ context|",
];

// view: {result, status, message, lengths (the lengths asked), bad (the typed lengths are unreadable)}
export function renderLengths(el, view) {
  el.replaceChildren();
  el.classList.toggle("bad", view.status === "error");
  delete el.dataset.points;
  if (view.status === "loading") {
    el.textContent = `measuring dense and blockwise attention at ${view.lengths?.join(", ") ?? "several"} tokens on the server…`;
    return;
  }
  if (view.status === "error") {
    el.textContent = view.message;
    return;
  }
  const L = view.result?.lengths;
  if (!L) return;
  const table = node("table", { className: "stats cost-lengths-table" });
  table.setAttribute("aria-label", "Dense and blockwise attention, measured at each length");
  const head = node("tr");
  for (const h of TABLE_HEAD) head.append(node("th", { scope: "col" }, h));
  table.append(head);
  for (const p of L.points) {
    const tr = node("tr");
    Object.assign(tr.dataset, {
      seqLen: String(p.seq_len),
      dense: String(p.dense_peak_bytes),
      blockwise: String(p.blockwise_peak_bytes),
      diff: String(p.max_abs_diff),
    });
    tr.append(
      node("th", { scope: "row" }, String(p.seq_len)),
      node("td", {}, formatBytes(p.dense_peak_bytes)),
      node("td", {}, p.dense_ms.toFixed(1)),
      node("td", {}, formatBytes(p.blockwise_peak_bytes)),
      node("td", {}, p.blockwise_ms.toFixed(1)),
      node("td", {}, formatBytes(p.predicted_score_bytes)),
      node("td", {}, p.max_abs_diff.toExponential(1)),
    );
    table.append(tr);
  }
  el.dataset.points = String(L.points.length);
  const worst = Math.max(...L.points.map((p) => p.max_abs_diff));
  const q = view.result.query;
  el.append(
    node(
      "p",
      { className: "cost-lengths-line" },
      `One layer of ${q.heads} heads (d_head ${Math.floor(q.d_model / q.heads)}, batch 1, ${L.measured_dtype}) on this ` +
        `server: the dense pass holds every S×S score, the blockwise pass ${L.block} keys at a time; their contexts ` +
        `differ by at most ${worst.toExponential(1)}.`,
    ),
    table,
    node("p", { className: "muted small" }, `How peak memory is measured: ${L.method}.`),
  );
}
