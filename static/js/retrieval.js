// The retrieval diagram: one query linked to every key, line width by weight, blocked keys shown blocked,
// each key labelled with its score and weight. SVG built node by node; token text goes in as text only.

import { colorAt, inkOn, rgbString, PALETTES } from "./colors.js";
import { maskReasons } from "./masks.js";
import { el } from "./dom.js";

export const ROW_PX = { max: 30, min: 16 };
export const MAX_LINE_PX = 16;
export const WIDTH = 470;
const COL = { query: 4, key: 196, boxW: 104, labels: 308 };

export function rowHeight(seqLen) {
  return Math.max(ROW_PX.min, Math.min(ROW_PX.max, Math.floor(520 / Math.max(seqLen, 1))));
}

// Line width for a weight in [0, 1]: a hairline at 0, MAX_LINE_PX at 1.
export function lineWidth(weight) {
  return 0.75 + Math.max(0, Math.min(1, weight)) * (MAX_LINE_PX - 0.75);
}

// What the diagram says about each key for query q: eligible or why not, score and weight.
export function retrievalRows(view, head, q) {
  return (view.keyTokens || view.tokens).map((token, k) => {
    const reasons = maskReasons(view.masks, q, k);
    return {
      k, token, eligible: view.eligible[q][k], reasons,
      score: head.scores ? head.scores[q][k] : null,
      weight: head.weights ? head.weights[q][k] : null,
    };
  });
}

function clip(s, n) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

export function renderRetrieval(svg, view, head, q, onQuery, onKey) {
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  const rh = rowHeight(Math.max(S, keys.length));
  const height = 34 + Math.max(S, keys.length) * rh + 8;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${WIDTH} ${height}`);
  svg.setAttribute("width", "100%");
  svg.style.maxWidth = `${WIDTH * 1.25}px`;
  svg.dataset.query = String(q);
  const font = Math.min(13, rh - 4);
  const defs = el("defs");
  const pat = el("pattern", { id: "rd-hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pat.append(el("rect", { width: 6, height: 6, fill: "#e4e4e4" }), el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#8c8c8c", "stroke-width": 1.5 }));
  defs.append(pat);
  svg.append(defs);
  svg.append(
    el("text", { x: COL.query, y: 16, class: "rd-head" }, "Query (pick one)"),
    el("text", { x: COL.key, y: 16, class: "rd-head" }, view.keyTokens ? "Keys (source)" : "Keys"),
    el("text", { x: COL.labels, y: 16, class: "rd-head" }, "score · weight"),
  );
  const y = (i) => 30 + i * rh + rh / 2;
  const rows = retrievalRows(view, head, q);
  const lines = el("g", { class: "rd-lines" });
  svg.append(lines);
  const palette = PALETTES[view.palette] || PALETTES.viridis;
  for (const r of rows) {
    const x1 = COL.query + COL.boxW;
    const x2 = COL.key;
    const d = `M ${x1} ${y(q)} C ${(x1 + x2) / 2} ${y(q)}, ${(x1 + x2) / 2} ${y(r.k)}, ${x2} ${y(r.k)}`;
    if (r.eligible) {
      const w = r.weight ?? 0;
      const color = rgbString(colorAt(palette, 0.15 + 0.85 * w));
      lines.append(el("path", { d, fill: "none", stroke: color, "stroke-width": lineWidth(w), "stroke-linecap": "round", "stroke-opacity": 0.85, "data-key": r.k, class: "rd-line" }));
    } else {
      lines.append(el("path", { d, fill: "none", stroke: "#9a9a9a", "stroke-width": 1, "stroke-dasharray": "3 4", "data-key": r.k, class: "rd-line rd-blocked" }));
    }
  }
  for (let i = 0; i < S; i++) {
    const g = el("g", { class: `rd-query${i === q ? " rd-chosen" : ""}`, "data-query": i });
    const rect = el("rect", { x: COL.query, y: y(i) - rh / 2 + 2, width: COL.boxW, height: rh - 4, rx: 4 });
    const t = el("text", { x: COL.query + 8, y: y(i) + font / 3, "font-size": font }, `${i}  ${clip(view.tokens[i], 12)}`);
    g.append(rect, t);
    g.addEventListener("click", () => onQuery(i));
    svg.append(g);
  }
  for (const r of rows) {
    const chosen = view.pair && view.pair[0] === q && view.pair[1] === r.k;
    const g = el("g", { class: `rd-key${r.eligible ? "" : " rd-masked"}${chosen ? " rd-pair" : ""}`, "data-key": r.k });
    if (onKey) g.addEventListener("click", () => onKey(r.k));
    const fill = r.eligible ? rgbString(colorAt(palette, r.weight ?? 0)) : "url(#rd-hatch)";
    const ink = r.eligible ? inkOn(colorAt(palette, r.weight ?? 0)) : "#333";
    g.append(el("rect", { x: COL.key, y: y(r.k) - rh / 2 + 2, width: COL.boxW, height: rh - 4, rx: 4, fill, stroke: r.eligible ? "none" : "#8c8c8c" }));
    const label = el("text", { x: COL.key + 8, y: y(r.k) + font / 3, "font-size": font }, `${r.k}  ${clip(r.token, 12)}`);
    label.style.fill = ink;
    if (!r.eligible) label.setAttribute("text-decoration", "line-through");
    g.append(label);
    const s = r.score === null ? "–" : r.score.toFixed(3);
    const txt = r.eligible ? `${s} · ${(r.weight ?? 0).toFixed(3)}` : `${s} · ✕ ${r.reasons.join("+") || "masked"}`;
    g.append(el("text", { x: COL.labels, y: y(r.k) + font / 3, "font-size": Math.min(12, font), class: "rd-num" }, txt));
    svg.append(g);
  }
  svg.setAttribute(
    "aria-label",
    `Retrieval for query ${q} “${view.tokens[q]}”: ${rows.filter((r) => r.eligible).length} of ${keys.length} keys eligible. ` +
      "Up and down arrows choose another query.",
  );
}
