// The chapter's lab steps (lab-1 .. lab-3), its 16 exercises (ex-1 .. ex-16) and Figure 21.4, as lessons.js's
// lessons (its header says what each field means). Every answer is read off the live answer on screen; `chapter` is
// the chapter's printed output where it prints one for the task (shown beside attnlab's once the answer is checked),
// and `hides` names what on the page would give the answer away while the lesson is unanswered (lesson.js hides it).
// Positions are named as the chapter counts them, from 1. Pure: no DOM.

import { RULE, W, mean, round, rowText, shapeText, sum, textbookWith, theRows, tok, words } from "./lessonread.js";

const EXAMPLE = "m=textbook&causal=1&pad=4"; // the worked example with its own masks
const SIX = "m=random&t=a+b+c+d+e+f"; // six positions
const BATCHED = `m=random&d_model=8&heads=2&causal=1&batch=${encodeURIComponent("a b c d e\nf g h i j")}`; // B, S, D, H = 2, 5, 8, 2

// The chapter's printed lines (Level 2's worked example, its masked example, Level 3's batched shapes and its
// perturbation test), as it prints them.
export const PRINTED = {
  shapes: "Q, K, V: (5, 2) (5, 2) (5, 3)\nscores, weights, contexts: (5, 5) (5, 5) (5, 3)\nrow sums: [1. 1. 1. 1. 1.]",
  rowSums: "row sums: [1. 1. 1. 1. 1.]",
  masked: "masked weight at query 4: [0.23  0.241 0.265 0.264 0.   ]\nfuture mass at query 2: 0.0",
  batched: "scores: (2, 2, 5, 5) attention: (2, 2, 5, 5)\nmerged output: (2, 5, 8) masked mass: 0.0",
  perturbed: "earlier outputs unchanged: True",
};

// Figure 21.4's two synthetic heads as the chapter gives their weights (rows: queries 1-5, columns: keys 1-5).
export const FIGURE_21_4 = {
  A: {
    name: "head A: local pattern",
    m: [
      [1, 0, 0, 0, 0],
      [0.35, 0.65, 0, 0, 0],
      [0.08, 0.32, 0.6, 0, 0],
      [0.03, 0.1, 0.31, 0.56, 0],
      [0.02, 0.06, 0.13, 0.3, 0.49],
    ],
  },
  B: {
    name: "head B: earlier retrieval",
    m: [
      [1, 0, 0, 0, 0],
      [0.72, 0.28, 0, 0, 0],
      [0.63, 0.1, 0.27, 0, 0],
      [0.52, 0.09, 0.13, 0.26, 0],
      [0.47, 0.08, 0.1, 0.14, 0.21],
    ],
  },
};
const typed = (m) => encodeURIComponent(JSON.stringify({ kind: "pattern", m }));

const H0 = (r) => r.layers[0].heads[0];
const rowSums = (r) => rowText(W(r).map(sum), 6);
const future = (r, q) => sum(Array.from(W(r)[q]).slice(q + 1));
const shapesLine = (r, names) => names.map((n) => `${n}: ${shapeText(r.shapes[n])}`).join(" · ");
const maskedLines = (r) => `masked weight at query 4: ${rowText(W(r)[3])}\nfuture mass at query 2: ${future(r, 1)}`;

// Which axis each row or column of weights sums to 1 along: "keys" (every row), "queries" (every column), "both", "neither".
function softmaxAxis(r) {
  const w = W(r);
  const rows = w.every((row, q) => !r.eligible[q].some(Boolean) || Math.abs(sum(row) - 1) < RULE);
  const cols = w[0].every((_, k) => !r.eligible.some((e) => e[k]) || Math.abs(sum(w.map((row) => row[k])) - 1) < RULE);
  return rows ? (cols ? "both" : "keys") : cols ? "queries" : "neither";
}

// The projections' weights of one layer, from the answer's config: W_Q, W_K, W_V (K/V per group) and W_O if any.
function projectionWeights(c, heads = c.n_heads, kv = c.n_kv_heads, dk = c.d_head, dv = c.d_v) {
  return c.d_model * (heads * dk + kv * dk + kv * dv) + (c.has_w_o ? heads * dv * c.d_out : 0);
}

