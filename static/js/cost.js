// Cost and memory (POST /api/cost): what attention costs for a shape — the score matrices (B·H·S² per layer, the part
// that grows with the square of the length), the KV cache, the projection parameters of one wide head against H
// heads, the FLOPs — and a log-log plot of memory against S from the server's `curve`, with this run's length, the
// server's token limit and this machine's memory marked. "Measure here" runs one layer on the server and reports the
// peak memory and time it measured, and how: the panel's `measure` part. The panel's one declaration (`panel`, read
// by registry.js: what it asks, its setting in the link, how it draws) on top of pure helpers a test imports.

import { act } from "./actions.js";
import { plotlyTheme } from "./colors.js";
import { defaultLengths, lengthsExtent, lengthsTraces, parseLengths, renderLengths } from "./costlengths.js";
import { formatBytes } from "./decode.js";
import { plotlyText } from "./focuscells.js";
import { node, within } from "./dom.js";
import { PLOT_CONFIG } from "./plotly.js";

// Okabe–Ito colours (colour-blind safe), with a dash pattern each so the lines part without colour too.
export const COST_COLORS = { scores: "#d55e00", kv: "#0072b2", now: "#009e73", limit: "#cc79a7", memory: "#000000" };
// The figure's height, the same with or without measured lengths: their four legend entries wrap the legend into
// more rows (about 80 px on a phone), which the figure holds from the start (the plot is that much taller until
// they come), so what sits under the plot (the lengths box and its button) stays put when a measurement comes in.
export const COST_PLOT_HEIGHT = 420;
export const COST_FIELDS = ["batch", "heads", "kv_heads", "seq_len", "d_model", "layers"];
export const DTYPES = ["float32", "float64", "bfloat16", "float16"];

// The POST /api/cost body: this run's shape (from its result's config) with the person's overrides on top.
export function costRequest(config, seqLen, overrides = {}, measure = false) {
  const base = {
    batch: config.batch ?? 1,
    heads: config.n_heads,
    kv_heads: config.n_kv_heads,
    seq_len: seqLen,
    d_model: config.d_model,
    layers: config.n_layers,
    dtype: config.dtype,
  };
  const req = { ...base, ...overrides, measure };
  if (req.kv_heads > req.heads) req.kv_heads = req.heads;
  return req;
}

// The body for the run on screen with `overrides` (the panel's setting: null for none), or null before a run.
export function costOf(s, overrides, measure = false) {
  const r = s.run.result;
  return r ? costRequest(r.config, r.tokens.length, overrides || {}, measure) : null;
}

// {seq_len: 8192, dtype: "bfloat16"} -> "seq_len:8192,dtype:bfloat16"; "" when nothing differs from the run.
export function encodeCost(cost) {
  return Object.entries(cost || {})
    .filter(
      ([k, v]) => (COST_FIELDS.includes(k) && Number.isInteger(v) && v >= 1) || (k === "dtype" && DTYPES.includes(v)),
    )
    .map(([k, v]) => `${k}:${v}`)
    .join(",");
}

// The cost overrides from their string; unreadable entries are dropped.
export function parseCost(raw) {
  const out = {};
  for (const part of (raw || "").split(",")) {
    const [k, v] = part.split(":");
    if (COST_FIELDS.includes(k)) {
      const n = Number.parseInt(v, 10);
      if (Number.isFinite(n) && n >= 1) out[k] = n;
    } else if (k === "dtype" && DTYPES.includes(v)) out.dtype = v;
  }
  return out;
}

export function formatCount(n) {
  if (n == null || !Number.isFinite(n)) return "–";
  return Math.round(n).toLocaleString("en-US");
}

