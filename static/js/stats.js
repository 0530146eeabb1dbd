// Per-head statistics: entropy, masked share (how much of the unmasked softmax the masks took away — not the weight
// left on masked keys, which must be 0 and has its own column), the row-sum check, score ranges, mean distance,
// and head health (KL from uniform, dead, identical heads, QK rank); and head similarity.

import { VIRIDIS } from "./colors.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { healthFlags } from "./heads.js";

export const ROW_SUM_TOLERANCE = 1e-4;

export function fmt(v, digits = 3) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e4)) return v.toExponential(1);
  return v.toFixed(digits);
}

// One table row's cells for a head's stats (as plain strings).
// `prefix` names a sibling head in the health column ("L1 H" or "H").
export function statsRow(label, st, prefix = "H") {
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
    st.zero_rows.length ? st.zero_rows.join(", ") : "none",
    st.kl_from_uniform == null ? "–" : fmt(st.kl_from_uniform),
    health.length ? health.join(" · ") : "–",
  ];
}

export const STATS_COLUMNS = [
  ["Head", ""],
  ["Mean entropy", "nats, over query rows (0 = one key takes all)"],
  ["Masked share", "mean over queries of the share of the unmasked softmax that the masks removed (a property of the scores, not a leak)"],
  ["Weight on masked keys", "the most weight any query still puts on its masked keys, after masking (must be exactly 0)"],
  ["Row sums", "max |Σ weights − 1| over rows that have a key"],
  ["Eligible scores", "min … max over eligible cells"],
  ["All scores", "min … max before masking"],
  ["Mean distance", "weighted mean |q − k|"],
  ["Zero rows", "rows with no eligible key (policy: zero)"],
  ["KL from uniform", "nats: how far the weights are from uniform over the eligible keys (0 = a dead head)"],
  ["Health", "dead: near-uniform · = Hn: identical weights to head n · QK rank: rank of W_Q W_Kᵀ out of its maximum"],
];

export function renderStats(table, simRoot, view, heads) {
  table.replaceChildren();
  const thead = document.createElement("thead");
  const tr = document.createElement("tr");
  for (const [name, help] of STATS_COLUMNS) {
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
    statsRow(label, head.stats, view.multiLayer ? `L${layer} H` : "H").forEach((text, i) => {
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
  simRoot.replaceChildren();
  const sim = view.layer?.head_similarity;
  if (sim && sim.length > 1) {
    const cap = document.createElement("p");
    cap.className = "muted";
    cap.textContent = `Head similarity (layer ${view.layer.index}): cosine of the flattened weight matrices, rows and columns are heads.`;
    const canvas = document.createElement("canvas");
    const n = sim.length;
    const L = layoutFor(n, { cell: Math.max(6, Math.min(24, Math.floor(200 / n))), labels: false });
    const all = sim.map((r) => r.map(() => true));
    drawHeatmap(sizeCanvas(canvas, L), {
      matrix: sim, eligible: all, tokens: sim.map((_, i) => `H${i}`),
      scale: { stops: VIRIDIS, min: 0, max: 1 }, layout: L,
    });
    canvas.setAttribute("aria-label", "head similarity matrix");
    simRoot.append(cap, canvas);
  }
}
