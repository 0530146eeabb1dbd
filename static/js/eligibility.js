// The eligibility grid: which (query, key) pairs may attend, and which mask rules each one out.
// Each cell is a button: activate it to block or unblock that pair.

import { cellAt, drawHeatmap, layoutFor, sizeCanvas } from "./heatmap.js";
import { maskReasons } from "./masks.js";

export const MAX_GRID_TOKENS = 32; // beyond this the grid is drawn on a canvas instead of as buttons
export const ELIGIBLE_FILL = "#a6d8b5";
export const REASON_CODE = { causal: "C", window: "W", padding: "P", blocked: "B" };

// The short code a cell shows: "" when eligible, else the letters of the masks that exclude it.
export function reasonCode(masks, q, k) {
  return maskReasons(masks, q, k).map((r) => REASON_CODE[r]).join("");
}

export function renderEligibility(root, view, onCell) {
  root.replaceChildren();
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  if (Math.max(S, keys.length) > MAX_GRID_TOKENS) {
    const p = document.createElement("p");
    p.className = "muted small";
    p.textContent = "green: eligible · hatched: masked · click a cell to block or unblock it";
    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-label", `eligibility of ${S} x ${keys.length} query-key pairs`);
    const n = Math.max(S, keys.length);
    const L = layoutFor(S, { cell: Math.max(3, Math.min(10, Math.floor(360 / n))), labels: n <= 64, maxLabel: 6, cols: keys.length });
    drawHeatmap(sizeCanvas(canvas, L), {
      matrix: view.eligible.map((row) => row.map(() => 1)), eligible: view.eligible, blocked: view.blocked,
      tokens: view.tokens, keyTokens: view.keyTokens, scale: { stops: [ELIGIBLE_FILL, ELIGIBLE_FILL], min: 0, max: 1 }, layout: L,
    });
    canvas.addEventListener("click", (e) => {
      const r = canvas.getBoundingClientRect();
      const at = cellAt(L, e.clientX - r.left, e.clientY - r.top);
      if (at) onCell(at.q, at.k);
    });
    root.append(p, canvas);
    return;
  }
  const table = document.createElement("table");
  table.className = "elig";
  const cap = document.createElement("caption");
  cap.textContent = "✓ eligible · C causal · W window · P padding · B blocked by you";
  table.append(cap);
  const head = document.createElement("tr");
  const corner = document.createElement("th");
  corner.className = "corner";
  corner.textContent = "query ↓ key →";
  head.append(corner);
  keys.forEach((t, k) => {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = `${k}`;
    th.title = t;
    head.append(th);
  });
  const thead = document.createElement("thead");
  thead.append(head);
  table.append(thead);
  const body = document.createElement("tbody");
  for (let q = 0; q < S; q++) {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = `${q} ${view.tokens[q].length > 10 ? `${view.tokens[q].slice(0, 9)}…` : view.tokens[q]}`;
    tr.append(th);
    for (let k = 0; k < keys.length; k++) {
      const td = document.createElement("td");
      const b = document.createElement("button");
      b.type = "button";
      const code = reasonCode(view.masks, q, k);
      const ok = view.eligible[q][k];
      b.className = ok ? "ok" : "masked";
      b.textContent = ok ? "✓" : code || "×";
      b.setAttribute(
        "aria-label",
        `query ${q} key ${k}: ${ok ? "eligible" : `masked by ${maskReasons(view.masks, q, k).join(", ")}`}; press to ${code.includes("B") ? "unblock" : "block"}`,
      );
      b.addEventListener("click", () => onCell(q, k));
      td.append(b);
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(body);
  root.append(table);
}
