// The head opened large: a plotly heatmap with a colour bar, zoom and hover, cell values when they fit.
// Masked cells are hatched grey under a null z (never a huge negative number). Click a cell to block or unblock it.

import { MASK_FILL, MASK_HATCH, plotlyScale } from "./colors.js";
import { drawnValues } from "./heatmap.js";
import { maskReasons } from "./masks.js";

export const ANNOTATE_MAX_TOKENS = 12; // print the value in each cell up to this many positions
export const MAX_TICKS = 24; // beyond this many positions every n-th one is labelled
export const FOCUS_HEIGHT = 430;

// Plotly reads a few HTML-like tags and entities in its strings; tokens are escaped so they stay text.
export function plotlyText(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function tickLabels(tokens) {
  return tokens.map((t, i) => `${plotlyText(t.length > 12 ? `${t.slice(0, 11)}…` : t)} ${i}`);
}

// Rectangles around each masked cell, as one null-separated path plotly fills with a hatch pattern.
export function maskPath(eligible) {
  const x = [];
  const y = [];
  eligible.forEach((row, q) =>
    row.forEach((ok, k) => {
      if (ok) return;
      x.push(k - 0.5, k + 0.5, k + 0.5, k - 0.5, k - 0.5, null);
      y.push(q - 0.5, q - 0.5, q + 0.5, q + 0.5, q - 0.5, null);
    }),
  );
  return { x, y };
}

export function hoverText(view, head, q, k) {
  const reasons = maskReasons(view.masks, q, k);
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

export function renderFocus(el, view, head, layer, onCell) {
  if (!window.Plotly || !head) return;
  const S = view.tokens.length;
  const matrix = view.view === "scores" ? head.scores : head.weights;
  const z = drawnValues(matrix, view.eligible);
  const hover = matrix.map((row, q) => row.map((_, k) => hoverText(view, head, q, k)));
  const keys = view.keyTokens || view.tokens;
  const idx = view.tokens.map((_, i) => i);
  const kidx = keys.map((_, i) => i);
  const every = Math.ceil(Math.max(S, keys.length) / MAX_TICKS);
  const tickIdx = idx.filter((i) => i % every === 0);
  const ticks = tickLabels(view.tokens).filter((_, i) => i % every === 0);
  const kTickIdx = kidx.filter((i) => i % every === 0);
  const kTicks = tickLabels(keys).filter((_, i) => i % every === 0);
  const maskedZ = view.eligible.map((row) => row.map((ok) => (ok ? null : 1)));
  const path = maskPath(view.eligible);
  const traces = [
    {
      type: "heatmap", z: maskedZ, x: kidx, y: idx, text: hover, hovertemplate: "%{text}<extra></extra>",
      colorscale: [[0, MASK_FILL], [1, MASK_FILL]], showscale: false, zmin: 0, zmax: 1, xgap: 0, ygap: 0,
    },
    {
      type: "scatter", mode: "lines", x: path.x, y: path.y, fill: "toself", hoverinfo: "skip",
      line: { width: 0 }, fillcolor: MASK_FILL, showlegend: false,
      fillpattern: { shape: "/", fgcolor: MASK_HATCH, bgcolor: MASK_FILL, size: 7, solidity: 0.15 },
    },
    {
      type: "heatmap", z, x: kidx, y: idx, text: hover, hovertemplate: "%{text}<extra></extra>",
      colorscale: plotlyScale(view.scale.stops), zmin: view.scale.min, zmax: view.scale.max,
      colorbar: { title: { text: view.scale.label, side: "right" }, thickness: 14, len: 0.9 },
      texttemplate: Math.max(S, keys.length) <= ANNOTATE_MAX_TOKENS ? "%{z:.2f}" : "", textfont: { size: 11 },
    },
  ];
  if (view.blocked.length) {
    traces.push({
      type: "scatter", mode: "markers", hoverinfo: "skip", showlegend: false,
      x: view.blocked.map(([, k]) => k), y: view.blocked.map(([q]) => q),
      marker: { symbol: "x-thin-open", color: "#202020", size: Math.max(8, Math.min(22, 260 / S)), line: { width: 2, color: "#202020" } },
    });
  }
  const shapes = (view.changed || []).map(([q, k]) => ({
    type: "rect", x0: k - 0.45, x1: k + 0.45, y0: q - 0.45, y1: q + 0.45,
    line: { color: "#000", width: 1.5, dash: "dot" },
  }));
  const axis = (title, vals = tickIdx, text = ticks) => ({
    title: { text: title, standoff: 6 }, tickmode: "array", tickvals: vals, ticktext: text,
    showgrid: false, zeroline: false, fixedrange: false, automargin: true,
    tickfont: { size: S > 16 ? 9 : 11 },
  });
  const layout = {
    height: FOCUS_HEIGHT,
    margin: { l: 10, r: 10, t: 8, b: 10 },
    xaxis: {
      ...axis(view.keyTokens ? "Key position (source)" : "Key position", kTickIdx, kTicks),
      side: "bottom", tickangle: -45, constrain: "domain",
    },
    yaxis: { ...axis("Query position"), autorange: "reversed", scaleanchor: "x", constrain: "domain" },
    shapes,
    plot_bgcolor: "#fff",
    paper_bgcolor: "#fff",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size: 12, color: "#222" },
    hoverlabel: { bgcolor: "#fff", bordercolor: "#555", font: { color: "#111" } },
  };
  const config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };
  el.dataset.layer = String(layer);
  el.dataset.head = String(head.index);
  window.Plotly.react(el, traces, layout, config);
  if (!el.dataset.bound) {
    el.dataset.bound = "1";
    el.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (p && Number.isInteger(p.x) && Number.isInteger(p.y)) el._onCell?.(p.y, p.x, ev.event);
    });
  }
  el._onCell = onCell;
}
