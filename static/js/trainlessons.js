// The training lab's lessons: one for each ready-made experiment (engine/trainlab/experiments.py EXPERIMENTS), in
// lessons.js's form, listed under their own heading (`group`). Each opens the Train workspace (`workspace`), where
// the learner starts the lesson's experiment with one click on its button (train.js outlines it while the lesson
// is open), says what to look at while the runs train (`note`), and asks a question whose answer is read from the
// runs' live measures: the page's state holds what the lab has measured of the experiment it started last
// (s.trained, trainmeasures.js), and `expected(t)` reads from it the same figure the experiment's claim check reads
// on the server (the check's function is named beside each lesson). Beyond lessons.js's fields:
//
//   experiment  the id of the ready-made experiment the lesson reads
//   ready(t)    null once the runs hold what the question reads, else what they still lack
//   live(s)     the answer the lesson reads: s.trained while it is of the lesson's experiment, else null
//   waits(s)    why the page cannot check now, or null (lessons.js notReady asks it)
//
// While unanswered they hide the experiments' own notes (they tell how it turns out) and the claim's verdict
// (giveaway.js "lookat", "trainverdict"). Pure: no DOM.

import { round } from "./lessonread.js";

const ENDED = new Set(["finished", "cancelled", "failed", "interrupted"]);
const HIDES = ["lookat", "trainverdict"];
const EARLY = 4; // the snapshots after step 0 the warm-up check reads (collapse_without_warmup)
const IDENTICAL = 0.9999; // heads this alike compute one pattern (shared_stay_identical)
const START = "Click the outlined experiment below to start its runs";

// ---- the measures, read as the claim checks read them ----------------------------------------------------------

// Every number of a [layer][head] (or [layer][head][head]) grid, a missing one left out (grid_values).
export function gridValues(grid) {
  if (grid == null) return [];
  if (typeof grid === "number") return [grid];
  return Array.isArray(grid) ? grid.flatMap(gridValues) : [];
}

// The largest value of a [layer][head] measure (best).
export function best(m, key) {
  const v = gridValues(m[key]);
  return v.length ? Math.max(...v) : Number.NaN;
}

// The mean of a [layer][head] measure (mean).
export function meanOf(m, key) {
  const v = gridValues(m[key]);
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : Number.NaN;
}

// The lowest similarity between two different heads of one layer; 1 where no layer has two (lowest_similarity).
export function lowestSimilarity(m) {
  const pairs = (m.similarity || []).flatMap((layer) => layer.flatMap((row, i) => row.filter((_, j) => j !== i)));
  return pairs.length ? Math.min(...pairs) : 1;
}

// A measure that is one number; NaN where the server sent none (a run whose loss diverged).
export const num = (v) => (typeof v === "number" ? v : Number.NaN);

const first = (run) => run.measures[0];
const last = (run) => run.measures[run.measures.length - 1];
const fmt = (v) => (Number.isFinite(v) ? String(round(v, 3)) : "not a number");

// How one figure compares with another: "under-half" of it, "lower" (at least half), or "not-lower".
export function compared(value, to) {
  const ratio = to > 0 ? value / to : Number.POSITIVE_INFINITY; // NaN (a measure missing): "not-lower"
  return ratio < 0.5 ? "under-half" : ratio < 1 ? "lower" : "not-lower";
}

const COMPARED = [
  ["under-half", "under half of it"],
  ["lower", "lower, but at least half of it"],
  ["not-lower", "as high or higher"],
];

// "both", "first", "second" or "neither", as two things hold.
function which(a, b) {
  return a ? (b ? "both" : "first") : b ? "second" : "neither";
}

// ---- when a lesson can be checked ------------------------------------------------------------------------------

// null once every run has a first snapshot.
function started(t) {
  return t.runs.every((r) => r.measures.length) ? null : "both runs have their first snapshot (step 0)";
}

// null once every run has ended with a snapshot: the claim reads their last ones.
function ended(t) {
  return t.runs.every((r) => ENDED.has(r.status) && r.measures.length) ? null : "both runs have ended";
}

// null once every run has its first EARLY snapshots after step 0, or has ended with one at least.
function early(t) {
  const enough = (r) => r.measures.length > EARLY || (ENDED.has(r.status) && r.measures.length > 1);
  return t.runs.every(enough) ? null : `both runs have ${EARLY} snapshots after step 0`;
}

