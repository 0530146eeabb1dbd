// The scaling sweep (POST /api/scale-sweep), the chapter's Figure 21.5 measured: for random q and k with a given
// per-coordinate variance, the spread (std) of q·k grows like variance·√d_k unscaled and stays at the variance once
// divided by √d_k; unscaled, a softmax over the keys collapses (its entropy falls, its largest weight goes to 1),
// scaled it does not. The panel's one declaration (`panel`, read by registry.js: what it asks, its setting in the
// link, how it draws) on top of pure helpers a test imports. Beside the random vectors, the trained models' heads
// (the request's `models`: minilm and pycode where loaded): each head's spread of its raw q·k on the model's default
// text, against what random vectors with the same per-coordinate means and variances would give.

import { act } from "./actions.js";
import { plotlyTheme } from "./colors.js";
import { node, within } from "./dom.js";
import { plotlyText } from "./focuscells.js";
import { PLOT_CONFIG } from "./plotly.js";

export const SWEEP_COLORS = { unscaled: "#d55e00", scaled: "#0072b2", expected: "#555555" }; // Okabe–Ito
export const SWEEP_PLOT_HEIGHT = 330;
export const SWEEP_VARIANCE = { min: 0.1, max: 4, fallback: 1 };
export const SWEEP_SAMPLES = 500; // query rows per width: the figure's spread to about 3%, in well under a second
export const SWEEP_TRAINED = ["minilm", "pycode"]; // measured beside the random vectors when the server has them
export const TRAINED_COLORS = ["#009e73", "#cc79a7", "#e69f00"];

// The trained models the sweep asks for: those of SWEEP_TRAINED this server loaded (GET /api/models).
export function trainedModels(models) {
  const loaded = new Set((models || []).map((m) => m.name));
  return SWEEP_TRAINED.filter((n) => loaded.has(n));
}

const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  const m = Math.floor(v.length / 2);
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

// One row per trained model: its heads' d_k, the median measured spread, the median prediction, the ratio's range.
export function trainedRows(r) {
  return (r.trained || []).map((t) => {
    const ratios = t.heads.map((h) => h.ratio).filter((x) => x !== null);
    return {
      model: t.model,
      heads: t.heads.length,
      tokens: t.tokens,
      d_k: [...new Set(t.heads.map((h) => h.d_k))],
      std: median(t.heads.map((h) => h.std_raw)),
      predicted: median(t.heads.map((h) => h.predicted_std)),
      isotropic: median(t.heads.map((h) => h.isotropic_std)),
      ratio: ratios.length ? median(ratios) : null,
      lo: ratios.length ? Math.min(...ratios) : null,
      hi: ratios.length ? Math.max(...ratios) : null,
    };
  });
}

// The trained heads as points on the spread plot: one trace per model, each head at its d_k (models side by side).
export function trainedTraces(r) {
  return (r.trained || []).map((t, i) => ({
    type: "scatter",
    mode: "markers",
    name: `${t.model}'s heads (raw q·k)`,
    x: t.heads.map((h) => h.d_k * 1.12 ** (i + 1)),
    y: t.heads.map((h) => h.std_raw),
    customdata: t.heads.map((h) => [h.layer, h.head, h.d_k, h.predicted_std, h.ratio === null ? NaN : h.ratio]),
    marker: { color: TRAINED_COLORS[i % TRAINED_COLORS.length], size: 6, opacity: 0.75, symbol: "x" },
    hovertemplate:
      `${plotlyText(t.model)} L%{customdata[0]}H%{customdata[1]}, d_k = %{customdata[2]}: std %{y:.2f}, ` +
      "random vectors with its q, k statistics %{customdata[3]:.2f} (×%{customdata[4]:.2f})<extra></extra>",
  }));
}

export function trainedSummary(r) {
  return trainedRows(r)
    .map(
      (m) =>
        `${m.model} (${m.heads} heads, d_k = ${m.d_k.join(", ")}, ${m.tokens} tokens): raw q·k spreads ${m.std.toFixed(2)} ` +
        `(median), random vectors with each head's q and k statistics predict ${m.predicted.toFixed(2)}` +
        (m.ratio === null ? "." : `: ×${m.ratio.toFixed(2)} (${m.lo.toFixed(2)}–${m.hi.toFixed(2)} over the heads).`),
    )
    .join(" ");
}

