// The lessons: the chapter's exercises and the lab's three steps as guided tasks, as data (lesson.js draws them).
// Each lesson sets up its view (`setup`: a link's query string in state.js's form, or a function of the
// /api/models list that makes one), asks (`prompt`), and checks the learner's answer against the live
// /api/attention answer on screen, never against a number written here: `expected(r)` reads the answer it checks
// from the result r. What the learner gives (`ask`):
//
//   number   a number typed in (0.25, 1/4, 1/√2)           expected(r) -> the number; tol: how far off still counts
//   shape    a shape typed in ((4, 8, 32, 16) or 4 8 32 16)  expected(r) -> [dims]
//   choice   one of `choices` ([value, words])              expected(r) -> the value
//   cell     a click on a cell of the large head or the eligibility grid   expected(r) -> [[q, k], ...] that count
//   head     a click on a head card                          expected(r) -> [[layer, head], ...] that count
//   toggle   a change the learner makes with the page's own controls      holds(r, s) -> whether the page now does it
//
// hint(answer, want, r, s) says what to look at when the answer is wrong; attnlab(r, s) is attnlab's value, shown
// beside `chapter`, the chapter's printed output where it prints one for the task (null: it prints none). `hides`:
// what on the page gives the answer away, hidden while the lesson is unanswered (giveaway.js GIVEAWAYS names them).
// `reads`: "perturb" when the answer is the Test a claim panel's (/api/perturb), not the run's; a lesson that reads
// an answer of its own says where (`live(s)`) and why it cannot check yet (`waits(s)`). The chapter's own tasks are
// in exercises.js, the training lab's in trainlessons.js. Pure: no DOM.

import { CHAPTER_LESSONS } from "./exercises.js";
import {
  RULE,
  W,
  headsBy,
  inductionScore,
  mean,
  period,
  prevScore,
  round,
  sum,
  textbookWith,
  theRows,
  tok,
} from "./lessonread.js";
import { TRAIN_LESSONS } from "./trainlessons.js";

export { period };

const EXAMPLE = "m=textbook&causal=1&pad=4"; // the worked example with its own masks
const SIX = "m=random&t=a+b+c+d+e+f"; // six positions