// The answer a training lesson reads, and why it cannot be checked yet, for the lesson `lesson` in state `s`.
function live(lesson, s) {
  const t = s.trained;
  return t && t.experiment === lesson.experiment && t.runs.length === lesson.runs ? t : null;
}

function waits(lesson, s) {
  const t = live(lesson, s);
  if (!t) return `this lesson reads its experiment's runs, not started yet: ${START.toLowerCase()}.`;
  const lacking = lesson.ready(t);
  return lacking ? `the runs are still training: check again once ${lacking}.` : null;
}

// A lesson of the list below, with what every training lesson shares.
function trainLesson(l) {
  const lesson = {
    group: "Training",
    workspace: "train",
    setup: "", // nothing of Explore's: the lesson sets up the Train workspace
    ask: "choice",
    reads: "train", // the Train workspace's runs, not Explore's
    hides: HIDES,
    runs: 2,
    ...l,
  };
  return { ...lesson, live: (s) => live(lesson, s), waits: (s) => waits(lesson, s) };
}

// ---- the lessons -----------------------------------------------------------------------------------------------

const LESSONS = [
  {
    id: "train-induction-head",
    experiment: "induction-head",
    title: "Training: the induction head forms",
    prompt: `${START}, 2 layers against 1. Once both have ended: in which does a head reach an induction score of 0.5?`,
    note:
      "Watch the Induction score curve (one line a layer, its best head) and the loss: in a run where a head forms, " +
      "the line jumps within a few snapshots while the loss drops, and the phase change is marked.",
    choices: [
      ["first", "only the 2-layer run"],
      ["second", "only the 1-layer run"],
      ["both", "both runs"],
      ["neither", "neither run"],
    ],
    ready: ended, // induction_forms: each run's last snapshot
    expected: (t) => which(best(last(t.runs[0]), "induction") >= 0.5, best(last(t.runs[1]), "induction") >= 0.5),
    hint: () =>
      "read the Induction score curve of each column at its last step: a head has formed where a line passes 0.5. " +
      "An induction head reads what an earlier layer's previous-token head wrote.",
    attnlab: (t) =>
      `best induction score at the end: 2 layers ${fmt(best(last(t.runs[0]), "induction"))}, ` +
      `1 layer ${fmt(best(last(t.runs[1]), "induction"))}`,
  },
  {
    id: "train-no-scale",
    experiment: "no-scale",
    title: "Training: without 1/√d_k",
    prompt:
      `${START}, scaled against unscaled. At step 0, before any training, how does the unscaled run's ` +
      "mean entropy compare with the scaled run's?",
    note:
      "Look at the first point of the Mean entropy curve in each column (nats: near 0 means each row sits on one " +
      "key), and at the largest |score| before the softmax beside it.",
    choices: COMPARED,
    ready: started, // saturated_at_start: each run's first snapshot
    expected: (t) => compared(meanOf(first(t.runs[1]), "entropy"), meanOf(first(t.runs[0]), "entropy")),
    hint: () =>
      "read the Mean entropy curves at step 0, their first point, and compare the unscaled column's with the " +
      "scaled one's (half of it is the line between the first two answers).",
    attnlab: (t) => {
      const on = meanOf(first(t.runs[0]), "entropy");
      const off = meanOf(first(t.runs[1]), "entropy");
      return `mean entropy at step 0: scaled ${fmt(on)}, unscaled ${fmt(off)} nats (a ratio of ${fmt(off / on)})`;
    },
  },
  {
    id: "train-no-warmup",
    experiment: "no-warmup",
    title: "Training: no warm-up at a high learning rate",
    prompt: `${START}, with warm-up against without. In the first ${EARLY} snapshots after step 0, which run's mean entropy falls lower?`,
    note:
      "Watch the Learning rate curve (one climbs, one starts at full size) and the Mean entropy curve: a head whose " +
      "entropy drops towards 0 has collapsed onto one key. The loss may jump at the same steps.",
    choices: [
      ["warm", "the run with warm-up"],
      ["cold", "the run without warm-up"],
    ],
    ready: early, // collapse_without_warmup: snapshots 1 to 4 of each run
    expected: (t) => (lowestEarly(t.runs[1]) < lowestEarly(t.runs[0]) ? "cold" : "warm"),
    hint: () =>
      `find the lowest point of each column's Mean entropy curve over its first ${EARLY} snapshots after step 0 ` +
      "(drag the scrubber to them) and compare.",
    attnlab: (t) =>
      `lowest mean entropy in snapshots 1-${EARLY}: with warm-up ${fmt(lowestEarly(t.runs[0]))}, ` +
      `without ${fmt(lowestEarly(t.runs[1]))} nats`,
  },
  {
    id: "train-shared-heads",
    experiment: "shared-heads",
    title: "Training: heads that share projections",
    prompt: `${START}, shared projections against independent ones. Once both have ended: in which run are the heads of a layer still identical (every pair's similarity 1.0)?`,
    note:
      "Watch the Head similarity curve (the least alike pair of heads in each layer) and the heads' maps as the " +
      "scrubber moves: identical heads draw the same map.",
    choices: [
      ["first", "only the shared-projection run"],
      ["second", "only the independent run"],
      ["both", "both runs"],
      ["neither", "neither run"],
    ],
    ready: ended, // shared_stay_identical: each run's last snapshot
    expected: (t) =>
      which(lowestSimilarity(last(t.runs[0])) >= IDENTICAL, lowestSimilarity(last(t.runs[1])) >= IDENTICAL),
    hint: () =>
      "read the Head similarity curve of each column at its last step: at 1.0 every head of a layer computes one " +
      "pattern; below it, some pair differs. Compare the maps of one layer's heads too.",
    attnlab: (t) =>
      `least alike pair at the end: shared ${fmt(lowestSimilarity(last(t.runs[0])))}, ` +
      `independent ${fmt(lowestSimilarity(last(t.runs[1])))}`,
  },
  {
    id: "train-one-vs-four",
    experiment: "one-vs-four",
    title: "Training: one head against four",
    prompt: `${START} on the brackets task, 1 head against 4 at the same width. Once both have ended: which ends with the lower held-out loss?`,
    note:
      "Watch the Loss curve's held-out line in both columns, and the Bracket score: with four heads, one may match " +
      "brackets while another reads the previous token.",
    choices: [
      ["one", "the 1-head run"],
      ["four", "the 4-head run"],
    ],
    ready: ended, // four_heads_lower_loss: each run's last snapshot
    expected: (t) => (num(last(t.runs[1]).held_out_loss) < num(last(t.runs[0]).held_out_loss) ? "four" : "one"),
    hint: () => "read the held-out line of the Loss curve at the last step in each column and compare.",
    attnlab: (t) =>
      `held-out loss at the end: 1 head ${fmt(num(last(t.runs[0]).held_out_loss))}, ` +
      `4 heads ${fmt(num(last(t.runs[1]).held_out_loss))} nats`,
  },
  {
    id: "train-no-causal",
    experiment: "no-causal",
    title: "Training: no causal mask",
    prompt: `${START}, with the causal mask against without. Once both have ended: how does the unmasked run's held-out loss compare with the masked run's?`,
    note:
      "Watch the Loss curve's held-out line and the Future reliance curve (the loss added when later tokens are " +
      "replaced): a model that reads ahead leans on the future.",
    choices: COMPARED,
    ready: ended, // reads_ahead: each run's last snapshot
    expected: (t) => compared(num(last(t.runs[1]).held_out_loss), num(last(t.runs[0]).held_out_loss)),
    hint: () =>
      "read the held-out line of the Loss curve at the last step in each column: compare the unmasked column's " +
      "with the masked one's (half of it is the line between the first two answers).",
    attnlab: (t) => {
      const masked = last(t.runs[0]);
      const unmasked = last(t.runs[1]);
      const [a, b] = [masked, unmasked].map((m) => fmt(num(m.held_out_loss)));
      const [fa, fb] = [masked, unmasked].map((m) => fmt(num(m.future_reliance)));
      return `held-out loss at the end: masked ${a}, unmasked ${b} nats; future reliance ${fa} against ${fb}`;
    },
  },
];

// The lowest mean entropy of a run's first EARLY snapshots after step 0.
export function lowestEarly(run) {
  return Math.min(...run.measures.slice(1, EARLY + 1).map((m) => meanOf(m, "entropy")));
}

export const TRAIN_LESSONS = LESSONS.map(trainLesson);
