// Matrices typed in, for a model that reads them (its /api/models entry `reads` scores: `given`; the box is typed.js):
// a score or weight matrix and optional values. `feature` is their one declaration (features.js): the matrix in ui
// and the link, the action that sets it, and the body such a model is sent instead of the attention body (typedBody).
// A model change drops it. A module of its own, importing only capabilities.js, so that the page's actions, gathered
// from it, bring no view along.

import { reads } from "./capabilities.js";

// The typed-in matrices of a link: {kind, m, values}, m a square grid of numbers, values one row per position;
// null when it is not that (the model's own example then runs).
export function parseTyped(raw) {
  const grid = (m) =>
    Array.isArray(m) &&
    m.length > 0 &&
    m.every((r) => Array.isArray(r) && r.length === m[0].length && r.every(Number.isFinite));
  try {
    const t = JSON.parse(raw);
    if (!t || !["scores", "pattern"].includes(t.kind) || !grid(t.m) || t.m[0].length !== t.m.length) return null;
    const values = grid(t.values) && t.values.length === t.m.length ? t.values : null;
    return { kind: t.kind, m: t.m, values };
  } catch {
    return null;
  }
}

// Row labels for S positions: the text's words where it has S of them, else x1..xS.
export function labelsFor(text, n) {
  const words = String(text || "")
    .trim()
    .split(/\s+/)
    .filter(Boolean);
  return words.length === n ? words.join(" ") : Array.from({ length: n }, (_, i) => `x${i + 1}`).join(" ");
}

// include items that need value vectors to mix: the server refuses them for typed-in matrices without values
const NEEDS_VALUES = ["contexts", "output", "value_norms", "head_contributions"];

// The body `req` for a model that reads typed-in matrices: the matrix as `scores` or `pattern` (none typed yet:
// the model's own example), `values` when given, and only the include items the server can make from them (no Q,
// K, V; contexts only with values).
export function typedBody(req, typed) {
  const { x: _x, weights: _w, options: _o, ...body } = req;
  const withValues = !!typed?.values;
  body.include = req.include.filter((k) => k !== "qkv" && (withValues || !NEEDS_VALUES.includes(k)));
  if (withValues && !body.include.includes("contexts")) body.include.push("contexts");
  if (typed) body[typed.kind] = typed.m;
  if (typed) body.text = labelsFor(req.text, typed.m.length); // a link may carry the matrix without its labels
  if (withValues) body.values = typed.values;
  return body;
}

const actions = {
  typedSet: (typed, text, words) => ({ type: "typedSet", typed, text, words }),
};

export const feature = {
  ui: {
    typed: null, // {kind: "scores"|"pattern", m, values|null}; null = the model's own example
  },
  link: {
    write(ui, p) {
      if (ui.typed) p.set("typed", JSON.stringify(ui.typed));
    },
    read: (p) => (p.has("typed") ? { typed: parseTyped(p.get("typed")) } : {}),
  },
  keep: () => ({}),
  actions,
  reduce: {
    typedSet: (s, a, { runWith }) => ({
      ...runWith(s, { typed: a.typed, text: a.text }, a.words, "typed-matrix"),
      draft: { ...s.draft, text: a.text },
    }),
  },
  // a model that reads typed-in matrices is sent this body instead (no batch, no source)
  replace: (req, ui, info) => (reads(info, "scores") ? typedBody(req, ui.typed) : null),
};