const TOPIC_LESSONS = [
  {
    id: "padding",
    title: "Padding: what it removes",
    setup: EXAMPLE,
    ask: "cell",
    prompt:
      "Click the one cell that padding removes although causal masking alone would allow it (in the eligibility grid or the large head).",
    expected: (r) =>
      r.reasons.padding
        .flatMap((row, q) => row.map((p, k) => (p && !r.reasons.causal[q][k] ? [q, k] : null)))
        .filter(Boolean),
    hint: (a, want, r) =>
      r.reasons.causal[a.q][a.k]
        ? "causal masking already removes that cell (a later key): look on or below the diagonal."
        : "that cell is not padded: padding removes the padded token's key column (the P cells).",
    attnlab: (r, s, want) => want.map(([q, k]) => `query ${tok(r, q)} → key ${tok(r, k)}`).join(", "),
  },
  {
    id: "most-weight",
    title: "The worked example: where query x4 looks",
    setup: EXAMPLE,
    ask: "cell",
    prompt: "Which key does query x4 give the most weight? Click its cell.",
    expected: (r) => {
      const row = W(r)[3];
      const best = Array.from(row).reduce((b, v, k) => (v > row[b] ? k : b), 0);
      return [[3, best]];
    },
    hint: (a, want, r) =>
      a.q !== 3
        ? `that cell is in row ${tok(r, a.q)}: the question is about row x4.`
        : `key ${tok(r, a.k)} gets ${round(W(r)[3][a.k], 4)}; another key of row x4 gets more. Hover the row's cells: they differ in the third decimal.`,
    attnlab: (r, s, want) => `key ${tok(r, want[0][1])}: ${round(W(r)[3][want[0][1]], 4)}`,
  },
  {
    id: "flipped-mask",
    title: "Classic bug: the flipped mask",
    setup: "m=textbook&causal=1&bug=flipped_mask&all_masked=zero",
    ask: "cell",
    prompt:
      "The mask is read the wrong way round (True taken as blocked). Click a cell where a query takes weight from a key after it.",
    expected: (r) =>
      W(r)
        .flatMap((row, q) => Array.from(row).map((v, k) => (k > q && v > 0 ? [q, k] : null)))
        .filter(Boolean),
    hint: (a, want, r) =>
      a.k <= a.q
        ? "that key is at or before its query, which causal masking allows: look above the diagonal."
        : "that cell has no weight.",
    attnlab: (r, s, want) =>
      `${want.length} cells above the diagonal carry weight; row ${tok(r, r.tokens.length - 1)} gets none`,
  },
  {
    id: "softmax-axis",
    title: "Classic bug: softmax over queries",
    setup: "m=textbook&causal=1&bug=softmax_over_queries",
    ask: "choice",
    prompt: "The softmax is taken over the wrong axis. Which sums to 1 now?",
    choices: [
      ["rows", "each row (one query's weights)"],
      ["columns", "each column (one key's weights)"],
      ["both", "both"],
      ["neither", "neither"],
    ],
    expected: (r) => {
      const w = W(r);
      const rows = w.every((row, q) => !r.eligible[q].some(Boolean) || Math.abs(sum(row) - 1) < RULE);
      const cols = w[0].every(
        (_, k) => !r.eligible.some((e) => e[k]) || Math.abs(sum(w.map((row) => row[k])) - 1) < RULE,
      );
      return rows ? (cols ? "both" : "rows") : cols ? "columns" : "neither";
    },
    hint: (a, want, r) =>
      `add up row x2 (${round(sum(W(r)[1]))}) and column x1 (${round(sum(W(r).map((row) => row[0])))}).`,
    attnlab: (r) =>
      `row sums ${W(r)
        .map((row) => round(sum(row), 2))
        .join(", ")}`,
  },
  {
    id: "scaling",
    title: "Why divide by √d_k (Figure 21.5)",
    setup: `${SIX}&d_model=256&heads=1&causal=0&scale=0`,
    ask: "choice",
    prompt:
      "Scaling is off and d_k = 256. Is each query's largest weight near 1 (one key takes it) or near 1/6 (spread over the six keys)?",
    choices: [
      ["one", "near 1: one key takes nearly everything"],
      ["spread", "near 1/6: spread evenly"],
    ],
    expected: (r) => (mean(W(r).map((row) => Math.max(...row))) > 0.6 ? "one" : "spread"),
    hint: () =>
      "read each row's largest weight in the large head; unscaled scores grow like √d_k, so the softmax saturates. Switch scaling on to compare.",
    attnlab: (r) =>
      `d_k = ${r.config.d_head}: mean largest weight per row ${round(mean(W(r).map((row) => Math.max(...row))))} (scaling ${r.config.scale ? "on" : "off"})`,
  },
  {
    id: "kv-cache",
    title: "What a KV cache holds",
    setup: `${SIX}&heads=4&kv_heads=2`,
    ask: "number",
    prompt:
      "Decoding keeps each past token's keys and values. How many numbers per token does this model's cache hold (all layers)?",
    expected: (r) => r.config.n_layers * r.config.n_kv_heads * (r.config.d_head + r.config.d_v),
    hint: (a, want, r) =>
      `keys and values are stored per K/V group, not per query head: layers × K/V heads × (d_k + d_v), here ${r.config.n_layers} × ${r.config.n_kv_heads} × (${r.config.d_head} + ${r.config.d_v}).`,
    attnlab: (r, s, want) =>
      `${want} numbers per token (${r.config.n_heads} query heads share ${r.config.n_kv_heads} K/V groups)`,
  },
  {
    id: "two-heads",
    title: "Two heads, A and B (Figure 21.4)",
    setup: `${SIX}&heads=2&causal=1`,
    ask: "head",
    prompt:
      "Two heads read the same tokens with their own weights. Click the head whose last query “f” gives more weight to the first token “a”.",
    expected: (r) => {
      const w = r.layers[0].heads.map((h) => h.weights[r.tokens.length - 1][0]);
      return [[r.layers[0].index, w.indexOf(Math.max(...w))]];
    },
    hint: () => "hover row “f”, column “a” in each head card and compare the weights.",
    attnlab: (r) =>
      r.layers[0].heads.map((h) => `head ${h.index}: ${round(h.weights[r.tokens.length - 1][0], 4)}`).join(" · "),
  },
  {
    id: "previous-token",
    title: "A previous-token head",
    setup: "m=induction&layer=all",
    ask: "head",
    prompt: "Click a previous-token head: one whose every query looks at the token just before it.",
    expected: (r) => headsBy(r, prevScore),
    hint: () => "a previous-token head's map is a bright line just below the diagonal.",
    attnlab: (r, s, want) => want.map(([l, h]) => `L${l} H${h}`).join(", "),
  },
  {
    id: "induction-head",
    title: "An induction head",
    setup: "m=induction&layer=all",
    ask: "head",
    prompt:
      "The text repeats. Click an induction head: on the repeat, each query looks at the token that followed its earlier copy.",
    expected: (r) => headsBy(r, inductionScore(period(r.tokens) || 1)),
    hint: () =>
      "an induction head's map has a bright stripe in the second half, one step right of the diagonal that runs from the first copy; it needs an earlier layer's previous-token head.",
    attnlab: (r, s, want) => want.map(([l, h]) => `L${l} H${h}`).join(", "),
  },
  {
    id: "uniform",
    title: "Equal scores, equal weights",
    setup: textbookWith((m) => ({ ...m, w_q: m.w_q.map((row) => row.map(() => 0)) }), "causal=1"),
    ask: "number",
    prompt: "W_Q is all zeros, so every score is 0. What weight does query x4 give each of its keys?",
    expected: (r) => W(r)[3][0],
    hint: (a, want, r) =>
      `softmax of equal scores is uniform over the eligible keys: count row x4's (${r.eligible[3].filter(Boolean).length}).`,
    attnlab: (r) => `row x4: ${Array.from(W(r)[3], (v) => round(v)).join(", ")}`,
  },
  {
    id: "window",
    title: "A sliding window",
    setup: `${SIX}&causal=1&window=2`,
    ask: "number",
    prompt: "Causal masking and a sliding window of 2 over six positions. How many pairs are eligible?",
    hides: ["pairs"],
    expected: (r) => r.pairs.eligible,
    hint: () =>
      "with causal on, a window of 2 keeps each query itself and the one position before it; the first position has no one before it. Count the ✓ in the eligibility grid.",
    attnlab: (r) => `${r.pairs.eligible} eligible of ${r.pairs.total}`,
  },
  {
    id: "block-cell",
    title: "Blocking one pair",
    setup: EXAMPLE,
    ask: "toggle",
    prompt: "Block the single pair query x3 → key x1 (click that cell in the eligibility grid), then press Check.",
    holds: (r) => !r.eligible[2][0] && W(r)[2][0] === 0 && Math.abs(sum(W(r)[2]) - 1) < RULE,
    hint: (a, want, r) =>
      r.eligible[2][0]
        ? "x3 → x1 is still eligible: click row x3, column x1 of the eligibility grid."
        : "row x3 no longer sums to 1: leave x3 one key.",
    attnlab: (r) => `row x3: ${Array.from(W(r)[2], (v) => round(v)).join(", ")} (sums to ${round(sum(W(r)[2]))})`,
  },
  {
    id: "no-positions",
    title: "Without positions, a bag of tokens",
    setup: "m=random&t=the+cat+sat+on+the+mat&causal=0",
    ask: "choice",
    prompt: "This layer has no position information. Are the rows of the first “the” and the second “the” the same?",
    choices: [
      ["same", "the same"],
      ["different", "different"],
    ],
    expected: theRows,
    hint: () =>
      "the same token gives the same query, and both rows see the same keys: compare the two “the” rows in the large head.",
    attnlab: (r) => {
      const [i, j] = r.tokens.flatMap((t, k) => (t === "the" ? [k] : []));
      return `the two “the” rows differ by at most ${Math.max(...Array.from(W(r)[i], (v, k) => Math.abs(v - W(r)[j][k]))).toExponential(1)}`;
    },
  },
  {
    id: "scale-factor",
    title: "The scale factor 1/√d_k",
    setup: EXAMPLE,
    ask: "number",
    prompt: "The worked example's queries and keys have d_k = 2 features. By what factor is each dot product scaled?",
    expected: (r) => r.config.scale_factor,
    hint: (a, want, r) => `1/√d_k with d_k = ${r.config.d_head} (0.5 would be 1/d_k).`,
    attnlab: (r) => `scale_factor = ${round(r.config.scale_factor, 4)}`,
  },
  {
    id: "context",
    title: "A context vector",
    setup: EXAMPLE,
    ask: "number",
    prompt: "x2's context is its weights times the value rows V. What is its first number? Give 3 decimals.",
    expected: (r) => r.layers[0].heads[0].contexts[1][0],
    hint: (a, want, r) =>
      `context x2 = ${round(W(r)[1][0])} · v1 + ${round(W(r)[1][1])} · v2 (V = X · W_V: its first column).`,
    attnlab: (r) => `context x2 = [${Array.from(r.layers[0].heads[0].contexts[1], (v) => round(v, 4)).join(", ")}]`,
  },
  {
    id: "empty-row",
    title: "A row with no key",
    setup: "m=textbook&causal=1&block=0-0&all_masked=zero",
    ask: "number",
    prompt:
      "Query x1 has no eligible key left (causal, and x1 → x1 blocked); the policy is “zero”. What does its row of weights sum to?",
    expected: (r) => sum(W(r)[0]),
    hint: () =>
      "with no eligible key there is nothing to normalise over, so the policy “zero” sets every weight of the row to 0 (not a uniform row).",
    attnlab: (r) => `row x1: ${Array.from(W(r)[0]).join(", ")}`,
  },
];

