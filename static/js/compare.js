// Compare two runs (POST /api/compare): pin the current request as A, change anything, and every head's weights
// are drawn as B − A on a diverging scale (blue: A attends more, red: B attends more, white: no change), with the
// largest changes listed. Pure helpers on top; `renderCompare` only draws.

import { RDBU } from "./colors.js";
import { drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { node } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const MAX_DIFF_MAPS = 24; // beyond this many heads the ones that changed most are drawn

// A symmetric diverging scale over ±maxAbs (±1 when nothing changed, so zero stays white).
export function diffScale(maxAbs) {
  const m = maxAbs > 0 ? maxAbs : 1;
  return { stops: RDBU, min: -m, max: m, label: "weight B − A" };
}

// A cell is drawn when either run lets the query see that key; masked in both = hatched.
export function eitherEligible(a, b) {
  return a.map((row, q) => row.map((ok, k) => ok || !!b[q]?.[k]));
}

// [{layer, head, diff, max_abs, where}] over every layer, the largest first when there are more than `limit`.
export function diffMaps(result, limit = MAX_DIFF_MAPS) {
  const all = result.layers.flatMap((l) => l.heads.map((h) => ({ layer: l.index, ...h, head: h.index })));
  if (all.length <= limit) return { maps: all, total: all.length };
  const top = [...all].sort((x, y) => y.max_abs - x.max_abs).slice(0, limit);
  top.sort((x, y) => x.layer - y.layer || x.head - y.head);
  return { maps: top, total: all.length };
}

// A short description of a request body: model, text, masks.
export function describeBody(b) {
  const bits = [b.model || "custom"];
  if (b.text != null) bits.push(`“${b.text.length > 40 ? `${b.text.slice(0, 39)}…` : b.text}”`);
  else if (b.tokens) bits.push(`${b.tokens.length} tokens`);
  else if (b.x) bits.push(`x ${b.x.length} × ${b.x[0]?.length ?? 0}`);
  const m = b.masks || {};
  const masks = [];
  if (m.causal) masks.push("causal");
  if (m.window != null) masks.push(`window ${m.window}`);
  if (m.padding) masks.push(`${m.padding.filter((v) => !v).length} padded`);
  if (m.blocked?.length) masks.push(`${m.blocked.length} blocked`);
  bits.push(masks.length ? masks.join(", ") : b.masks ? "no masks" : "default masks");
  if (b.scale === false) bits.push("unscaled");
  return bits.join(" · ");
}

// view: {pin, current (the B body), result, status, message, multiLayer}
export function renderCompare(root, view) {
  root.replaceChildren();
  const status = node("p", { className: "muted small cmp-status" });
  status.setAttribute("aria-live", "polite");
  root.append(status);
  if (!view.pin) {
    status.textContent = "Pin the current run as A, then change anything: each head's weights are drawn as B − A.";
    return;
  }
  root.append(node("p", { className: "small cmp-a" }, `A (pinned): ${describeBody(view.pin)}`));
  if (view.current) root.append(node("p", { className: "small cmp-a" }, `B (now): ${describeBody(view.current)}`));
  if (view.status === "error") {
    status.textContent = view.message;
    status.classList.add("bad");
    status.setAttribute("data-testid", "compare-error");
    return;
  }
  const r = view.result;
  if (!r) {
    status.textContent = view.status === "loading" ? "comparing…" : "";
    return;
  }
  if (view.status === "loading") status.textContent = "comparing…";
  const S = r.a.tokens.length;
  const summary = node("p", { className: "cmp-summary" });
  summary.dataset.maxAbs = String(r.max_abs);
  summary.textContent =
    r.max_abs > 0
      ? `Largest weight change anywhere: ${r.max_abs.toFixed(4)}. Blue: A attends more; red: B attends more.`
      : "A and B give the same weights in every head shown.";
  root.append(summary);
  const scale = diffScale(r.max_abs);
  const legend = node("div", { className: "legend cmp-legend" });
  const bar = node("span", { className: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${scale.stops.join(", ")})`;
  legend.append(
    node("span", { className: "legend-name" }, scale.label),
    node("span", {}, (-scale.max).toFixed(3)),
    bar,
    node("span", {}, `+${scale.max.toFixed(3)}`),
  );
  root.append(legend);
  const eligible = eitherEligible(r.a.eligible, r.b.eligible);
  const { maps, total } = diffMaps(r);
  if (maps.length < total) {
    root.append(
      node("p", { className: "muted small" }, `${maps.length} of ${total} heads drawn: those that changed most.`),
    );
  }
  const grid = node("div", { className: "cmp-grid" });
  const cell = Math.max(3, Math.min(14, Math.floor(130 / S)));
  const labels = maps.length <= 12 && cell >= 7;
  const L = layoutFor(S, { cell, labels, maxLabel: 6 });
  for (const m of maps) {
    const fig = node("figure", { className: "cmp-map" });
    fig.setAttribute("data-testid", "compare-diff");
    fig.dataset.layer = String(m.layer);
    fig.dataset.head = String(m.head);
    fig.dataset.maxAbs = String(m.max_abs);
    fig.dataset.layout = JSON.stringify({ left: L.left, top: L.top, cell: L.cell });
    const name = view.multiLayer ? `L${m.layer} · H${m.head}` : `Head ${m.head}`;
    const cap = node("figcaption");
    cap.append(node("strong", {}, name), node("span", { className: "meta" }, `max ${m.max_abs.toFixed(3)}`));
    const canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    const [q, k] = m.where || [];
    canvas.setAttribute(
      "aria-label",
      `${name}: weight B − A, largest ${m.max_abs.toFixed(4)}${m.where ? ` at query ${pos(q)} → key ${pos(k)}` : ""}`,
    );
    fig.append(cap, canvas);
    drawHeatmap(sizeCanvas(canvas, L), { matrix: m.diff, eligible, tokens: r.b.tokens, scale, layout: L });
    grid.append(fig);
  }
  root.append(grid);
  if (r.largest?.length) {
    root.append(node("h3", {}, "Largest changes"));
    const table = node("table", { className: "stats cmp-largest" });
    table.setAttribute("data-testid", "compare-largest");
    const hr = node("tr");
    for (const h of ["head", "query → key", "A", "B", "B − A"]) hr.append(node("th", { scope: "col" }, h));
    table.append(node("thead"));
    table.tHead.append(hr);
    const body = node("tbody");
    for (const c of r.largest) {
      const tr = node("tr");
      const tok = (i) => r.b.tokens[i] ?? "";
      tr.append(
        node("th", { scope: "row" }, view.multiLayer ? `L${c.layer} H${c.head}` : `H${c.head}`),
        node("td", {}, `${c.query} ${pieceQuote(tok(c.query))} → ${c.key} ${pieceQuote(tok(c.key))}`),
        node("td", {}, c.a.toFixed(4)),
        node("td", {}, c.b.toFixed(4)),
        node("td", { className: c.diff > 0 ? "up" : "down" }, `${c.diff > 0 ? "+" : ""}${c.diff.toFixed(4)}`),
      );
      body.append(tr);
    }
    table.append(body);
    root.append(table);
  }
}
