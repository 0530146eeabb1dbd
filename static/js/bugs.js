// The chapter's classic bugs, computed on purpose (the request's `demo_bug`), and the sums that give one away.
// When a bug is on, the heads panel carries a red WRONG banner with the server's own note, and the large head shows
// its row and column sums: softmax over the keys makes every row sum to 1; softmax over the queries makes the
// columns sum to 1 instead. Pure helpers on top (a test imports them); the render functions only draw.
//
// It is also the "Show a classic bug" control of the form (the template's <div data-view="bugs">, templates/bugs.html):
// `feature` is its one declaration (features.js): its setting, link key, action, reducer case and body field; render
// and bind draw and wire its select.

import { node, within } from "./dom.js";
import { pieceQuote } from "./piece.js";
import { pos } from "./positions.js";

export const BUGS = ["softmax_over_queries", "flipped_mask", "norm_over_sequence"]; // what `demo_bug` takes

const actions = {
  bugSet: (bug, label) => ({ type: "bugSet", bug, label }), // label: the menu's words for it
};

export const feature = {
  ui: { bug: null }, // one of BUGS: a classic bug computed on purpose (never the default); kept on a model change
  link: {
    write(ui, p) {
      if (ui.bug) p.set("bug", ui.bug);
    },
    read: (p) => (BUGS.includes(p.get("bug")) ? { bug: p.get("bug") } : {}),
  },
  actions,
  reduce: {
    bugSet: (s, a, { runWith }) => {
      const bug = BUGS.includes(a.bug) ? a.bug : null;
      return runWith(s, { bug }, bug ? `classic bug on: ${a.label}` : "classic bug off", "bug-select");
    },
  },
  request: (ui) => (ui.bug ? { demo_bug: ui.bug } : {}),
  body: ["demo_bug"],
  // the analyses of the code on screen carry it (intervene, compare, perturb, a pinned side); head types, top heads
  // and decoding run the correct code whatever the view shows, and it changes no answer's size
  reach: "claims",
  errors: { demo_bug: "bug-select" },
};

export function deps(s) {
  return [s.ui.bug];
}

export function render(root, s) {
  within(root)("bug-select").value = s.ui.bug || "";
}

export function bind(root, { dispatch }) {
  within(root)("bug-select").addEventListener("change", (e) =>
    dispatch(actions.bugSet(e.target.value, e.target.selectedOptions[0].textContent)),
  );
}

export const BUG_LABELS = {
  softmax_over_queries: "softmax over queries",
  flipped_mask: "flipped mask (True read as blocked)",
  norm_over_sequence: "norm over the sequence axis",
};
export const SUM_TOLERANCE = 1e-3; // a sum within this of 1 reads as 1
export const MAX_SUMS_SHOWN = 24; // beyond this many positions only the extremes are listed

// Σ over keys of each query row.
export function rowSums(m) {
  return m.map((row) => row.reduce((a, b) => a + b, 0));
}

// Σ over queries of each key column.
export function columnSums(m) {
  const out = new Array(m[0]?.length ?? 0).fill(0);
  for (const row of m) row.forEach((v, k) => (out[k] += v));
  return out;
}

// How many of these sums are 1 (within SUM_TOLERANCE), and the largest |sum − 1|.
export function sumsReport(sums) {
  let ones = 0;
  let worst = 0;
  for (const s of sums) {
    const d = Math.abs(s - 1);
    if (d <= SUM_TOLERANCE) ones += 1;
    if (d > worst) worst = d;
  }
  return { ones, total: sums.length, worst };
}

// Eligibility as drawn: a flipped mask put its weight on the masked cells, so under that bug every cell is drawn
// coloured (hatching would hide exactly the weight that leaked).
export function drawnEligibility(eligible, bug) {
  return bug === "flipped_mask" ? eligible.map((row) => row.map(() => true)) : eligible;
}

// The red banner: shown only with a bug, carrying the server's note.
export function renderBugBanner(el, demoBug) {
  el.hidden = !demoBug;
  document.body.classList.toggle("wrong", !!demoBug);
  if (!demoBug) {
    el.replaceChildren();
    el.dataset.bug = "";
    return;
  }
  el.dataset.bug = demoBug.name;
  const extra =
    {
      flipped_mask: " Masked cells are drawn coloured here, to show the weight that went onto them.",
      norm_over_sequence:
        " The map below is still triangular: a heatmap cannot show this leak. Run Claims' perturbation, which runs" +
        " this same code, to find it.",
    }[demoBug.name] ?? " The large head lists its row and column sums.";
  const rest =
    demoBug.name === "norm_over_sequence"
      ? ""
      : " The claims, interventions and comparisons run this same code; a panel that runs the correct code says so.";
  el.replaceChildren(
    node("strong", {}, `WRONG: ${BUG_LABELS[demoBug.name] || demoBug.name}. `),
    node("span", {}, demoBug.note),
    node("span", { className: "bug-extra" }, `${extra}${rest}`),
  );
}

// The line a panel shows while the view runs classic bug `bug` (its name; null: none) and what the panel asked
// carries none: its analysis runs the correct code (its endpoint takes no demo_bug), so its answer is not the view's.
// `keys`: what the panel's slots asked (effects.js: each body sent, as JSON), null where a slot asked nothing. Null
// when there is nothing to say.
export function correctCodeNote(bug, keys) {
  const asked = keys.filter(Boolean);
  if (!bug || !asked.length || asked.every((k) => k.includes('"demo_bug":'))) return null;
  return `Runs the correct code, not the view's classic bug (${BUG_LABELS[bug] || bug}): this analysis takes no demo_bug.`;
}