function renderTrained(box, r) {
  box.replaceChildren();
  const rows = r ? trainedRows(r) : [];
  if (!rows.length) return;
  const table = node("table", { className: "sweep-trained-table" });
  const head = node("tr");
  for (const h of [
    "model",
    "heads",
    "d_k",
    "measured std of q·k",
    "predicted (its q, k)",
    "σ_q·σ_k·√d_k",
    "measured / predicted",
  ]) {
    head.append(node("th", { scope: "col" }, h));
  }
  table.append(
    node(
      "caption",
      { className: "small" },
      "Trained heads, median over each model's heads (on its default text): the spread of the raw score, and what " +
        "independent random vectors with the same per-coordinate means and variances would give",
    ),
    head,
  );
  for (const m of rows) {
    const tr = node("tr");
    tr.dataset.model = m.model;
    const range = m.ratio === null ? "–" : `${m.ratio.toFixed(2)} (${m.lo.toFixed(2)}–${m.hi.toFixed(2)})`;
    for (const [key, text] of [
      ["model", m.model],
      ["heads", String(m.heads)],
      ["d_k", m.d_k.join(", ")],
      ["std", m.std.toFixed(2)],
      ["predicted", m.predicted.toFixed(2)],
      ["isotropic", m.isotropic.toFixed(2)],
      ["ratio", range],
    ]) {
      const td = node("td", {}, text);
      td.dataset.key = key;
      tr.append(td);
    }
    table.append(tr);
  }
  box.append(table);
}

export function clampVariance(v) {
  if (!Number.isFinite(v)) return SWEEP_VARIANCE.fallback;
  return Math.min(SWEEP_VARIANCE.max, Math.max(SWEEP_VARIANCE.min, v));
}

// The series the figure draws, from the server's `widths`.
export function sweepSeries(r) {
  const w = r.widths;
  const pick = (k) => w.map((x) => x[k]);
  return {
    d_k: pick("d_k"),
    std: { unscaled: pick("std_unscaled"), scaled: pick("std_scaled") },
    expected: { unscaled: pick("expected_std_unscaled"), scaled: pick("expected_std_scaled") },
    entropy: { unscaled: pick("entropy_unscaled"), scaled: pick("entropy_scaled") },
    maxWeight: { unscaled: pick("max_weight_unscaled"), scaled: pick("max_weight_scaled") },
  };
}

export function sweepFigure(r) {
  const s = sweepSeries(r);
  const line = (name, x, y, kind, axis, extra = {}) => ({
    type: "scatter",
    mode: "lines+markers",
    name,
    x,
    y,
    xaxis: `x${axis}`,
    yaxis: `y${axis}`,
    line: { color: SWEEP_COLORS[kind], width: 2.5, dash: kind === "scaled" ? "solid" : "dash" },
    marker: { symbol: kind === "scaled" ? "circle" : "diamond", size: 7 },
    legendgroup: kind,
    ...extra,
  });
  const expected = (name, y, axis, show) => ({
    type: "scatter",
    mode: "lines",
    name,
    x: s.d_k,
    y,
    xaxis: `x${axis}`,
    yaxis: `y${axis}`,
    line: { color: SWEEP_COLORS.expected, width: 1.5, dash: "dot" },
    legendgroup: "expected",
    showlegend: show,
    hovertemplate: `d_k = %{x}: expected %{y:.3f}<extra>${plotlyText(name)}</extra>`,
  });
  const hov = (what) => `d_k = %{x}: ${what} %{y:.3f}<extra>%{fullData.name}</extra>`;
  const traces = [
    line("unscaled q·k", s.d_k, s.std.unscaled, "unscaled", "", { hovertemplate: hov("std") }),
    line("scaled q·k / √d_k", s.d_k, s.std.scaled, "scaled", "", { hovertemplate: hov("std") }),
    expected("expected: σ²·√d_k and σ²", s.expected.unscaled, "", true),
    expected("expected (scaled)", s.expected.scaled, "", false),
    line("unscaled", s.d_k, s.entropy.unscaled, "unscaled", "2", { showlegend: false, hovertemplate: hov("entropy") }),
    line("scaled", s.d_k, s.entropy.scaled, "scaled", "2", { showlegend: false, hovertemplate: hov("entropy") }),
    {
      type: "scatter",
      mode: "lines",
      name: `uniform over ${r.keys} keys`,
      x: [s.d_k[0], s.d_k[s.d_k.length - 1]],
      y: [r.uniform_entropy, r.uniform_entropy],
      xaxis: "x2",
      yaxis: "y2",
      showlegend: false,
      line: { color: SWEEP_COLORS.expected, width: 1, dash: "dot" },
      hovertemplate: `uniform: ln ${r.keys} = %{y:.3f}<extra></extra>`,
    },
    line("unscaled", s.d_k, s.maxWeight.unscaled, "unscaled", "3", {
      showlegend: false,
      hovertemplate: hov("largest weight"),
    }),
    line("scaled", s.d_k, s.maxWeight.scaled, "scaled", "3", {
      showlegend: false,
      hovertemplate: hov("largest weight"),
    }),
    ...trainedTraces(r),
  ];
  const x = (domain, title) => ({ type: "log", domain, title: { text: title } });
  const layout = {
    height: SWEEP_PLOT_HEIGHT,
    margin: { l: 56, r: 16, t: 34, b: 52 },
    xaxis: x([0, 0.3], "d_k (log scale)"),
    yaxis: { title: { text: "std of the score q·k" }, rangemode: "tozero" },
    xaxis2: { ...x([0.37, 0.66], "d_k (log scale)"), anchor: "y2" },
    yaxis2: { title: { text: "softmax entropy (nats)" }, anchor: "x2", rangemode: "tozero" },
    xaxis3: { ...x([0.73, 1], "d_k (log scale)"), anchor: "y3" },
    yaxis3: { title: { text: "largest weight" }, anchor: "x3", range: [0, 1.02] },
    annotations: [
      ["x", "spread of q·k"],
      ["x2", `entropy over ${r.keys} keys`],
      ["x3", "largest weight in a row"],
    ].map(([ax, text]) => ({
      text,
      xref: `${ax} domain`,
      yref: "paper",
      x: 0.5,
      y: 1.02,
      yanchor: "bottom",
      showarrow: false,
      font: { size: 12 },
    })),
    legend: { orientation: "h", x: 0, y: -0.25 },
    ...plotlyTheme(), // the panel's ground, ink and mode bar, in the dark theme too
  };
  return { traces, layout };
}

