// The chapter's numbers, editable (the template's <details data-view="numbers">): X, W_Q, W_K and W_V of a model
// that reads x and weights and has numbers of its own (the textbook), as grids of number boxes (matrices.js). A
// number typed dispatches an edit; a box left empty or not a number is marked at its cell and named under the
// editors until a number is typed there. Their setting, link key and actions are numbersettings.js's declaration.

import { act } from "./actions.js";
import { numbersOf } from "./capabilities.js";
import { LABELS, renderMatrices } from "./matrices.js";
import { splitTokens } from "./masks.js";
import { modelInfo } from "./selectors.js";
import { within } from "./dom.js";

// The cells left empty or not a number ("x.1.0" -> what is in the box), per root: each is an error named at its
// cell until a number is typed there (the last run's numbers stay in force meanwhile). Cleared with the chapter's
// numbers.
const errorsOf = new WeakMap();

function cellErrors(root) {
  if (!errorsOf.has(root)) errorsOf.set(root, new Map());
  return errorsOf.get(root);
}

const cellLabel = (key) => {
  const [name, i, j] = key.split(".");
  return `${LABELS[name]} row ${Number(i) + 1} column ${Number(j) + 1}`;
};

export function deps(s) {
  return [s.ui.matrices, s.ui.model, s.ui.text, s.models, s.run.error];
}

export function render(root, s, dispatch) {
  const part = within(root);
  const numbers = numbersOf(modelInfo(s)); // a model whose x and weights the page edits: its own numbers
  const errors = cellErrors(root);
  root.hidden = !numbers;
  if (!numbers) errors.clear();
  if (!numbers || root.contains(document.activeElement)) return;
  renderMatrices(part("matrix-editors"), s.ui.matrices || numbers, splitTokens(s.ui.text), (name, i, j, raw) => {
    const key = `${name}.${i}.${j}`;
    if (raw.trim() === "" || !Number.isFinite(Number(raw))) {
      errors.set(key, raw);
      // this cell's error is the one that stands: an older run's message no longer names what is wrong
      if (s.run.error) dispatch(act.errorDismissed());
      showCellErrors(root);
      // under the editors: below the fold of a phone's drawer (the controls a modal over the views)
      if (root.closest('[aria-modal="true"]')) bringIntoSight(part("matrix-error"));
      return false;
    }
    errors.delete(key);
    showCellErrors(root);
    dispatch(act.matrixEntrySet(name, i, j, Number(raw), raw));
    return true;
  });
  showCellErrors(root);
}

function bringIntoSight(el) {
  const r = el.getBoundingClientRect();
  if (r.top < 0 || r.bottom > window.innerHeight) el.scrollIntoView({ block: "nearest" });
}

// Each errored cell: its box keeps what was typed, marked invalid; the line under the editors names the cells.
function showCellErrors(root) {
  const part = within(root);
  const errors = cellErrors(root);
  const editors = part("matrix-editors");
  const named = [];
  for (const [key, raw] of errors) {
    const label = cellLabel(key);
    const input = editors.querySelector(`input[aria-label="${label}"]`);
    if (!input) {
      errors.delete(key); // the matrix no longer has this cell (a shorter sequence)
      continue;
    }
    if (document.activeElement !== input) input.value = raw;
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-errormessage", "matrix-error");
    input.dataset.localError = "1";
    named.push(raw.trim() === "" ? `${label} is empty` : `${label} is not a number (“${raw}”)`);
  }
  for (const input of editors.querySelectorAll("input[data-local-error]")) {
    const still = [...errors.keys()].some((key) => input.getAttribute("aria-label") === cellLabel(key));
    if (!still) {
      input.removeAttribute("aria-invalid");
      delete input.dataset.localError;
    }
  }
  const msg = part("matrix-error");
  msg.hidden = !named.length;
  msg.textContent = named.length
    ? `${named.join("; ")}: type a number there. Until then the page shows the last numbers that ran.`
    : "";
}

export function bind(root, { dispatch }) {
  within(root)("matrices-reset").addEventListener("click", () => {
    cellErrors(root).clear();
    showCellErrors(root);
    dispatch(act.matricesReset());
  });
}