// Large counts in words: 2,147,483,648 -> "2.15 G".
export function shortCount(n) {
  const units = ["", " k", " M", " G", " T", " P", " E"];
  let v = n;
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i += 1;
  }
  return i === 0 ? String(n) : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)}${units[i]}`;
}

// The rows the panel lists: [{key, label, value, text}], `key` naming the API's field (dots for nested ones).
export function costRows(r) {
  const q = r.query;
  const L = q.layers;
  const bytes = (v) => `${formatCount(v)} bytes (${formatBytes(v)})`;
  const count = (v) => `${formatCount(v)} (${shortCount(v)})`;
  return [
    {
      key: "score_elements",
      label: `Score elements per layer (B·H·S² = ${q.batch}·${q.heads}·${q.seq_len}²)`,
      value: r.score_elements,
      text: count(r.score_elements),
    },
    {
      key: "score_bytes",
      label: `Score bytes per layer (× ${r.bytes_per_value} bytes, ${q.dtype})`,
      value: r.score_bytes,
      text: bytes(r.score_bytes),
    },
    {
      key: "score_bytes_all_layers",
      label: `Score bytes, all ${L} layer${L === 1 ? "" : "s"}`,
      value: r.score_bytes_all_layers,
      text: bytes(r.score_bytes_all_layers),
    },
    {
      key: "kv_cache_bytes",
      label: `KV cache (2·B·layers·kv_heads·S·d_head·bytes, d_head = ${r.d_head}, kv_heads = ${q.kv_heads ?? q.heads})`,
      value: r.kv_cache_bytes,
      text: bytes(r.kv_cache_bytes),
    },
    {
      key: "params_one_head",
      label: `Projection parameters, one head of width ${q.d_model} (4·D²)`,
      value: r.params_one_head,
      text: count(r.params_one_head),
    },
    {
      key: "params_heads",
      label: `Projection parameters, ${q.heads} heads on ${q.kv_heads ?? q.heads} K/V group${(q.kv_heads ?? q.heads) === 1 ? "" : "s"}`,
      value: r.params_heads,
      text: count(r.params_heads),
    },
    {
      key: "params_all_layers",
      label: `Projection parameters, all ${L} layer${L === 1 ? "" : "s"}`,
      value: r.params_all_layers,
      text: count(r.params_all_layers),
    },
    {
      key: "flops.total",
      label: "FLOPs per layer (projections + scores + weights·V + output)",
      value: r.flops.total,
      text: count(r.flops.total),
    },
    {
      key: "flops.all_layers",
      label: `FLOPs, all ${L} layer${L === 1 ? "" : "s"}`,
      value: r.flops.all_layers,
      text: count(r.flops.all_layers),
    },
  ];
}

// The plotly figure: memory against S on log-log axes, this run's S, the server's token limit and this machine's
// memory marked; with `lengths` (a measured answer's), the dense and blockwise peaks on the predicted S² line.
export function costFigure(r, lengths = null) {
  const xs = r.curve.map((c) => c.seq_len);
  const S = r.query.seq_len;
  const lim = r.limits || {};
  const extra = lengthsExtent(lengths);
  const allX = [...xs, S, ...(lim.max_tokens ? [lim.max_tokens] : []), ...extra.xs];
  const allY = [
    ...r.curve.map((c) => c.score_bytes),
    ...r.curve.map((c) => c.kv_cache_bytes),
    ...(lim.memory_bytes ? [lim.memory_bytes] : []),
    ...extra.ys,
  ];
  const log = (v) => Math.log10(Math.max(v, 1));
  const xRange = [log(Math.min(...allX)) - 0.1, log(Math.max(...allX)) + 0.1];
  const yRange = [log(Math.min(...allY.filter((v) => v > 0))) - 0.3, log(Math.max(...allY)) + 0.3];
  const traces = [
    {
      type: "scatter",
      mode: "lines+markers",
      name: `scores, all ${r.query.layers} layers`,
      x: xs,
      y: r.curve.map((c) => c.score_bytes),
      line: { color: COST_COLORS.scores, width: 2.5 },
      marker: { symbol: "circle", size: 6 },
      hovertemplate: "S = %{x}: scores %{y:.3s}B<extra></extra>",
    },
    {
      type: "scatter",
      mode: "lines+markers",
      name: "KV cache",
      x: xs,
      y: r.curve.map((c) => c.kv_cache_bytes),
      line: { color: COST_COLORS.kv, width: 2.5, dash: "dash" },
      marker: { symbol: "square", size: 6 },
      hovertemplate: "S = %{x}: KV cache %{y:.3s}B<extra></extra>",
    },
    ...lengthsTraces(lengths),
  ];
  const vline = (x, color, dash, text) => ({
    shape: { type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color, width: 2, dash } },
    note: {
      x: log(x),
      xref: "x",
      y: 1,
      yref: "paper",
      yanchor: "bottom",
      text,
      showarrow: false,
      font: { size: 11, color },
    },
  });
  const marks = [vline(S, COST_COLORS.now, "solid", plotlyText(`this run: S = ${S}`))];
  if (lim.max_tokens)
    marks.push(vline(lim.max_tokens, COST_COLORS.limit, "dot", plotlyText(`server limit ${lim.max_tokens}`)));
  const shapes = marks.map((m) => m.shape);
  const annotations = marks.map((m) => m.note);
  if (lim.memory_bytes) {
    shapes.push({
      type: "line",
      xref: "paper",
      yref: "y",
      x0: 0,
      x1: 1,
      y0: lim.memory_bytes,
      y1: lim.memory_bytes,
      line: { color: COST_COLORS.memory, width: 1.5, dash: "dashdot" },
    });
    annotations.push({
      x: 1,
      xref: "paper",
      xanchor: "right",
      y: log(lim.memory_bytes),
      yref: "y",
      yanchor: "top",
      showarrow: false,
      text: plotlyText(`this machine's ${lim.device || ""} memory: ${formatBytes(lim.memory_bytes)}`),
      font: { size: 11 },
    });
  }
  // the annotations that mark two vertical lines share a row when those lines are far apart; else the second drops
  if (annotations.length > 1 && lim.max_tokens && Math.abs(log(lim.max_tokens) - log(S)) < 0.6) annotations[1].y = 0.9;
  const layout = {
    height: COST_PLOT_HEIGHT, // the measured lengths' legend rows come out of the plot's share of it
    margin: { l: 70, r: 20, t: 28, b: 48 },
    xaxis: { type: "log", title: { text: "sequence length S (tokens)", standoff: 8 }, range: xRange, automargin: true },
    yaxis: { type: "log", title: { text: "bytes" }, range: yRange, exponentformat: "SI" },
    // under the axis title, at the figure's foot: plotly widens the bottom margin for as many rows as the legend
    // wraps into (placed against the plot, a wrapped legend covered the axis title)
    legend: { orientation: "h", x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom" },
    shapes,
    annotations,
    ...plotlyTheme(), // the panel's ground, ink and mode bar, in the dark theme too
  };
  return { traces, layout };
}

