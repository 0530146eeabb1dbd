// What each head adds to the layer's output, per query position: the Moved view's strip under every head card.
// The server sends it (include head_contributions: each head's `contribution`, |context_h W_O^h| at each query, the
// norm of head h's part of the layer output there); the page draws those numbers as they come, on the head's own
// 0..max scale (the one thing computed here), one cell per query, and names the top positions for a screen reader.
// Pure helpers on top; `contributionStrip` only builds the element.

import { colorAt, rgbString } from "./colors.js";
import { el, node } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const STRIP_HEIGHT = 8; // px: a thin strip under the heatmap
export const TOP_POSITIONS = 3; // the positions the strip's aria-label names

// Whether a head of a result carries what the Moved view draws: value norms and its contribution.
export function movedIn(head) {
  return head?.value_norms != null && head?.contribution != null;
}

// The strip's scale: 0 to the head's largest contribution (1 when every value is 0, so nothing divides by 0).
export function stripScale(values) {
  let max = 0;
  for (const v of values) if (Number.isFinite(v) && v > max) max = v;
  return { min: 0, max: max > 0 ? max : 1, largest: max };
}

// The `n` positions with the largest contribution, largest first (ties: the earlier position): [{position, value}].
export function topPositions(values, n = TOP_POSITIONS) {
  return Array.from(values, (value, position) => ({ position, value }))
    .sort((a, b) => b.value - a.value || a.position - b.position)
    .slice(0, n);
}

export function formatValue(v) {
  return Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(2) : v.toFixed(3);
}

// The head's total over its queries: the sum of the values the server sent, for the caption.
export function totalOf(values) {
  let t = 0;
  for (const v of values) t += v;
  return t;
}

// What the strip says to a screen reader: the top positions with their tokens and values, the total, the scale.
export function stripLabel(values, tokens, name) {
  const top = topPositions(values)
    .map((t) => `${t.position} ${pieceQuote(tokens[t.position])} ${formatValue(t.value)}`)
    .join(", ");
  const scale = stripScale(values);
  return (
    `${name} adds to the layer output, per query position: most at ${top}; total ${formatValue(totalOf(values))}` +
    ` (scale 0 to ${formatValue(scale.largest)})`
  );
}

// The strip under one head card, or null when the head has no contribution. `stops`: the view's palette; `at`
// ({left, cell} px, the heatmap's layout): the strip starts under the plot, one cell a query.
export function contributionStrip(head, tokens, stops, name, at = null) {
  const values = head.contribution;
  if (values == null) return null;
  const S = values.length;
  const scale = stripScale(values);
  const box = node("div", { className: "contrib" });
  box.setAttribute("data-testid", "head-contribution");
  const svg = el("svg", {
    viewBox: `0 0 ${S} 1`,
    preserveAspectRatio: "none",
    width: "100%",
    height: STRIP_HEIGHT,
    class: "contrib-strip",
    role: "img",
    "aria-label": stripLabel(values, tokens, name),
  });
  if (at) {
    svg.style.marginLeft = `${at.left}px`;
    svg.setAttribute("width", String(S * at.cell));
  }
  for (let q = 0; q < S; q++) {
    const v = values[q];
    const r = el("rect", {
      x: q,
      y: 0,
      width: 1,
      height: 1,
      fill: rgbString(colorAt(stops, v / scale.max)),
      "data-position": q,
      "data-value": v,
      "shape-rendering": "crispEdges",
    });
    r.append(
      el("title", {}, `query ${pos(q)} ${pieceQuote(tokens[q])}: adds ${formatValue(v)} to the output (|context·W_O|)`),
    );
    svg.append(r);
  }
  const cap = node(
    "span",
    { className: "contrib-cap muted small" },
    `adds to the output · total ${formatValue(totalOf(values))} · 0–${formatValue(scale.largest)}`,
  );
  cap.title =
    "|context_h · W_O^h| at each query: the norm of what this head adds to the layer's output there; " +
    "the strip runs from 0 to this head's largest value";
  box.dataset.max = String(scale.largest);
  box.append(svg, cap);
  return box;
}