// The panel `section`'s correct-code line (correctCodeNote), kept under its heading; hidden when `note` is null.
export function renderCorrectCode(section, note) {
  let p = section.querySelector(":scope > [data-role=correct-code]");
  if (!p && !note) return;
  if (!p) {
    p = node("p", { className: "correct-code small" });
    p.dataset.role = "correct-code";
    p.dataset.testid = "correct-code";
    const head = section.querySelector(":scope > .panel-head");
    if (head) head.after(p);
    else section.prepend(p);
  }
  p.hidden = !note;
  if (p.textContent !== (note || "")) p.textContent = note || "";
}

// The rows whose sum Hide sinks sets (the Display option: `hidden` key columns shown as 0), each row index mapped to
// why: "hidden" when every eligible key of the row is hidden (nothing is left to sum to 1: it sums to 0), "kept"
// when some are and the rows are not renormalised (what is left sums to less than 1). Rows without a hidden key
// are not in it. A row with no eligible key at all (all masked) is the masks', not the option's.
export function sinkRows(eligible, hidden, renormalised = true) {
  const out = new Map();
  if (!hidden?.length || !eligible) return out;
  const gone = new Set(hidden);
  eligible.forEach((row, q) => {
    const keys = row.flatMap((ok, k) => (ok ? [k] : []));
    const lost = keys.filter((k) => gone.has(k)).length;
    if (keys.length && lost === keys.length) out.set(q, "hidden");
    else if (lost && !renormalised) out.set(q, "kept");
  });
  return out;
}

// What a row-sums line says of the rows Hide sinks set (sinkRows), or "".
function sinkWords(expected) {
  const count = (why) => [...expected.values()].filter((w) => w === why).length;
  const rows = (n) => `${n} row${n === 1 ? "" : "s"}`;
  const parts = [];
  const hidden = count("hidden");
  const kept = count("kept");
  if (hidden) parts.push(`${rows(hidden)} ${hidden === 1 ? "has" : "have"} every key hidden by Hide sinks (Σ 0)`);
  if (kept) parts.push(`${rows(kept)} lost weight to the hidden keys, not renormalised (Σ < 1)`);
  return parts.join("; ");
}

// One line of sums. `claim`: these sums are meant to be 1 (a row of softmax over the keys), so one that is not is
// wrong and drawn red. Column sums claim nothing: a column totals how much every query reads that key, and that is
// not 1 in a correct map, so they are drawn neutral (class "free"), never in the bug demo's red. `expected`: the
// rows (sinkRows) whose sum the display option sets, counted apart and never red.
function sumLine(label, sums, tokens, what, claim, expected = new Map()) {
  const claimed = sums.filter((_, i) => !expected.has(i));
  const rep = sumsReport(claimed);
  const state = rep.ones === rep.total ? "all-one" : claim ? "not-one" : "free";
  const p = node("p", { className: `sums-line ${state}` });
  p.dataset.expected = String(expected.size);
  p.append(node("strong", {}, `${label}: `));
  const said =
    rep.ones === rep.total
      ? expected.size
        ? `${rep.ones} of ${sums.length} ${what}s sum to 1; ${sinkWords(expected)} `
        : `every ${what} sums to 1 `
      : claim
        ? `${rep.ones} of ${sums.length} ${what}s sum to 1 (largest |Σ − 1| ${rep.worst.toFixed(3)})` +
          `${expected.size ? `; ${sinkWords(expected)}` : ""} `
        : `not meant to sum to 1: each is the total weight all queries put on that key (how much it is read) `;
  p.append(node("span", {}, said));
  if (sums.length <= MAX_SUMS_SHOWN) {
    const list = node("span", { className: "sums-values" });
    sums.forEach((s, i) => {
      const cls = Math.abs(s - 1) <= SUM_TOLERANCE ? "one" : expected.has(i) ? "sinks" : claim ? "off" : "free";
      const v = node("span", { className: cls }, s.toFixed(3));
      v.title = `${what} ${pos(i)} ${pieceQuote(tokens[i] ?? "")}${expected.has(i) ? ": set by Hide sinks" : ""}`;
      list.append(v);
    });
    p.append(list);
  }
  return p;
}

// Row and column sums of the large head's weights. view: {weights, tokens, keyTokens, bug, eligible, hidden,
// renormalised} (the last three: the rows Hide sinks sets, sinkRows).
export function renderSums(el, view) {
  if (!view.weights) {
    el.replaceChildren();
    el.hidden = true;
    return;
  }
  el.hidden = false;
  const rows = rowSums(view.weights);
  const cols = columnSums(view.weights);
  el.dataset.rowSums = JSON.stringify(rows);
  el.dataset.columnSums = JSON.stringify(cols);
  el.classList.toggle("bug", !!view.bug);
  const expected = sinkRows(view.eligible, view.hidden, view.renormalised);
  el.replaceChildren(
    sumLine("Row sums (over keys)", rows, view.tokens, "row", true, expected),
    sumLine("Column sums (over queries)", cols, view.keyTokens || view.tokens, "column", false),
  );
}