// view: {result, status, message}
export function renderCost(els, view) {
  const r = view.result;
  els.status.textContent = view.status === "loading" ? "computing…" : view.status === "error" ? view.message : "";
  els.status.classList.toggle("bad", view.status === "error");
  if (!r) {
    els.table.replaceChildren();
    els.note.textContent = "";
    if (window.Plotly && els.plot.dataset.drawn) window.Plotly.purge(els.plot);
    els.plot.dataset.drawn = "";
    return;
  }
  els.table.dataset.query = JSON.stringify(r.query);
  const body = node("tbody");
  for (const row of costRows(r)) {
    const tr = node("tr");
    tr.dataset.key = row.key;
    tr.dataset.value = String(row.value);
    tr.append(node("th", { scope: "row" }, row.label), node("td", {}, row.text));
    body.append(tr);
  }
  els.table.replaceChildren(body);
  els.note.textContent = r.note;
  if (window.Plotly) {
    const { traces, layout } = costFigure(r, view.lengths);
    window.Plotly.react(els.plot, traces, layout, PLOT_CONFIG);
    els.plot.dataset.drawn = "1";
    els.plot.dataset.points = String(r.curve.length);
    els.plot.dataset.measuredLengths = String(view.lengths?.points.length ?? 0);
    els.plot.setAttribute("aria-label", `Memory against sequence length, log-log: ${r.note}`);
  }
}

// view: {result, status, message}: the measured run, or why it was refused.
export function renderMeasured(el, view) {
  el.replaceChildren();
  el.classList.toggle("bad", view.status === "error");
  if (view.status === "loading") {
    el.textContent = "running one layer on the server…";
    return;
  }
  if (view.status === "error") {
    el.textContent = view.message;
    return;
  }
  const r = view.result;
  if (!r || !r.measured) return;
  const m = r.measured;
  el.dataset.peakBytes = String(m.peak_bytes);
  el.dataset.ms = String(m.ms);
  el.dataset.tokensPerS = String(r.tokens_per_s);
  const q = r.query;
  el.append(
    node(
      "p",
      { className: "cost-measured-line" },
      `Measured on this server (${r.limits?.device ?? "?"}), one layer of ${q.heads} heads over ${q.seq_len} tokens × batch ${q.batch}: ` +
        `peak ${formatBytes(m.peak_bytes)} (${formatCount(m.peak_bytes)} bytes), ${m.ms.toFixed(1)} ms, ` +
        `${formatCount(r.tokens_per_s)} tokens/s.`,
    ),
    node("p", { className: "muted small cost-method" }, `How peak memory is measured: ${m.method}.`),
    node(
      "p",
      { className: "muted small cost-scope" },
      "This peak is one attention layer alone (Q, K, V, scores, weights, contexts and the output projection) on " +
        "random weights of this shape. The audit's peak memory is the whole model's forward pass on your text: every " +
        "layer and whatever the model does around attention (embeddings, MLPs, the output), so for the run's own " +
        "shape it is larger.",
    ),
  );
  // the server measures half precision in float32 on a CPU, and says so: the figures are of that dtype
  if (m.note) el.append(node("p", { className: "muted small cost-dtype-note" }, m.note));
}

const MEASURE = "cost.measure"; // the measure part's slot (registry.js)
const LENGTHS = "cost.lengths"; // the dense-against-blockwise part's slot
const overridesOf = (value) => value || {};
const orNone = (cost) => (Object.keys(cost).length ? cost : null); // no override is no setting (and no link key)

