// Per-head statistics: entropy, masked share (how much of the unmasked softmax the masks took away — not the weight
// left on masked keys, which must be 0 and has its own column), the row-sum check, score ranges, mean distance,
// and head health (KL from uniform, nearly uniform, identical heads, QK rank); and head similarity.

import { VIRIDIS, plotlyScale } from "./colors.js";
import { themeInk } from "./heatmap.js";
import { healthFlags } from "./heads.js";
import { selectView, shownDeps } from "./selectors.js";
import { posList } from "./positions.js";
import { within } from "./dom.js";

export const ROW_SUM_TOLERANCE = 1e-4;

export function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e4)) return v.toExponential(1);
  return v.toFixed(digits);
}

// One table row's cells for a head's stats (as plain strings).
// `prefix` names a sibling head in the health column ("L1 H" or "H").
// `sinks`: the shown heads have learned sinks, and the row ends with the head's mean sink weight.
export function statsRow(label, st, prefix = "H", sinks = false) {
  const mean = (xs) => (xs && xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const rowOk = st.max_row_sum_error <= ROW_SUM_TOLERANCE;
  const share = st.masked_share ?? st.masked_mass; // masked_mass: the name before the split
  const leftOnMasked = st.masked_weight ? Math.max(0, ...st.masked_weight.map(Math.abs)) : st.max_masked_weight;
  const health = healthFlags(st, prefix).map((f) => f.text);
  return [
    label,
    fmt(st.mean_entropy),
    fmt(mean(share)),
    fmt(leftOnMasked ?? 0),
    `${rowOk ? "✓" : "✗"} ${fmt(st.max_row_sum_error)}`,
    `${fmt(st.eligible_score_min)} … ${fmt(st.eligible_score_max)}`,
    `${fmt(st.score_min)} … ${fmt(st.score_max)}`,
    fmt(st.mean_distance, 2),
    st.zero_rows.length ? posList(st.zero_rows) : "none",
    st.kl_from_uniform == null ? "–" : fmt(st.kl_from_uniform),
    health.length ? health.join(" · ") : "–",
    ...(sinks ? [fmt(st.mean_sink_weight)] : []),
  ];
}

export const STATS_COLUMNS = [
  ["Head", ""],
  ["Mean entropy", "nats, over query rows (0 = one key takes all)"],
  [
    "Masked share",
    "mean over queries of the share of the unmasked softmax that the masks removed (a property of the scores, not a leak)",
  ],
  [
    "Weight on masked keys",
    "the most weight any query still puts on its masked keys, after masking (must be exactly 0)",
  ],
  ["Row sums", "max |Σ weights − 1| over rows that have a key"],
  ["Eligible scores", "min … max over eligible cells"],
  ["All scores", "min … max before masking"],
  ["Mean distance", "weighted mean |q − k|"],
  ["Zero rows", "rows with no eligible key (policy: zero)"],
  [
    "KL from uniform",
    "nats: how far the weights are from uniform over the eligible keys (0 = exactly uniform: every eligible key the same weight)",
  ],
  [
    "Health",
    "nearly uniform: KL from uniform below the server's threshold, the weights spread almost evenly (not broken) · = Hn: identical weights to head n · QK rank: rank of W_Q W_Kᵀ out of its maximum",
  ],
];

// The column a table of heads with learned sinks ends with (a model without them has no such column).
export const SINK_STATS_COLUMN = [
  "Mean sink weight",
  "mean over queries of the weight each gave the head's learned sink (no value; the keys share 1 minus it)",
];

export function renderStats(table, simRoot, view, heads) {
  table.replaceChildren();
  const thead = document.createElement("thead");
  const tr = document.createElement("tr");
  const sinks = heads.some(({ head }) => head.stats?.mean_sink_weight != null);
  for (const [name, help] of sinks ? [...STATS_COLUMNS, SINK_STATS_COLUMN] : STATS_COLUMNS) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = name;
    if (help) th.title = help;
    tr.append(th);
  }
  thead.append(tr);
  const body = document.createElement("tbody");
  for (const { layer, head } of heads) {
    if (!head.stats) continue;
    const row = document.createElement("tr");
    const label = view.multiLayer ? `L${layer} H${head.index}` : `H${head.index}`;
    statsRow(label, head.stats, view.multiLayer ? `L${layer} H` : "H", sinks).forEach((text, i) => {
      const td = document.createElement(i === 0 ? "th" : "td");
      td.textContent = text;
      if (i === 4 && text.startsWith("✗")) td.className = "bad";
      if (i === 3 && text !== "0.000") td.className = "bad";
      const st = head.stats;
      if (i === 10 && (st.dead || st.identical_to?.length || st.qk_rank < st.qk_rank_max)) td.className = "flagged";
      row.append(td);
    });
    body.append(row);
  }
  table.append(thead, body);
  renderSimilarity(simRoot, view);
}