const BYTES = { float32: 4, float64: 8, bfloat16: 2, float16: 2 };

export const CHAPTER_LESSONS = [
  {
    id: "lab-1",
    title: "Lab step 1: implement the attention maths",
    setup: `${EXAMPLE}&view=scores`,
    ask: "number",
    prompt:
      "The large head shows the worked example's scores QKᵀ/√d_k. Work out by hand the weight query x2 gives key x1: softmax over x2's eligible keys. Give 3 decimals.",
    expected: (r) => W(r)[1][0],
    hint: (a, want, r) =>
      `row x2 has ${r.eligible[1].filter(Boolean).length} eligible keys (causal): exp(score x2→x1) divided by the sum of exp over those keys only. Hover row x2 in Display · Scores for its scores.`,
    chapter: PRINTED.shapes,
    attnlab: (r) =>
      `${shapesLine(r, ["q", "k", "v", "scores", "weights", "contexts"])}\nrow sums: ${rowSums(r)}\nweight x2 → x1 = ${round(W(r)[1][0], 4)}`,
  },
  {
    id: "lab-2",
    title: "Lab step 2: rows sum to 1, and symmetry",
    setup: textbookWith((m) => ({ ...m, w_k: m.w_q }), "causal=0"),
    ask: "choice",
    prompt: "Here W_K is set equal to W_Q (see the number editors). Which holds?",
    choices: [
      ["both", "the scores are symmetric and every row of weights sums to 1"],
      ["scores", "the scores are symmetric, the rows of weights do not sum to 1"],
      ["rows", "the rows of weights sum to 1, the scores are not symmetric"],
      ["neither", "neither"],
    ],
    hides: ["symmetric"],
    expected: (r) => {
      const sc = H0(r).scores;
      const sym = sc.every((row, i) => Array.from(row).every((v, j) => Math.abs(v - sc[j][i]) < 1e-5));
      const rows = softmaxAxis(r);
      const ok = rows === "keys" || rows === "both";
      return sym ? (ok ? "both" : "scores") : ok ? "rows" : "neither";
    },
    hint: () =>
      "with W_K = W_Q each score is q_i·q_j, the same both ways round (Display · Scores: compare cell (i, j) with (j, i)); softmax then runs along each row, so each row of weights sums to 1 — but the weights themselves are not symmetric.",
    chapter: PRINTED.rowSums,
    attnlab: (r) =>
      `row sums: ${rowSums(r)}\nmax |row sum − 1| = ${H0(r).stats.max_row_sum_error}; qk_symmetric = ${H0(r).stats.qk_symmetric}`,
  },
  {
    id: "lab-3",
    title: "Lab step 3: causal masking with no future leakage",
    setup: "m=textbook&causal=0&pad=4",
    ask: "toggle",
    prompt:
      "Every query here can see every later key too. Switch on the mask that stops each position looking ahead, then press Check.",
    holds: (r) => W(r).every((row, q) => Array.from(row).every((v, k) => k <= q || v === 0)),
    hint: (a, want, r) => {
      const leak = W(r)
        .flatMap((row, q) => Array.from(row).map((v, k) => [q, k, v]))
        .find(([q, k, v]) => k > q && v !== 0);
      return `query ${tok(r, leak[0])} still gives weight ${round(leak[2])} to the later key ${tok(r, leak[1])}: the cells above the diagonal must be exactly 0 (Masks · causal).`;
    },
    chapter: PRINTED.masked,
    attnlab: (r) =>
      `${maskedLines(r)}\nlargest weight on a later key: ${Math.max(0, ...W(r).flatMap((row, q) => Array.from(row).filter((_, k) => k > q)))}`,
  },
  {
    id: "ex-1",
    title: "Exercise 1: the shapes of a batched multi-head layer",
    setup: `m=random&d_model=128&heads=8&causal=1&batch=${encodeURIComponent(Array(4).fill(words(32).replaceAll("+", " ")).join("\n"))}`,
    ask: "shape",
    prompt:
      "A batch of 4 texts of 32 tokens, width 128, eight heads. Type the shape of Q as the engine holds it (batch, heads, positions, head width), e.g. 1 2 3 4.",
    expected: (r) => r.shapes.q,
    hint: (a, want) =>
      `each head gets width 128 / 8; the order is batch, heads, positions, head width: ${want.length} numbers.`,
    chapter: null,
    attnlab: (r) => shapesLine(r, ["x", "q", "k", "v", "scores", "weights", "contexts", "concat", "output"]),
  },
  {
    id: "ex-2",
    title: "Exercise 2: eligible pairs under causal masking",
    setup: `${SIX}&causal=1`,
    ask: "number",
    prompt: "Six positions, causal masking. How many (query, key) pairs are eligible?",
    hides: ["pairs"],
    expected: (r) => r.pairs.eligible,
    hint: (a, want, r) => {
      const n = Number(a);
      if (n === r.pairs.total)
        return "that is every pair: causal masking removes each key after its query (the eligibility grid's C cells).";
      if (n === want - r.tokens.length) return "you left out the diagonal: a position may attend to itself.";
      return "count the ✓ in the eligibility grid row by row: the first query sees 1 key, the second 2, …";
    },
    chapter: null,
    attnlab: (r) => `${r.pairs.eligible} eligible pairs of ${r.pairs.total} (pairs.eligible in /api/attention)`,
  },
  {
    id: "ex-3",
    title: "Exercise 3: softmax runs over keys",
    setup: "m=given&causal=0",
    ask: "choice",
    prompt:
      "These scores are typed in, not made by a model; the weights are their softmax. Did the softmax run over the keys or over the queries? Add up a row of weights (one query) and a column (one key) to tell.",
    choices: [
      ["keys", "over the keys: each query's row sums to 1"],
      ["queries", "over the queries: each key's column sums to 1"],
      ["both", "both sum to 1"],
      ["neither", "neither sums to 1"],
    ],
    expected: softmaxAxis,
    hint: (a, want, r) =>
      `add up row 2 (${round(sum(W(r)[1]))}) and column 1 (${round(sum(W(r).map((row) => row[0])))}): rows are queries, columns are keys.`,
    chapter: PRINTED.rowSums,
    attnlab: (r) =>
      `row sums: ${rowSums(r)}\ncolumn sums: ${rowText(
        W(r)[0].map((_, k) => sum(W(r).map((row) => row[k]))),
        6,
      )}`,
  },
  {
    id: "ex-4",
    title: "Exercise 4: a padding mask with zero masked mass",
    setup: "m=textbook&causal=1",
    ask: "toggle",
    prompt:
      "x5 holds no data. Mark it as padding with the page's own mask controls, then press Check: no query may give it any weight, and every row must still sum to 1.",
    holds: (r) =>
      !!r.reasons?.padding?.every((row) => row[4]) &&
      W(r).every((row, q) => row[4] === 0 && (!r.eligible[q].some(Boolean) || Math.abs(sum(row) - 1) < RULE)),
    hint: (a, want, r) =>
      r.reasons?.padding?.every((row) => row[4])
        ? "key x5 is padded but some row does not sum to 1: leave each query a key."
        : `key x5 is not padding yet: column x5 still carries ${round(sum(W(r).map((row) => row[4])))} weight in all (Masks · padding).`,
    chapter: PRINTED.masked,
    attnlab: (r) => `${maskedLines(r)}\nmass on padded key x5: ${sum(W(r).map((row) => row[4]))}`,
  },
  {
    id: "ex-5",
    title: "Exercise 5: two masks on one score entry",
    setup: EXAMPLE,
    ask: "cell",
    prompt: "Causal masking and padding (x5) both act on the worked example. Click a cell that both masks exclude.",
    hides: ["pairs"],
    expected: (r) =>
      r.eligible
        .flatMap((row, q) => row.map((_, k) => (r.reasons.causal[q][k] && r.reasons.padding[q][k] ? [q, k] : null)))
        .filter(Boolean),
    hint: (a, want, r) =>
      r.reasons.causal[a.q][a.k]
        ? "causal masking excludes that cell, padding does not: the padded key is x5."
        : r.reasons.padding[a.q][a.k]
          ? "padding excludes that cell, causal masking does not: look above the diagonal."
          : "that cell is eligible: neither mask excludes it.",
    chapter: null,
    attnlab: (r, s, want) =>
      `${want.length} cells are excluded by both masks: ${want.map(([q, k]) => `${tok(r, q)} → ${tok(r, k)}`).join(", ")}; each mask excludes a cell on its own, so both apply to it at once`,
  },
  {
    id: "ex-6",
    title: "Exercise 6: the variance of an unscaled dot product",
    setup: `${SIX}&d_model=64&heads=4&causal=0&scale=0&view=scores`,
    ask: "number",
    prompt:
      "Suppose every coordinate of q and k were independent, mean 0, variance 1. What would the variance of one unscaled score q·k be for this model's heads (their width d_k is in the model line)?",
    expected: (r) => r.config.d_head,
    hint: (a, want, r) =>
      `q·k is a sum of d_k products q_i k_i; each product has variance 1 and they are independent, so the variances add (d_k = ${r.config.d_model} / ${r.config.n_heads} here).`,
    chapter: null,
    attnlab: (r) =>
      `d_k = ${r.config.d_head}: variance ${r.config.d_head}, standard deviation √${r.config.d_head} = ${round(Math.sqrt(r.config.d_head))}; scaling by 1/√d_k brings it back to 1`,
  },
  {
    id: "ex-7",
    title: "Exercise 7: Figure 21.5 with a coordinate variance of 4",
    setup: `${SIX}&d_model=64&heads=1&causal=0&scale=0&view=scores`,
    ask: "number",
    prompt:
      "Figure 21.5 again, but each coordinate of q and k has variance 4 (standard deviation 2). What is the standard deviation of an unscaled score q·k for this head's d_k?",
    expected: (r) => 4 * Math.sqrt(r.config.d_head),
    hint: (a, want, r) =>
      `each product q_i k_i now has variance 4 × 4 = 16; d_k = ${r.config.d_head} of them add up, and the standard deviation is the square root of the sum.`,
    chapter: null,
    attnlab: (r) =>
      `d_k = ${r.config.d_head}: std ${round(4 * Math.sqrt(r.config.d_head))} unscaled, ${round(4)} after dividing by √d_k (the variance 16 stays, whatever d_k)`,
  },
  {
    id: "ex-8",
    title: "Exercise 8: the output projection of the batched example",
    setup: BATCHED,
    ask: "shape",
    prompt:
      "The chapter's batched example: B = 2, S = 5, D = 8, H = 2. The heads' contexts are merged to (B, S, D). What shape must W_O have to map them back to width D? Type rows and columns, e.g. 3 4.",
    expected: (r) => [r.shapes.concat.at(-1), r.shapes.output.at(-1)],
    hint: (a, want, r) =>
      `the merged contexts have ${r.shapes.concat.at(-1)} features per position, and the output is back at width ${r.shapes.output.at(-1)}: W_O maps one to the other.`,
    chapter: PRINTED.batched,
    attnlab: (r) =>
      `scores: ${shapeText(r.shapes.scores)} attention: ${shapeText(r.shapes.weights)}\nmerged output: ${shapeText(r.shapes.concat)} → output ${shapeText(r.shapes.output)} masked mass: ${future(r, 1)}`,
  },
  {
    id: "ex-9",
    title: "Exercise 9: one head or four at the same width",
    setup: `${SIX}&d_model=64&heads=4`,
    ask: "number",
    prompt:
      "Width 64, four heads of width 16. How many weights do this layer's projections hold together (W_Q, W_K, W_V, and W_O where the model line says it has one)? Then compare with one head of width 64.",
    expected: (r) => projectionWeights(r.config),
    hint: (a, want, r) =>
      `each head's W_Q is ${r.config.d_model} × ${r.config.d_head}; four of them side by side are ${r.config.d_model} × ${r.config.n_heads * r.config.d_head}, the same as one head of width ${r.config.d_model}. Count W_Q, W_K and W_V that way${r.config.has_w_o ? ", then W_O" : ""}.`,
    chapter: null,
    attnlab: (r) => {
      const c = r.config;
      const one = projectionWeights(c, 1, 1, c.n_heads * c.d_head, c.n_kv_heads * c.d_v);
      return `${c.n_heads} heads: ${projectionWeights(c)} weights; one head of width ${c.n_heads * c.d_head}: ${one}`;
    },
  },
  {
    id: "ex-10",
    title: "Exercise 10: a causal perturbation test",
    setup: "m=random&t=a+b+c+d+e&d_model=8&heads=2&causal=1&pert=4,shift,100",
    reads: "perturb",
    ask: "number",
    prompt:
      "Test a claim has added 100 to position 5's input (see its bars). What is the largest change among the outputs of positions 1-4?",
    hides: ["verdict"],
    expected: (p) => Math.max(...p.final_delta.slice(0, p.position)),
    hint: (a, want, p) =>
      `read the bars of positions 1-${p.position} in Test a claim: under causal masking no earlier query sees position ${p.position + 1}, so what could move them?`,
    chapter: PRINTED.perturbed,
    attnlab: (p) =>
      `earlier outputs unchanged: ${p.final_delta.slice(0, p.position).every((v) => v === 0) ? "True" : "False"} (largest change ${Math.max(...p.final_delta.slice(0, p.position))}; position ${p.position + 1} moved ${round(p.final_delta[p.position])})`,
  },
  {
    id: "ex-11",
    title: "Exercise 11: score-matrix elements grow with length squared",
    setup: `m=random&t=${words(128)}&heads=4&causal=1`,
    ask: "number",
    prompt:
      "This text has 128 tokens and the layer four heads. How many score elements does the layer compute? (Then think of 512, 2,048 and 8,192 tokens.)",
    expected: (r) => r.shapes.scores.reduce((a, b) => a * b, 1),
    hint: (a, want, r) => `one score per head, query and key: ${r.config.n_heads} × S × S with S = ${r.tokens.length}.`,
    chapter: null,
    attnlab: (r) => {
      const H = r.config.n_heads;
      return `scores ${shapeText(r.shapes.scores)}: ${r.shapes.scores.reduce((a, b) => a * b, 1)} elements; at ${[512, 2048, 8192].map((S) => `${S}: ${H * S * S}`).join(", ")}`;
    },
  },
  {
    id: "ex-12",
    title: "Exercise 12: the bytes of a key-value cache",
    setup: `${SIX}&heads=4&kv_heads=2`,
    ask: "number",
    prompt:
      "This model keeps each generated token's keys and values in a cache, in the precision it computes in. How many bytes does the cache hold after 1,000 tokens?",
    expected: (r) =>
      1000 * r.config.n_layers * r.config.n_kv_heads * (r.config.d_head + r.config.d_v) * BYTES[r.config.dtype],
    hint: (a, want, r) =>
      `tokens × layers × K/V heads × (d_k + d_v) × bytes a number: 1000 × ${r.config.n_layers} × ${r.config.n_kv_heads} × (${r.config.d_head} + ${r.config.d_v}) × ${BYTES[r.config.dtype]} (${r.config.dtype}); keys and values are kept per K/V group, not per query head.`,
    chapter: null,
    attnlab: (r, s, want) =>
      `${want} bytes (${r.config.n_heads} query heads share ${r.config.n_kv_heads} K/V groups, ${r.config.dtype})`,
  },
  {
    id: "ex-13",
    title: "Exercise 13: a test for an all-masked row",
    setup: "m=textbook&causal=1&block=0-0&all_masked=zero",
    ask: "choice",
    prompt:
      "Query x1 has no eligible key left (causal, and x1 → x1 blocked); the policy for such a row is “zero”. What does the row hold?",
    choices: [
      ["zeros", "every weight 0, nothing NaN"],
      ["uniform", "equal weights over the keys"],
      ["nan", "NaN"],
      ["other", "something else"],
    ],
    expected: (r) => {
      const row = Array.from(W(r)[0]);
      if (row.some((v) => Number.isNaN(v))) return "nan";
      if (row.every((v) => v === 0)) return "zeros";
      return row.every((v) => Math.abs(v - row[0]) < 1e-6) ? "uniform" : "other";
    },
    hint: () =>
      "with no eligible key there is nothing to normalise over: read row x1 of the large head. A test asserts the row is finite and what the policy promises.",
    chapter: null,
    attnlab: (r) => `row x1: ${rowText(W(r)[0])}, row sum ${sum(W(r)[0])}; the other rows sum to 1`,
  },
  {
    id: "ex-14",
    title: "Exercise 14: a reference against a lower precision",
    setup: `${EXAMPLE}&dtype=bfloat16`,
    ask: "choice",
    prompt:
      "This run computes in bfloat16; attnlab also runs it in float32, the reference. How far apart are the two sets of weights at most?",
    choices: [
      ["exact", "exactly equal"],
      ["tiny", "below 1e-6"],
      ["small", "between 1e-6 and 1e-2"],
      ["large", "1e-2 or more"],
    ],
    hides: ["precision"],
    expected: (r) => {
      const d = r.config.max_diff_vs_float32;
      return d === 0 ? "exact" : d < 1e-6 ? "tiny" : d < 1e-2 ? "small" : "large";
    },
    hint: (a, want, r) =>
      `bfloat16 keeps about ${r.config.dtype === "bfloat16" ? "3" : "a few"} significant digits: switch Display · Compute in to float32 and compare a weight of row x4 with this run's.`,
    chapter: null,
    attnlab: (r) => `${r.config.dtype}: max |weight − float32 weight| = ${r.config.max_diff_vs_float32}`,
  },
  {
    id: "ex-15",
    title: "Exercise 15: an intervention on one head",
    setup: "m=induction&layer=all",
    ask: "head",
    prompt:
      "Claim: the induction heads need the layer-0 head that looks one token back. Which head would you knock out to test it? Click its card.",
    expected: (r) => {
      const all = r.layers
        .filter((l) => l.index === 0)
        .flatMap((l) =>
          l.heads.map((h) => [l.index, h.index, mean(Array.from(h.weights.slice(1), (row, i) => row[i]))]),
        );
      const best = all.reduce((a, b) => (b[2] > a[2] ? b : a));
      return [[best[0], best[1]]];
    },
    hint: () =>
      "look in layer 0 for the map with a bright line just below the diagonal; knock it out (Interventions) and see whether the induction stripe in layer 1 fades.",
    chapter: null,
    attnlab: (r, s, want) => want.map(([l, h]) => `L${l} H${h}`).join(", "),
  },
  {
    id: "ex-16",
    title: "Exercise 16: what tells reversed orders apart",
    setup: "m=random&t=the+cat+sat+on+the+mat&causal=0&positions=1",
    ask: "choice",
    prompt:
      "This layer adds sinusoidal positions to its inputs. Are the rows of the first “the” and the second “the” the same?",
    choices: [
      ["same", "the same"],
      ["different", "different"],
    ],
    expected: theRows,
    hint: () =>
      "compare the two “the” rows in the large head; then open the lesson “Without positions” and compare again. Only the positions make them differ, and so only they can tell a sequence from its reverse.",
    chapter: null,
    attnlab: (r) => {
      const [i, j] = r.tokens.flatMap((t, k) => (t === "the" ? [k] : []));
      return `the two “the” rows differ by up to ${round(Math.max(...Array.from(W(r)[i], (v, k) => Math.abs(v - W(r)[j][k]))), 4)} with positions`;
    },
  },
  {
    id: "fig-21-4",
    title: "Figure 21.4: two heads side by side",
    setup: `m=given&causal=1&typed=${typed(FIGURE_21_4.A.m)}`,
    figure: FIGURE_21_4,
    ask: "cell",
    prompt:
      "Head A (drawn large) and head B (beside it, from the figure's weights). Which key does query 5 give the most weight in head A? Click its cell.",
    expected: (r) => {
      const row = W(r)[4];
      return [[4, Array.from(row).reduce((b, v, k) => (v > row[b] ? k : b), 0)]];
    },
    hint: (a, want, r) =>
      a.q !== 4
        ? `that cell is in row ${tok(r, a.q)}: the question is about query 5.`
        : `key ${tok(r, a.k)} gets ${W(r)[4][a.k]}; another key of row 5 gets more.`,
    chapter: null,
    attnlab: (r, s, want) => `head A, query 5: key ${tok(r, want[0][1])} with ${W(r)[4][want[0][1]]} of its row`,
  },
];
