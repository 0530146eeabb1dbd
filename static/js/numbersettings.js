// The chapter's numbers edited: X, W_Q, W_K and W_V of a model that reads x and weights and has numbers of its own
// (capabilities.js numbersOf; the textbook), edited in the number editors (numbers.js, matrices.js). `feature` is
// their one declaration (features.js): the edited numbers in ui and the link, the actions of an edit and of the
// chapter's numbers restored, X fitted to a new sequence's length, and the body's x and weights. A model change
// drops them (the new model's own numbers, if any). A module of its own, importing only capabilities.js, so that the
// page's actions, gathered from it, bring no view along.

import { numbersOf } from "./capabilities.js";

export const MATRIX_NAMES = ["x", "w_q", "w_k", "w_v"];

// A copy of the matrices with one number replaced; a value that is not a finite number is refused (null).
export function setEntry(matrices, name, i, j, raw) {
  const v = Number(raw);
  if (raw === "" || !Number.isFinite(v)) return null;
  const next = Object.fromEntries(MATRIX_NAMES.map((k) => [k, matrices[k].map((r) => [...r])]));
  next[name][i][j] = v;
  return next;
}

// Resize a matrix to n rows: extra rows are zeros, missing rows are dropped.
export function fitRows(m, n) {
  const width = m[0]?.length ?? 1;
  return Array.from({ length: n }, (_, i) => (m[i] ? [...m[i]] : new Array(width).fill(0)));
}

// The edited numbers of a link: every matrix a row and every row a number (the editors and the request read
// m.x[0]); null when they are not that (the model's own numbers then run).
export function parseMatrices(raw) {
  try {
    const m = JSON.parse(raw);
    const ok = MATRIX_NAMES.every(
      (k) =>
        Array.isArray(m[k]) &&
        m[k].length > 0 &&
        m[k].every((r) => Array.isArray(r) && r.length > 0 && r.every((v) => typeof v === "number")),
    );
    return ok ? Object.fromEntries(MATRIX_NAMES.map((k) => [k, m[k]])) : null;
  } catch {
    return null;
  }
}

const actions = {
  matrixEntrySet: (name, i, j, value, raw) => ({ type: "matrixEntrySet", name, i, j, value, raw }),
  matricesReset: () => ({ type: "matricesReset" }),
};

export const feature = {
  ui: {
    matrices: null, // {x, w_q, w_k, w_v} once a number is edited; null = the model's own
  },
  link: {
    write(ui, p) {
      if (ui.matrices) p.set("mx", JSON.stringify(ui.matrices));
    },
    read: (p) => (p.has("mx") ? { matrices: parseMatrices(p.get("mx")) } : {}),
  },
  keep: () => ({}), // the new model's own numbers
  // a new sequence of n words: X gets a row each (zeros for a new position), the weights stay
  newText: (ui, n) => (ui.matrices ? { matrices: { ...ui.matrices, x: fitRows(ui.matrices.x, n) } } : {}),
  actions,
  reduce: {
    matrixEntrySet: (s, a, { runWith }) => {
      const base = s.ui.matrices || numbersOf(s.models.find((m) => m.name === s.ui.model));
      const matrices = base && setEntry(base, a.name, a.i, a.j, a.value);
      if (!matrices) return s;
      const words = `${a.name.toUpperCase()}[${a.i + 1}][${a.j + 1}] set to ${a.raw ?? a.value}`;
      return runWith(s, { matrices }, words, "matrix-editors");
    },
    matricesReset: (s, _a, { runWith }) =>
      runWith(s, { matrices: null }, "the chapter's numbers restored", "matrices-reset"),
  },
  request: (ui) =>
    ui.matrices
      ? { x: ui.matrices.x, weights: { w_q: ui.matrices.w_q, w_k: ui.matrices.w_k, w_v: ui.matrices.w_v } }
      : {},
  extent: (body) => (body.x ? { queries: body.x.length } : {}), // a row of X a position
  body: ["x", "weights"], // no reach: every body the page sends carries them, and they set an answer's size
  errors: { x: "matrix-editors", weights: "matrix-editors" },
};