// Head similarity as a small plotly heatmap: heads on both axes, a colour bar with numbers, the value on hover.
export function renderSimilarity(root, view) {
  const sim = view.layer?.head_similarity;
  if (!sim || sim.length <= 1 || !window.Plotly) {
    if (window.Plotly && root.querySelector(".sim-plot")) window.Plotly.purge(root.querySelector(".sim-plot"));
    root.replaceChildren();
    return;
  }
  let plot = root.querySelector(".sim-plot");
  if (!plot) {
    const cap = document.createElement("p");
    cap.className = "muted sim-cap";
    plot = document.createElement("div");
    plot.className = "sim-plot";
    plot.setAttribute("data-testid", "head-similarity");
    root.replaceChildren(cap, plot);
  }
  root.querySelector(".sim-cap").textContent =
    `Head similarity (layer ${view.layer.index}): cosine of the flattened weight matrices; rows and columns are heads.`;
  const names = sim.map((_, i) => `H${i}`);
  const ink = themeInk();
  const bg = ink.panel;
  const side = Math.min(360, 120 + sim.length * 18);
  window.Plotly.react(
    plot,
    [
      {
        type: "heatmap",
        z: sim.map((row) => Array.from(row)),
        x: names,
        y: names,
        zmin: 0,
        zmax: 1,
        colorscale: plotlyScale(VIRIDIS),
        colorbar: { title: { text: "cosine", side: "right" }, thickness: 12 },
        hovertemplate: "%{y} · %{x}: %{z:.3f}<extra></extra>",
      },
    ],
    {
      height: side,
      width: side + 70,
      margin: { l: 44, r: 10, t: 10, b: 40 },
      xaxis: { title: { text: "head" }, tickfont: { size: 10 } },
      yaxis: { title: { text: "head" }, autorange: "reversed", tickfont: { size: 10 } },
      paper_bgcolor: bg,
      plot_bgcolor: bg,
      font: { size: 11, color: ink.text },
    },
    { displayModeBar: false, responsive: false },
  );
}

export const needsPlotly = true; // main.js draws this view once plotly is loaded

export function deps(s) {
  return [...shownDeps(s), s.ui.layer, s.ui.focus, s.run.result?.timings_ms];
}

const statsDrawn = new WeakMap(); // root -> the shownDeps and ui its tables and plot were drawn for

export function render(root, s) {
  const view = selectView(s);
  if (!view) return;
  // the other layers of a streamed run change only the timing line (the whole pass's): the tables stay
  const shown = [...shownDeps(s), s.ui.layer, s.ui.focus];
  const last = statsDrawn.get(root);
  const part = within(root);
  if (!last || last.length !== shown.length || last.some((x, i) => x !== shown[i])) {
    renderStats(part("stats"), part("similarity"), view, view.heads);
    statsDrawn.set(root, shown);
  }
  const r = s.run.result;
  const total = Object.values(r.timings_ms).reduce((a, b) => a + b, 0);
  part("timing").textContent = `${r.config.device} · ${r.config.dtype} · ${total.toFixed(1)} ms`;
}
