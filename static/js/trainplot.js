// The Train workspace's pure helpers (train.js draws with them): which measures make which curves, the curves'
// scales and ticks, where the phase change is, and a snapshot's probe weights decoded from the events' float16.
// Pure: no DOM, so tests/js calls them in Node.

import { widenHalf } from "./arrays.js";

// The curves drawn over steps, in order: each a title and the lines it draws from one snapshot's measures
// ({label: value}; a value that is not a finite number is a gap). A [layer][head] measure is one line a layer (its
// largest head, or the mean where the title says so), so a head forming in one layer stands out. `span`: values
// the axis always holds (a score's 0 to 1, so that noise near 0 stays flat next to a head that forms).
export const CURVES = [
  { key: "loss", title: "Loss", lines: (m) => ({ train: m.loss, "held out": m.held_out_loss }), phase: true },
  { key: "induction", title: "Induction score (best head)", lines: (m) => perLayer(m.induction, max), span: [0, 1] },
  {
    key: "previous_token",
    title: "Previous-token score (best head)",
    lines: (m) => perLayer(m.previous_token, max),
    span: [0, 1],
  },
  { key: "entropy", title: "Mean entropy (nats)", lines: (m) => perLayer(m.entropy, mean) },
  { key: "lr", title: "Learning rate", lines: (m) => ({ lr: m.lr }) },
  { key: "bracket", title: "Bracket score (best head)", lines: (m) => perLayer(m.bracket, max), span: [0, 1] },
  {
    key: "similarity",
    title: "Head similarity (least alike pair)",
    lines: (m) => leastAlike(m.similarity),
    span: [0, 1],
  },
  { key: "max_abs_score", title: "Largest |score| before softmax", lines: (m) => perLayer(m.max_abs_score, max) },
  { key: "softmax_jacobian", title: "Softmax Jacobian norm (mean)", lines: (m) => perLayer(m.softmax_jacobian, mean) },
  { key: "future_reliance", title: "Future reliance (nats)", lines: (m) => ({ "held out": m.future_reliance }) },
  { key: "grad_norm", title: "Gradient norm", lines: (m) => ({ ...(m.grad_norm || {}) }) },
];

function finite(values) {
  return values.filter((v) => typeof v === "number" && Number.isFinite(v));
}

function mean(values) {
  const v = finite(values);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null;
}

function max(values) {
  const v = finite(values);
  return v.length ? Math.max(...v) : null;
}

// {"layer 0": f(heads of layer 0), ...} of a [layer][head] grid; {} for none (a task without brackets).
export function perLayer(grid, f) {
  if (!Array.isArray(grid)) return {};
  return Object.fromEntries(grid.map((heads, l) => [`layer ${l}`, f(heads || [])]));
}

// {"layer 0": the lowest similarity between two different heads of layer 0, ...} of a [layer][head][head] grid: 1.0
// while every head of the layer computes one pattern; a layer of one head has none.
export function leastAlike(grid) {
  if (!Array.isArray(grid)) return {};
  const pairs = (rows) => (rows || []).flatMap((row, i) => (row || []).filter((_, j) => j !== i));
  return Object.fromEntries(grid.map((rows, l) => [`layer ${l}`, min(pairs(rows))]));
}

function min(values) {
  const v = finite(values);
  return v.length ? Math.min(...v) : null;
}

// The curve an experiment's measure is drawn in (its key in CURVES): the held-out loss is the loss curve's.
export function curveOf(measure) {
  return measure === "held_out_loss" ? "loss" : measure;
}

// The curve's lines over the snapshots: [{label, points: [[step, value], ...]}], a gap left where a value is missing.
export function curveLines(curve, snapshots) {
  const byLabel = new Map();
  for (const snap of snapshots) {
    for (const [label, value] of Object.entries(curve.lines(snap.measures))) {
      if (!byLabel.has(label)) byLabel.set(label, []);
      if (typeof value === "number" && Number.isFinite(value)) byLabel.get(label).push([snap.step, value]);
    }
  }
  return [...byLabel].map(([label, points]) => ({ label, points }));
}

// A round step between ticks for a span, about `count` of them: 1, 2 or 5 times a power of ten.
export function tickStep(span, count = 4) {
  if (!(span > 0)) return 1;
  const raw = span / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / power;
  return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
}

// The axis of values from lo to hi: {min, max, ticks}, widened to round ticks that hold them all; a flat line (or
// a single value) gets a span around it, no values give 0..1.
export function niceScale(values, count = 4) {
  const v = finite(values);
  if (!v.length) return { min: 0, max: 1, ticks: [0, 0.5, 1] };
  let lo = Math.min(...v);
  let hi = Math.max(...v);
  if (hi === lo) {
    const pad = Math.abs(lo) > 0 ? Math.abs(lo) / 2 : 1;
    lo -= pad;
    hi += pad;
  }
  const step = tickStep(hi - lo, count);
  const min = Math.floor(lo / step + 1e-9) * step;
  const top = Math.ceil(hi / step - 1e-9) * step;
  const ticks = [];
  for (let t = min; t <= top + step / 2; t += step) ticks.push(Number(t.toPrecision(12)));
  return { min, max: top, ticks };
}

// Where the phase change is: the first snapshot whose best induction score has covered half of its rise, from the
// run's first score to its highest, when that rise is at least `rise` (the score climbs from near 0 within a few
// snapshots as the loss drops); null when it never rises that far (a 1-layer model, a run too short). A missing
// score (a diverged run's null) is skipped.
export function phaseChange(snapshots, rise = 0.3) {
  const scores = [];
  for (const snap of snapshots) {
    const score = max((snap.measures.induction || []).flat());
    if (score !== null) scores.push({ step: snap.step, score });
  }
  if (scores.length < 2) return null;
  const first = scores[0].score;
  const top = Math.max(...scores.map((s) => s.score));
  if (top - first < rise) return null;
  const at = scores.findIndex((s) => s.score >= first + (top - first) / 2);
  return { step: scores[at].step, from: scores[at - 1].step, score: scores[at].score };
}

// The probe's weights of one snapshot's event ({shape: [L, H, T, T], dtype: "float16", data: base64, tokens}) as
// [layer][head] -> {index, weights: T rows of T}, with the probe's tokens.
export function decodeProbe(probe) {
  const [L, H, T, T2] = probe.shape;
  const bytes = Uint8Array.from(atob(probe.data), (c) => c.charCodeAt(0));
  const bits = new Uint16Array(L * H * T * T2);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < bits.length; i++) bits[i] = view.getUint16(2 * i, true);
  const values = widenHalf(bits);
  const layers = [];
  for (let l = 0; l < L; l++) {
    const heads = [];
    for (let h = 0; h < H; h++) {
      const at = (l * H + h) * T * T2;
      const weights = [];
      for (let q = 0; q < T; q++) weights.push(Array.from(values.subarray(at + q * T2, at + (q + 1) * T2)));
      heads.push({ index: h, weights });
    }
    layers.push(heads);
  }
  return { tokens: probe.tokens, layers };
}