export const LESSONS = [...CHAPTER_LESSONS, ...TOPIC_LESSONS, ...TRAIN_LESSONS];

export function lessonOf(id) {
  return LESSONS.find((l) => l.id === id) || null;
}

// ---- checking -------------------------------------------------------------------------------------------------

// "0.25", "1/4", "1/√2", "0,25" -> the number; NaN when it is none.
export function parseNumber(raw) {
  const t = String(raw ?? "")
    .trim()
    .replace(",", ".")
    .replace(/√\s*([\d.]+)/g, (_, v) => String(Math.sqrt(Number(v))));
  const m = /^([-+]?[\d.]+(?:e[-+]?\d+)?)\s*(?:\/\s*([\d.]+(?:e[-+]?\d+)?))?$/i.exec(t);
  if (!m) return Number.NaN;
  return m[2] === undefined ? Number(m[1]) : Number(m[1]) / Number(m[2]);
}

// "(4, 8, 32, 16)", "4 8 32 16", "4x8" -> [4, 8, 32, 16]; null when it is not a list of whole numbers.
export function parseShape(raw) {
  const parts = String(raw ?? "")
    .replace(/[()[\]]/g, " ")
    .split(/[\s,×x*]+/)
    .filter(Boolean);
  if (!parts.length || !parts.every((p) => /^\d+$/.test(p))) return null;
  return parts.map(Number);
}

