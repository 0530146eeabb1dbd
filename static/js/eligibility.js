// The eligibility grid (data-view="eligibility"): which (query, key) pairs may attend, and which mask rules each
// one out (the result's `reasons`). Up to MAX_GRID_TOKENS positions it is one composite widget: a single tab stop
// (the active cell), arrow keys, Home/End and PageUp/PageDown move, Enter or Space blocks or unblocks the pair.
// Longer sequences are drawn on a canvas of a fixed size.

import { cellAt, drawHeatmap, drawHighlight, layoutFor, sizeCanvas } from "./heatmap.js";
import { cellReasons } from "./masks.js";
import { act } from "./actions.js";
import { selectView, shownDeps } from "./selectors.js";
import { pieceLabel, pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const MAX_GRID_TOKENS = 32; // beyond this the grid is drawn on a canvas instead of as buttons
export const CANVAS_PX = 280; // the canvas grid's plot side, whatever the length
export const ELIGIBLE_FILL = "#a6d8b5";
export const REASON_CODE = { causal: "C", window: "W", padding: "P", blocked: "B", "layer window": "L", masked: "×" };

// The short code a cell shows: "" when eligible, else the letters of the masks that exclude it.
export function reasonCode(reasons) {
  return reasons.map((r) => REASON_CODE[r] ?? "×").join("");
}

// The cell an arrow key moves to from [q, k] in an S x K grid (null: not a key the grid takes).
export function moveCursor([q, k], key, S, K, page = 8) {
  const clamp = (v, n) => Math.max(0, Math.min(n - 1, v));
  const moves = {
    ArrowUp: [q - 1, k],
    ArrowDown: [q + 1, k],
    ArrowLeft: [q, k - 1],
    ArrowRight: [q, k + 1],
    Home: [q, 0],
    End: [q, K - 1],
    PageUp: [q - page, k],
    PageDown: [q + page, k],
  };
  const to = moves[key];
  return to ? [clamp(to[0], S), clamp(to[1], K)] : null;
}

export function deps(s) {
  return [...shownDeps(s), s.cursor];
}

export function render(root, s, dispatch) {
  const view = selectView(s);
  if (!view) return;
  root.replaceChildren();
  const S = view.tokens.length;
  const keys = view.keyTokens || view.tokens;
  if (Math.max(S, keys.length) > MAX_GRID_TOKENS) {
    // a fixed-size picture, still one keyboard stop: arrows move the outlined cell, Enter or Space toggles it
    const p = document.createElement("p");
    p.className = "muted small";
    p.textContent =
      "green: eligible · dark hatched: masked · click a cell, or use the arrow keys and Enter, to block or unblock it";
    const canvas = document.createElement("canvas");
    canvas.id = "elig-canvas";
    canvas.tabIndex = 0;
    canvas.setAttribute("role", "application");
    canvas.setAttribute("aria-roledescription", "eligibility grid");
    canvas.setAttribute("aria-describedby", "elig-cursor");
    canvas.setAttribute(
      "aria-label",
      `eligibility of ${S} x ${keys.length} query-key pairs: arrow keys move, Enter blocks or unblocks`,
    );
    const n = Math.max(S, keys.length);
    const L = layoutFor(S, { cell: Math.min(10, CANVAS_PX / n), labels: false, cols: keys.length });
    const ctx = sizeCanvas(canvas, L);
    // every cell 1: one row of float16 1.0 patterns (0x3c00) shared by every row, painted by lookup, not S² numbers
    const ones = new Uint16Array(keys.length).fill(0x3c00);
    drawHeatmap(ctx, {
      matrix: Array.from({ length: S }, () => ones),
      eligible: view.eligible,
      blocked: view.blocked,
      tokens: view.tokens,
      keyTokens: view.keyTokens,
      scale: { stops: [ELIGIBLE_FILL, ELIGIBLE_FILL], min: 0, max: 1 },
      layout: L,
    });
    const [q, k] = s.cursor && s.cursor[0] < S && s.cursor[1] < keys.length ? s.cursor : [0, 0];
    drawHighlight(ctx, L, { q, k });
    canvas.dataset.q = String(q);
    canvas.dataset.k = String(k);
    const reasons = cellReasons(view, q, k);
    const status = document.createElement("p");
    status.id = "elig-cursor";
    status.className = "small";
    status.setAttribute("aria-live", "polite");
    status.textContent = `query ${pos(q)} ${pieceQuote(view.tokens[q])} → key ${pos(k)} ${pieceQuote(keys[k])}: ${reasons.length ? `masked by ${reasons.join(", ")}` : "eligible"}`;
    canvas.addEventListener("click", (e) => {
      const r = canvas.getBoundingClientRect();
      const at = cellAt(L, e.clientX - r.left, e.clientY - r.top);
      if (at) dispatch(act.cellToggled(at.q, at.k, "eligibility"));
    });
    canvas.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        dispatch(act.cellToggled(q, k, "eligibility"));
        return;
      }
      const to = moveCursor([q, k], e.key, S, keys.length);
      if (!to) return;
      e.preventDefault();
      dispatch(act.cursorSet(to));
    });
    root.append(p, canvas, status);
    return;
  }
  const [cq, ck] = s.cursor && s.cursor[0] < S && s.cursor[1] < keys.length ? s.cursor : [0, 0];
  const table = document.createElement("table");
  table.className = "elig";
  table.setAttribute("role", "grid");
  table.setAttribute("aria-label", "Eligibility: arrow keys move, Enter or Space blocks or unblocks the pair");
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
    th.textContent = `${pos(k)}`;
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
    th.textContent = `${pos(q)} ${pieceLabel(view.tokens[q], 10)}`;
    tr.append(th);
    for (let k = 0; k < keys.length; k++) {
      const td = document.createElement("td");
      td.setAttribute("role", "gridcell");
      const b = document.createElement("button");
      b.type = "button";
      const reasons = cellReasons(view, q, k);
      const code = reasonCode(reasons);
      const ok = view.eligible[q][k];
      b.className = ok ? "ok" : "masked";
      b.textContent = ok ? "✓" : code || "×";
      b.dataset.q = String(q);
      b.dataset.k = String(k);
      b.tabIndex = q === cq && k === ck ? 0 : -1;
      b.setAttribute(
        "aria-label",
        `query ${pos(q)} key ${pos(k)}: ${ok ? "eligible" : `masked by ${reasons.join(", ")}`}; press to ${reasons.includes("blocked") ? "unblock" : "block"}`,
      );
      td.append(b);
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(body);
  root.append(table);
}

export function bind(root, store) {
  root.addEventListener("click", (e) => {
    if (!(e.target instanceof Element)) return;
    const b = e.target.closest("button[data-q]");
    if (b) store.dispatch(act.cellToggled(Number(b.dataset.q), Number(b.dataset.k), "eligibility"));
  });
  root.addEventListener("keydown", (e) => {
    const b = e.target.closest("button[data-q]");
    if (!b) return;
    const view = selectView(store.getState());
    const to = moveCursor(
      [Number(b.dataset.q), Number(b.dataset.k)],
      e.key,
      view.tokens.length,
      (view.keyTokens || view.tokens).length,
    );
    if (!to) return;
    e.preventDefault();
    store.dispatch(act.cursorSet(to));
    root.querySelector(`button[data-q="${to[0]}"][data-k="${to[1]}"]`)?.focus();
  });
}
