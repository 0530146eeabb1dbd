// The standalone viewer's rollout and attention flow (an export with include rollout or attention_flow): each
// embedded layer's S x S map, drawn as the page's rollout panel draws them (one heatmap per layer, 0..1 on the
// palette), under a line naming how the heads were fused and whether the residual was added. Pure helpers on top,
// then `renderStacked`, which fills <section id="sa-stacked"> (wire/standalone.py) and hides it when the file holds
// neither.

import { widenHalf } from "./arrays.js";
import { PALETTES, VIRIDIS } from "./colors.js";
import { node } from "./dom.js";
import { cellAt, drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

// the layer fields an export embeds (its include names) -> what the file calls them
export const STACKED = {
  rollout: { name: "Attention rollout", share: "rollout share", method: "rollout" },
  attention_flow: { name: "Attention flow", share: "flow share", method: "flow" },
};
export const STACKED_PX = 300; // each layer's map at most this wide

// The fields of STACKED the result holds (every layer has them, or none does).
export function stackedFields(result) {
  return Object.keys(STACKED).filter((f) => result.layers.length && result.layers.every((l) => l[f] != null));
}

// How the maps were made, in words: "heads fused by mean, residual added (+ I)".
export function fuseLine(rollout) {
  const r = rollout || { heads: "mean", residual: true };
  return `heads fused by ${r.heads}, ${r.residual ? "residual added (+ I)" : "no residual"}`;
}

// One layer's map as rows of numbers (float16 bit rows widened).
export function mapRows(matrix) {
  return Array.from(matrix, (row) => (row instanceof Uint16Array ? Array.from(widenHalf(row)) : Array.from(row)));
}

// The input position row q draws most from.
export function topSource(row) {
  let best = 0;
  for (let k = 1; k < row.length; k++) if (row[k] > row[best]) best = k;
  return best;
}

function drawMap(layer, rows, field, tokens, palette, tip) {
  const words = STACKED[field];
  const S = rows.length;
  const cell = Math.max(1, Math.min(22, Math.floor(STACKED_PX / Math.max(S, 1))));
  const L = layoutFor(S, { cell, labels: cell >= 7, maxLabel: 6 });
  const fig = node("figure", { className: "head-card rollout-card", tabIndex: 0 });
  fig.setAttribute("data-testid", "rollout-map");
  fig.dataset.layer = String(layer);
  fig.dataset.method = words.method;
  fig.dataset.layout = JSON.stringify({ left: L.left, top: L.top, cell: L.cell });
  const last = S - 1;
  const src = topSource(rows[last]);
  const share = rows[last][src].toFixed(2);
  fig.setAttribute(
    "aria-label",
    `${words.name} after layer ${layer}: position ${pos(last)} draws most (${share}) from input position ${pos(src)}`,
  );
  const cap = node("figcaption");
  cap.append(
    node("strong", {}, `after L${layer}`),
    node("span", { className: "meta" }, `last ← ${pos(src)} (${share})`),
  );
  const canvas = node("canvas");
  canvas.setAttribute("aria-hidden", "true");
  fig.append(cap, canvas);
  const eligible = rows.map((row) => row.map(() => true));
  const scale = { stops: PALETTES[palette] || VIRIDIS, min: 0, max: 1, label: words.share };
  drawHeatmap(sizeCanvas(canvas, L), { matrix: rows, eligible, tokens, scale, layout: L });
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return cellAt(L, e.clientX - r.left, e.clientY - r.top);
  };
  canvas.addEventListener("mousemove", (e) => {
    const c = at(e);
    const lines = c && [
      `${words.name} after layer ${layer}`,
      `position ${pos(c.q)} ${pieceQuote(tokens[c.q])} ← input ${pos(c.k)} ${pieceQuote(tokens[c.k])}`,
      `${words.share} ${rows[c.q][c.k].toFixed(4)}`,
    ];
    tip(lines, e);
  });
  canvas.addEventListener("mouseleave", () => tip(null));
  fig.drawn = rows; // what the image shows, for tests
  return fig;
}

// Fill `root` with a part per embedded field: its heading, the fuse line and one map per layer. `rollout` is the
// export's options ({heads, residual}); `tip(lines, event)` shows a hover's lines.
export function renderStacked(root, result, rollout, palette, tip) {
  const fields = stackedFields(result);
  root.hidden = fields.length === 0;
  const parts = fields.map((field) => {
    const words = STACKED[field];
    const part = node("div", { className: "sa-stacked-part" });
    part.dataset.method = words.method;
    part.setAttribute("data-testid", `sa-${words.method}`);
    const line = node(
      "p",
      { className: "muted small" },
      `${fuseLine(rollout)}; row: a position after the layer, column: the input position it traces back to (Abnar & Zuidema 2020)`,
    );
    line.setAttribute("data-testid", "sa-fuse");
    const grid = node("div", { className: "heads-grid" });
    grid.append(...result.layers.map((l) => drawMap(l.index, mapRows(l[field]), field, result.tokens, palette, tip)));
    part.append(node("h2", {}, words.name), line, grid);
    return part;
  });
  root.replaceChildren(...parts);
  return fields;
}
