// Matrices typed in (the template's <div data-view="typed">), for a model that reads them (its /api/models entry
// `reads` scores: `given`): a score matrix (the masks applied, then the server's softmax) or a weight matrix (used
// as given), one row a line, and optional values (S x d_v) for the contexts. The numbers live in ui.typed
// ({kind, m, values}; state.js keeps them in the link) and go to /api/attention as `scores` or `pattern` and
// `values` (requests.js typedBody); the heads are drawn by the same views as any run. A refusal (a row of weights
// that does not sum to 1, weight on a masked cell) comes back as the server's 422, shown at this box.

import { act } from "./actions.js";
import { reads } from "./capabilities.js";
import { labelsFor } from "./typedsettings.js";
import { modelInfo } from "./selectors.js";
import { within } from "./dom.js";

export const TYPED_KINDS = ["scores", "pattern"];
// "1 2 3\n4, 5, 6" -> {matrix: [[1, 2, 3], [4, 5, 6]]}, or {error} naming the row and what is wrong with it.
// Numbers are separated by spaces, commas or semicolons; blank lines are skipped.
export function parseGrid(text) {
  const lines = String(text || "")
    .split("\n")
    .map((l) =>
      l
        .trim()
        .replace(/^\[|\]$/g, "")
        .trim(),
    )
    .filter(Boolean);
  if (!lines.length) return { error: "type at least one row of numbers" };
  const matrix = [];
  for (const [i, line] of lines.entries()) {
    const cells = line.split(/[\s,;]+/).filter(Boolean);
    const row = cells.map(Number);
    const bad = cells.findIndex((c, j) => !Number.isFinite(row[j]));
    if (bad >= 0) return { error: `row ${i + 1}: “${cells[bad]}” is not a number` };
    if (matrix.length && row.length !== matrix[0].length) {
      return {
        error: `row ${i + 1} has ${row.length} numbers but row 1 has ${matrix[0].length}: every row needs the same length`,
      };
    }
    matrix.push(row);
  }
  return { matrix };
}

// A matrix as the box shows it: one row a line.
export function gridText(m) {
  return (m || []).map((row) => Array.from(row, (v) => String(v)).join(" ")).join("\n");
}

export function deps(s) {
  return [s.ui.typed, s.ui.model, s.models, s.run.error];
}

export function render(root, s) {
  const part = within(root);
  const info = modelInfo(s);
  root.hidden = !reads(info, "scores");
  if (root.hidden) return;
  const typed = s.ui.typed;
  const shown = JSON.stringify(typed);
  // the boxes follow the state when it changes (a link, a model), never while a person is typing in them
  if (root.dataset.shown !== shown) {
    root.dataset.shown = shown;
    part("typed-kind").value = typed?.kind || "scores";
    part("typed-matrix").value = gridText(typed?.m || info?.defaults?.scores);
    part("typed-values").value = gridText(typed?.values);
  }
  const err = s.run.error;
  const mine = err && /^(scores|pattern|values)\b/.test(err.field || "");
  say(part, mine ? err.message : root.dataset.local || "");
}

// The typed boxes' error line (and the boxes marked invalid), `text` or none.
function say(part, text) {
  const box = part("typed-error");
  box.textContent = text;
  box.hidden = !text;
  for (const id of ["typed-matrix", "typed-values"]) {
    if (text) part(id).setAttribute("aria-invalid", "true");
    else part(id).removeAttribute("aria-invalid");
  }
}

export function bind(root, { dispatch, getState }) {
  const part = within(root);
  const apply = () => {
    const kind = TYPED_KINDS.includes(part("typed-kind").value) ? part("typed-kind").value : "scores";
    const grid = parseGrid(part("typed-matrix").value);
    if (grid.error) return fail(`The matrix: ${grid.error}.`);
    const n = grid.matrix.length;
    if (grid.matrix[0].length !== n)
      return fail(
        `The matrix is ${n} × ${grid.matrix[0].length}: it needs one row and one column per position (S × S).`,
      );
    let values = null;
    if (part("typed-values").value.trim()) {
      const v = parseGrid(part("typed-values").value);
      if (v.error) return fail(`The values: ${v.error}.`);
      if (v.matrix.length !== n)
        return fail(`The values have ${v.matrix.length} rows for ${n} positions: give one row per key.`);
      values = v.matrix;
    }
    delete root.dataset.local;
    const typed = { kind, m: grid.matrix, values };
    const words = `${kind === "scores" ? "score" : "weight"} matrix typed in (${n} × ${n})${values ? " with values" : ""}`;
    dispatch(act.typedSet(typed, labelsFor(getState().ui.text, n), words));
  };
  const fail = (message) => {
    root.dataset.local = message;
    say(part, message);
  };
  part("typed-apply").addEventListener("click", apply);
  for (const id of ["typed-matrix", "typed-values"]) {
    part(id).addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        apply();
      }
    });
  }
}
