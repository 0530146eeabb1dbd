// The textbook's numbers, editable: X (positions x features), W_Q, W_K, W_V as grids of number inputs.

import { MATRIX_NAMES } from "./numbersettings.js";
import { pieceLabel } from "./piece.js";

export const LABELS = { x: "X", w_q: "W_Q", w_k: "W_K", w_v: "W_V" };

export function renderMatrices(root, matrices, tokens, onEdit) {
  root.replaceChildren();
  for (const name of MATRIX_NAMES) {
    const m = matrices[name];
    const wrap = document.createElement("div");
    wrap.className = "matrix-editor";
    const title = document.createElement("div");
    title.className = "matrix-title";
    title.textContent = `${LABELS[name]} (${m.length} × ${m[0].length})`;
    const table = document.createElement("table");
    m.forEach((row, i) => {
      const tr = document.createElement("tr");
      if (name === "x") {
        const th = document.createElement("th");
        th.scope = "row";
        th.textContent = tokens[i] != null ? pieceLabel(tokens[i]) : `x${i + 1}`;
        tr.append(th);
      }
      row.forEach((v, j) => {
        const td = document.createElement("td");
        const input = document.createElement("input");
        input.type = "number";
        input.step = "0.1";
        input.value = String(v);
        input.setAttribute("aria-label", `${LABELS[name]} row ${i + 1} column ${j + 1}`);
        input.addEventListener("change", () => {
          if (!onEdit(name, i, j, input.value)) input.setAttribute("aria-invalid", "true");
          else input.removeAttribute("aria-invalid");
        });
        td.append(input);
        tr.append(td);
      });
      table.append(tr);
    });
    wrap.append(title, table);
    root.append(wrap);
  }
}

// Read-only tables of Q, K, V, contexts for one head, for checking by hand.
export function renderNumbers(root, tokens, parts) {
  root.replaceChildren();
  for (const [title, m] of parts) {
    if (!m) continue;
    const wrap = document.createElement("div");
    wrap.className = "matrix-view";
    const t = document.createElement("div");
    t.className = "matrix-title";
    t.textContent = `${title} (${m.length} × ${m[0]?.length ?? 0})`;
    const table = document.createElement("table");
    m.forEach((row, i) => {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = tokens[i] != null ? pieceLabel(tokens[i]) : String(i);
      tr.append(th);
      for (const v of row) {
        const td = document.createElement("td");
        td.textContent = v.toFixed(3);
        tr.append(td);
      }
      table.append(tr);
    });
    wrap.append(t, table);
    root.append(wrap);
  }
}