// How far a typed number may be from the answer: whole numbers exactly, others to about 3 decimals.
export function tolerance(lesson, want) {
  return lesson.tol ?? (Number.isInteger(want) ? 0 : 0.002);
}

// The lesson's model, from its link.
export function modelOfSetup(setup) {
  return new URLSearchParams(setup).get("m");
}

// The link (a query string without "?") that sets the lesson up on this server's models.
export function setupOf(lesson, models = []) {
  return typeof lesson.setup === "function" ? lesson.setup(models) : lesson.setup;
}

// Why the page cannot check now (its run is still coming, failed, or is of another model), or null.
export function notReady(lesson, s) {
  if (lesson.live) return lesson.waits(s);
  const model = modelOfSetup(setupOf(lesson, s.models));
  if (!s.models.some((m) => m.name === model))
    return `this lesson runs on the ${model} model, which this server does not serve.`;
  if (s.ui.model !== model) return `this lesson is about the ${model} model: open it again from the list.`;
  if (s.run.status === "error")
    return "the page could not compute this view (see the banner): fix what it names, then check again.";
  if (!s.run.result || s.run.status === "loading" || s.run.answered !== s.run.want)
    return "the page is still computing this view: check again once it is drawn.";
  if (lesson.reads === "perturb") {
    const p = s.panels?.perturb;
    if (!s.ui.perturbOn) return "Test a claim is off: open the lesson again from the list.";
    if (p?.status === "error") return `Test a claim could not run: ${p.message}`;
    if (!p?.result) return "Test a claim is still computing: check again once its bars are drawn.";
  }
  return null;
}

