// Which models the Long input panel offers for a text of a given length, and what it says of the others. A model
// with positions (/api/models' max_positions, or max_tokens) takes no more tokens than it has; one without any (the
// random layer) takes any length up to the server's run limit. A text of n words is at least n tokens, so a model
// whose positions are fewer than the text's words is left out, named in one line with its limit. A model with
// positions and a text of its own can be filled to them: its text repeated as often as its tokens fit.

const GIVEN = ["weights", "scores", "pattern"]; // what a model reads that a person types in: it computes no run

// The models a long run can use at all: they read text and do not fix their matrices (textbook) or need them
// (custom's weights, given's scores or pattern).
export function runnable(models) {
  return (models || []).filter((m) => m.reads?.includes("text") && !GIVEN.some((r) => m.reads.includes(r)));
}

// A model's positions: how many tokens it takes, or null for any length.
export function positionsOf(model) {
  const p = model.max_positions ?? model.max_tokens;
  return Number.isInteger(p) && p > 0 ? p : null;
}

// The runnable models for a text of `words` words: {offered: [model], absent: [{name, positions}]}.
export function longChoice(models, words) {
  const offered = [];
  const absent = [];
  for (const m of runnable(models)) {
    const p = positionsOf(m);
    if (p === null || p >= words) offered.push(m);
    else absent.push({ name: m.name, positions: p });
  }
  return { offered, absent };
}

// One line naming the models left out and their limits ("" when none is).
export function absentLine(absent, words) {
  if (!absent.length) return "";
  const names = absent.map((a) => `${a.name} (${a.positions.toLocaleString("en")} positions)`).join(", ");
  const n = words.toLocaleString("en");
  const why = "A model takes no more tokens than its positions; fill one to them with its button.";
  return `Not offered for ${n} words: ${names}. ${why}`;
}

// The models a button fills to their positions: those with positions and a text of their own.
export function fillable(models) {
  return runnable(models).filter((m) => positionsOf(m) !== null && m.default_text);
}

// `text` (which the model reads as `tokens` tokens) repeated as often as its tokens fit in `positions`: each copy
// counts all of its tokens, the model's own added ones too, so the whole stays within them.
export function fillText(text, tokens, positions) {
  const copies = Math.max(1, Math.floor(positions / Math.max(1, tokens)));
  const t = text.endsWith("\n") || text.endsWith(" ") ? text : `${text} `;
  return t.repeat(copies).trimEnd();
}
