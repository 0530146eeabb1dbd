// Reading a lesson's answer off the live /api/attention answer: one head's weights, a token's name, sums and
// rounding, shapes as the chapter prints them, the heads that score highest on a pattern, and the wording a touch
// device gets. Pure: no DOM; lessons.js and exercises.js share them.

export const RULE = 1e-4; // a sum within this of 1 "sums to 1"

// One head's weights (layer's index, head's index): a query row per position.
export const W = (r, layer = 0, head = 0) =>
  (r.layers.find((l) => l.index === layer) || r.layers[0]).heads[head].weights;

// A position's token, quoted, as the grids label it.
// Whether the large head's rows of the first two "the" are the same ("same") or not ("different").
export function theRows(r) {
  const [i, j] = r.tokens.flatMap((t, k) => (t === "the" ? [k] : []));
  return Array.from(W(r)[i]).every((v, k) => Math.abs(v - W(r)[j][k]) < 1e-5) ? "same" : "different";
}

export const tok = (r, i) => `“${r.tokens[i]}”`;

export const sum = (row) => Array.from(row).reduce((a, b) => a + b, 0);
export const round = (v, d = 3) => Number(v.toFixed(d));
export const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

// A shape as Python prints a tuple: "(5, 2)".
export const shapeText = (dims) => `(${Array.from(dims).join(", ")}${dims.length === 1 ? "," : ""})`;

// Numbers as NumPy prints a rounded row: "[0.23 0.241 0.265 0.264 0.]".
export const rowText = (row, d = 3) =>
  `[${Array.from(row, (v) => String(round(v, d)).replace(/^(-?\d+)$/, "$1.")).join(" ")}]`;

// Every [layer, head] of the result with score(weights) >= min, or the best one when none reaches it.
export function headsBy(r, score, min = 0.4) {
  const all = r.layers.flatMap((l) => l.heads.map((h) => [l.index, h.index, score(h.weights)]));
  const over = all.filter(([, , v]) => v >= min);
  const best = all.reduce((a, b) => (b[2] > a[2] ? b : a));
  return (over.length ? over : [best]).map(([l, h]) => [l, h]);
}

// The period of a repeated token sequence (the smallest L with tokens[i] = tokens[i + L] for every i), or null.
export function period(tokens) {
  for (let L = 1; L <= tokens.length / 2; L++)
    if (tokens.every((t, i) => i + L >= tokens.length || t === tokens[i + L])) return L;
  return null;
}

export const prevScore = (w) => mean(Array.from(w.slice(1), (row, i) => row[i]));
export const inductionScore = (L) => (w) =>
  mean(
    w
      .slice(L)
      .map((row, j) => row[j + 1])
      .filter((v) => v !== undefined),
  );

// The chapter's numbers as /api/models serves them (the textbook model's defaults), changed by `edit`, as a link.
export function textbookWith(edit, rest) {
  return (models) => {
    const d = models.find((m) => m.name === "textbook")?.defaults;
    if (!d) return `m=textbook&${rest}`;
    const mx = edit({ x: d.x, w_q: d.w_q, w_k: d.w_k, w_v: d.w_v });
    return `m=textbook&${rest}&mx=${encodeURIComponent(JSON.stringify(mx))}`;
  };
}

// n whitespace tokens w1 .. wn, as a link's text.
export const words = (n) => Array.from({ length: n }, (_, i) => `w${i + 1}`).join("+");

// A lesson's words on a touch device: it taps where a mouse hovers or clicks.
export function touchWords(text, touch) {
  if (!touch || !text) return text;
  return String(text)
    .replace(
      /\b[Hh]over(ing|s|ed)?\b/g,
      (m) =>
        (m[0] === "H" ? "Tap" : "tap") +
        (m.endsWith("ing") ? "ping" : m.endsWith("ed") ? "ped" : m.endsWith("s") ? "s" : ""),
    )
    .replace(
      /\b[Cc]lick(ing|s|ed)?\b/g,
      (m) =>
        (m[0] === "C" ? "Tap" : "tap") +
        (m.endsWith("ing") ? "ping" : m.endsWith("ed") ? "ped" : m.endsWith("s") ? "s" : ""),
    );
}