// The answer the lesson reads: the run on screen, or (reads "perturb") the Test a claim panel's.
export function liveAnswer(lesson, s) {
  if (lesson.live) return lesson.live(s);
  return lesson.reads === "perturb" ? (s.panels?.perturb?.result ?? null) : s.run.result;
}

function matches(lesson, answer, want) {
  if (lesson.ask === "number") return Math.abs(parseNumber(answer) - want) <= tolerance(lesson, want);
  if (lesson.ask === "choice") return answer === want;
  if (lesson.ask === "shape") {
    const got = parseShape(answer);
    return !!got && got.length === want.length && got.every((v, i) => v === want[i]);
  }
  if (lesson.ask === "cell") return want.some(([q, k]) => answer.q === q && answer.k === k);
  return want.some(([l, h]) => answer.layer === l && answer.head === h);
}

// The learner's answer checked against the live answer on screen (s.run.result): {ok, text}; `text` is "Correct."
// or what to look at.
export function checkAnswer(lesson, answer, s) {
  const wait = notReady(lesson, s);
  if (wait) return { ok: false, text: `Not checked: ${wait}` };
  const r = liveAnswer(lesson, s);
  if (lesson.ask === "toggle") {
    return lesson.holds(r, s)
      ? { ok: true, text: "Correct." }
      : { ok: false, text: `Not yet: ${lesson.hint(null, null, r, s)}` };
  }
  if (answer == null || answer === "")
    return {
      ok: false,
      text: `Not yet: ${lesson.ask === "cell" ? "click a cell" : lesson.ask === "head" ? "click a head card" : "give an answer"} first.`,
    };
  if (lesson.ask === "number" && !Number.isFinite(parseNumber(answer)))
    return { ok: false, text: "Not yet: type a number (0.25, 1/4 or 1/√2)." };
  if (lesson.ask === "shape" && !parseShape(answer))
    return { ok: false, text: "Not yet: type whole numbers, one per axis (4 8 32 16 or (4, 8, 32, 16))." };
  const want = lesson.expected(r);
  if (matches(lesson, answer, want)) return { ok: true, text: "Correct." };
  return { ok: false, text: `Not yet: ${lesson.hint(answer, want, r, s)}` };
}

// attnlab's own value for the lesson, from the live answer (what the panel shows beside the chapter's).
export function attnlabValue(lesson, s) {
  const r = liveAnswer(lesson, s);
  if (!r || notReady(lesson, s)) return "";
  return lesson.attnlab(r, s, lesson.ask === "toggle" ? null : lesson.expected(r));
}

// An answer that counts and one that does not, as a learner would give them, from the live answer r (liveAnswer:
// what the panel's "show attnlab's answer" and the tests use). A toggle is answered on the page: none.
export function sampleAnswers(lesson, r) {
  if (lesson.ask === "toggle") return { right: null, wrong: null };
  const want = lesson.expected(r);
  if (lesson.ask === "number") return { right: String(round(want, 4)), wrong: String(round(want + 1, 4)) };
  if (lesson.ask === "shape")
    return { right: want.join(" "), wrong: [...want.slice(0, -1), want.at(-1) + 1].join(" ") };
  if (lesson.ask === "choice") return { right: want, wrong: lesson.choices.map(([v]) => v).find((v) => v !== want) };
  if (lesson.ask === "cell") {
    const S = r.tokens.length;
    const cells = Array.from({ length: S * S }, (_, i) => ({ q: Math.floor(i / S), k: i % S }));
    const counts = (c) => want.some(([q, k]) => c.q === q && c.k === k);
    return { right: { q: want[0][0], k: want[0][1] }, wrong: cells.find((c) => !counts(c)) };
  }
  const heads = r.layers.flatMap((l) => l.heads.map((h) => ({ layer: l.index, head: h.index })));
  const counts = (c) => want.some(([l, h]) => c.layer === l && c.head === h);
  return { right: heads.find(counts), wrong: heads.find((c) => !counts(c)) };
}