export const panel = {
  analysis: "cost",
  words: "cost",
  // the overrides describe the run's model: another model drops them
  setting: { key: "cost", encode: encodeCost, decode: (raw) => orNone(parseCost(raw)), dropOnModel: true },
  request: (s, value) => costOf(s, value),
  keep: true,
  parts: {
    measure: {
      words: "the measurement",
      // a measurement belongs to the shape it measured: another shape clears it
      request: (s, value, slot) => {
        const shape = costOf(s, value);
        if (!slot.nonce || !shape || slot.shape !== JSON.stringify(shape)) return null;
        return costOf(s, value, true);
      },
      nonce: true,
      asked: (s, value) => ({ shape: s.run.result ? JSON.stringify(costOf(s, value)) : null }),
    },
    lengths: {
      words: "dense against blockwise attention",
      // the lengths asked are the press's (slot.lengths); another shape clears the measurement
      request: (s, value, slot) => {
        const shape = costOf(s, value);
        if (!slot.nonce || !shape || !slot.lengths || slot.shape !== JSON.stringify(shape)) return null;
        return { ...shape, measure_lengths: slot.lengths };
      },
      nonce: true,
      asked: (s, value) => ({ shape: s.run.result ? JSON.stringify(costOf(s, value)) : null }),
    },
  },
  needsPlotly: true,
  deps: (s) => [s.run.result],
  render(root, slot, s) {
    const part = within(root);
    const overrides = overridesOf(s.ui.cost);
    const req = costOf(s, overrides);
    if (!req) return;
    for (const k of COST_FIELDS) {
      const input = part(`cost-${k}`);
      if (document.activeElement !== input) input.value = String(req[k] ?? "");
      input.classList.toggle("changed", k in overrides);
    }
    const dt = part("cost-dtype");
    dt.value = req.dtype;
    dt.classList.toggle("changed", "dtype" in overrides);
    part("cost-reset").disabled = !Object.keys(overrides).length;
    const lengths = s.panels[LENGTHS];
    const measuredLengths = lengths.status === "ready" ? lengths.result?.lengths : null;
    renderCost(
      { status: part("cost-status"), table: part("cost-table"), plot: part("cost-plot"), note: part("cost-note") },
      {
        result: slot.status === "error" ? null : slot.result,
        status: slot.status,
        message: slot.message,
        lengths: measuredLengths,
      },
    );
    const box = part("cost-lengths");
    if (document.activeElement !== box && !box.dataset.typed && slot.result) {
      box.value = defaultLengths(req, slot.result.limits).join(", ");
    }
    renderLengths(part("cost-lengths-out"), lengths);
    const m = s.panels[MEASURE];
    renderMeasured(part("cost-measured"), { result: m.result, status: m.status, message: m.message });
  },
  bind(root, { dispatch, getState }) {
    const part = within(root);
    const set = (cost) => dispatch(act.panelSet("cost", orNone(cost)));
    part("cost-form").addEventListener("submit", (e) => e.preventDefault());
    const fromForm = () => {
      const base = costOf(getState(), null);
      if (!base) return;
      const next = {};
      for (const k of COST_FIELDS) {
        const v = Number.parseInt(part(`cost-${k}`).value, 10);
        if (Number.isInteger(v) && v >= 1 && v !== base[k]) next[k] = v;
      }
      const dtype = part("cost-dtype").value;
      if (DTYPES.includes(dtype) && dtype !== base.dtype) next.dtype = dtype;
      set(next);
    };
    for (const id of [...COST_FIELDS.map((k) => `cost-${k}`), "cost-dtype"])
      part(id).addEventListener("change", fromForm);
    part("cost-reset").addEventListener("click", () => set({}));
    part("cost-measure").addEventListener("click", () => {
      const s = getState();
      if (s.run.result) dispatch(act.panelAsked(MEASURE, { fields: panel.parts.measure.asked(s, s.ui.cost) }));
    });
    const box = part("cost-lengths");
    const error = part("cost-lengths-error");
    box.addEventListener("input", () => {
      box.dataset.typed = "1"; // the person's lengths stay, whatever the shape
    });
    part("cost-lengths-measure").addEventListener("click", () => {
      const s = getState();
      const lengths = parseLengths(box.value);
      error.textContent = lengths
        ? ""
        : `Lengths as 1 to 12 whole numbers with commas, e.g. 256, 1024, 4096 (got “${box.value}”).`;
      error.hidden = !!lengths;
      if (!lengths) box.setAttribute("aria-invalid", "true");
      else box.removeAttribute("aria-invalid");
      if (!s.run.result || !lengths) return;
      dispatch(act.panelAsked(LENGTHS, { fields: { ...panel.parts.lengths.asked(s, s.ui.cost), lengths } }));
    });
  },
};