// A one-line reading of the figure, with the numbers at the widest d_k.
export function sweepSummary(r) {
  const w = r.widths[r.widths.length - 1];
  const f = r.widths[0];
  return (
    `Variance ${r.variance}: from d_k = ${f.d_k} to ${w.d_k} the unscaled std goes ${f.std_unscaled.toFixed(2)} → ` +
    `${w.std_unscaled.toFixed(2)} (expected ${w.expected_std_unscaled.toFixed(2)}), the scaled one stays at ` +
    `${w.std_scaled.toFixed(2)}. Unscaled, the entropy over ${r.keys} keys falls to ${w.entropy_unscaled.toFixed(2)} nats ` +
    `and the largest weight rises to ${w.max_weight_unscaled.toFixed(2)}; scaled: ${w.entropy_scaled.toFixed(2)} nats and ` +
    `${w.max_weight_scaled.toFixed(2)} (uniform: ${r.uniform_entropy.toFixed(2)} nats). ${r.samples} rows per width.` +
    (r.trained && r.trained.length ? ` ${trainedSummary(r)}` : "")
  );
}

// view: {result, status, message}
export function renderSweep(els, view) {
  els.status.textContent = view.status === "loading" ? "sampling…" : view.status === "error" ? view.message : "";
  els.status.classList.toggle("bad", view.status === "error");
  const r = view.result;
  if (els.trained) renderTrained(els.trained, r);
  if (!r) {
    if (window.Plotly && els.plot.dataset.drawn) window.Plotly.purge(els.plot);
    els.plot.dataset.drawn = "";
    els.summary.textContent = "";
    return;
  }
  els.summary.textContent = sweepSummary(r);
  if (!window.Plotly) return;
  const { traces, layout } = sweepFigure(r);
  window.Plotly.react(els.plot, traces, layout, PLOT_CONFIG);
  els.plot.dataset.drawn = "1";
  els.plot.dataset.variance = String(r.variance);
  els.plot.setAttribute("aria-label", `Figure 21.5, measured. ${sweepSummary(r)}`);
}

const variance = (value) => ({ variance: clampVariance(value) });

export const panel = {
  analysis: "scale-sweep",
  words: "the scale sweep",
  setting: { key: "sweep", encode: (v) => String(v.variance), decode: (raw) => variance(Number.parseFloat(raw)) },
  request: (s, value) =>
    value ? { variance: value.variance, samples: SWEEP_SAMPLES, models: trainedModels(s.models) } : null,
  debounce: 250,
  keep: true,
  needsPlotly: true,
  render(root, slot, s) {
    const part = within(root);
    const v = s.ui.sweep ? s.ui.sweep.variance : SWEEP_VARIANCE.fallback;
    if (document.activeElement !== part("sweep-variance")) part("sweep-variance").value = String(v);
    if (document.activeElement !== part("sweep-variance-range")) part("sweep-variance-range").value = String(v);
    part("sweep-draw").hidden = !!s.ui.sweep;
    renderSweep(
      {
        status: part("sweep-status"),
        plot: part("sweep-plot"),
        summary: part("sweep-summary"),
        trained: part("sweep-trained"),
      },
      { result: slot.status === "error" ? null : slot.result, status: slot.status, message: slot.message },
    );
  },
  bind(root, { dispatch, getState }) {
    const part = within(root);
    const set = (value) => dispatch(act.panelSet("sweep", variance(value)));
    part("sweep-draw").addEventListener("click", () => {
      const s = getState();
      set(s.ui.sweep ? s.ui.sweep.variance : SWEEP_VARIANCE.fallback);
      part("sweep-variance").focus();
    });
    part("sweep-variance").addEventListener("change", (e) => set(Number.parseFloat(e.target.value)));
    part("sweep-variance-range").addEventListener("input", (e) => {
      part("sweep-variance").value = e.target.value;
      set(Number.parseFloat(e.target.value));
    });
  },
};
