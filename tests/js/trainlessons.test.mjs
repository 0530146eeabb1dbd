// The training lessons (static/js/trainlessons.js, listed by lessons.js): each checks the learner's answer against
// the runs' measures the Train workspace holds (s.trained, trainmeasures.js), shaped as GET /api/train/{id}/events
// sends them, reading the figure the experiment's claim check reads; a right answer passes, a wrong one says what to
// look at, and the answer follows the measures. The same lessons on real runs: tests/test_train_experiments.py; on
// the page: tests/browser/test_train_page.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod } from "./lib.mjs";

const LAYERS = 2;
const HEADS = 2;

// A [layer][head] grid of one value, its last head's set to `top` (the best head).
const grid = (v, top = v) =>
  Array.from({ length: LAYERS }, () => Array.from({ length: HEADS }, (_, h) => (h ? top : v)));

// One snapshot's measures, every key the server sends, with the figures a test sets.
function measures({ entropy = 1.5, induction = 0.05, similarity = 0.6, held = 2.5, future = 0.0 } = {}) {
  const sim = Array.from({ length: LAYERS }, () =>
    Array.from({ length: HEADS }, (_, i) => Array.from({ length: HEADS }, (_, j) => (i === j ? 1 : similarity))),
  );
  return {
    loss: held + 0.1,
    held_out_loss: held,
    future_reliance: future,
    lr: 0.001,
    entropy: grid(entropy),
    previous_token: grid(0.1),
    induction: grid(0.01, induction),
    bracket: null,
    similarity: sim,
    max_abs_score: grid(3.0),
    softmax_jacobian: grid(0.4),
    grad_norm: { embed: 0.5, attention: 0.3, unembed: 0.2 },
  };
}

// A run's state as train.js tells it: its status and each snapshot's step and measures.
const run = (snaps, status = "finished") => ({
  status,
  steps: snaps.map((_, i) => i * 25),
  measures: snaps.map(measures),
});

// The state a lesson reads: the experiment started last and its runs.
const trained = (experiment, ...runs) => ({ trained: { experiment, runs } });

// Per lesson: two sets of runs whose answers differ, and the answer each must give.
const CASES = {
  "train-induction-head": [
    [trained("induction-head", run([{}, { induction: 0.93 }]), run([{}, { induction: 0.05 }])), "first"],
    [trained("induction-head", run([{}, { induction: 0.3 }]), run([{}, { induction: 0.1 }])), "neither"],
  ],
  "train-no-scale": [
    [trained("no-scale", run([{ entropy: 2.4 }, {}]), run([{ entropy: 0.6 }, {}])), "under-half"],
    [trained("no-scale", run([{ entropy: 2.4 }]), run([{ entropy: 2.0 }])), "lower"],
    [trained("no-scale", run([{ entropy: 2.0 }]), run([{ entropy: 2.4 }])), "not-lower"],
  ],
  "train-no-warmup": [
    [trained("no-warmup", run([{}, { entropy: 1.4 }, {}, {}, {}]), run([{}, {}, { entropy: 0.2 }, {}, {}])), "cold"],
    // the lowest point after the fourth snapshot is not read
    [trained("no-warmup", run([{}, { entropy: 1.0 }, {}, {}, {}]), run([{}, {}, {}, {}, {}, { entropy: 0 }])), "warm"],
  ],
  "train-shared-heads": [
    [trained("shared-heads", run([{ similarity: 1 }]), run([{ similarity: 0.7 }])), "first"],
    [trained("shared-heads", run([{ similarity: 0.99 }]), run([{ similarity: 0.7 }])), "neither"],
  ],
  "train-one-vs-four": [
    [trained("one-vs-four", run([{}, { held: 1.2 }]), run([{}, { held: 0.8 }])), "four"],
    [trained("one-vs-four", run([{}, { held: 0.8 }]), run([{}, { held: 1.2 }])), "one"],
  ],
  "train-no-causal": [
    [trained("no-causal", run([{}, { held: 2.1 }]), run([{}, { held: 0.3, future: 3 }])), "under-half"],
    [trained("no-causal", run([{}, { held: 2.1 }]), run([{}, { held: 2.5 }])), "not-lower"],
  ],
};

test("every ready-made experiment has a training lesson, listed after the others under its own heading", async () => {
  const L = await mod("lessons.js");
  const T = await mod("trainlessons.js");
  const R = await mod("lessonread.js");
  const ids = T.TRAIN_LESSONS.map((l) => l.id);
  eq(ids, Object.keys(CASES));
  eq(
    L.LESSONS.slice(-ids.length).map((l) => l.id),
    ids,
  );
  for (const l of T.TRAIN_LESSONS) {
    assert.equal(l.group, "Training", l.id);
    assert.equal(`train-${l.experiment}`, l.id);
    assert.ok(l.note && l.prompt.startsWith("Click the outlined experiment"), l.id);
    assert.ok(R.touchWords(l.prompt, true).startsWith("Tap the outlined experiment"), l.id); // a touch screen's words
  }
  const W = await mod("workspaces.js");
  eq(
    ids.map((id) => W.lessonWorkspace(id)),
    ids.map(() => "train"),
  );
});

test("each training lesson's answer is read from the runs' measures: right passes, wrong says what to look at", async () => {
  const L = await mod("lessons.js");
  for (const [id, cases] of Object.entries(CASES)) {
    const lesson = L.lessonOf(id);
    const answers = new Set();
    for (const [s, want] of cases) {
      assert.equal(L.notReady(lesson, s), null, id);
      const live = L.liveAnswer(lesson, s);
      assert.equal(lesson.expected(live), want, id);
      answers.add(want);
      const { right, wrong } = L.sampleAnswers(lesson, live);
      eq(L.checkAnswer(lesson, right, s), { ok: true, text: "Correct." }, id);
      const out = L.checkAnswer(lesson, wrong, s);
      assert.equal(out.ok, false, id);
      assert.equal(out.text, `Not yet: ${lesson.hint(wrong, want, live, s)}`, id);
      assert.ok(out.text.length > 40 && !/NaN|undefined/.test(out.text), out.text);
      const value = L.attnlabValue(lesson, s);
      assert.ok(value && !/NaN|undefined/.test(value), `${id}: ${value}`);
    }
    assert.equal(answers.size, cases.length, `${id}: its answer follows the measures`);
  }
});

test("a training lesson is not checked before its experiment's runs hold what it reads", async () => {
  const L = await mod("lessons.js");
  const R = await mod("lessonread.js");
  const lesson = L.lessonOf("train-no-causal");
  const check = (s) => L.checkAnswer(lesson, "under-half", s);
  // no experiment started, or another one: the lesson says to start its own with one click
  for (const s of [{ trained: null }, trained("no-scale", run([{}]), run([{}]))]) {
    const out = check(s);
    assert.equal(out.ok, false);
    assert.match(
      out.text,
      /^Not checked: this lesson reads its experiment's runs, not started yet: click the outlined/,
    );
    assert.match(R.touchWords(out.text, true), /tap the outlined/);
    assert.equal(L.liveAnswer(lesson, s), null);
  }
  // the second run waits for a free slot, then trains: not checked until both have ended
  const waiting = { status: "waiting", steps: [], measures: [] };
  for (const s of [
    trained("no-causal", run([{}, {}], "running"), waiting),
    trained("no-causal", run([{}, { held: 2.1 }]), run([{}], "running")),
  ]) {
    eq(check(s), {
      ok: false,
      text: "Not checked: the runs are still training: check again once both runs have ended.",
    });
  }
  // the first snapshots are enough for the question about step 0, and a run cancelled after it still answers
  const noScale = L.lessonOf("train-no-scale");
  const s = trained("no-scale", run([{ entropy: 2.4 }], "cancelled"), run([{ entropy: 0.5 }], "running"));
  eq(L.checkAnswer(noScale, "under-half", s), { ok: true, text: "Correct." });
  // a warm-up lesson needs four snapshots after step 0 from a run still training
  const warm = L.lessonOf("train-no-warmup");
  const early = trained("no-warmup", run([{}, {}, {}], "running"), run([{}, {}, {}, {}, {}], "running"));
  assert.match(L.checkAnswer(warm, "cold", early).text, /once both runs have 4 snapshots after step 0/);
  // a diverged run's missing loss is no loss of 0: the 4-head run with none does not end lower
  const four = L.lessonOf("train-one-vs-four");
  const diverged = trained("one-vs-four", run([{ held: 2 }]), run([{ held: null }]));
  assert.equal(four.expected(L.liveAnswer(four, diverged)), "one");
});

test("an open training lesson hides the experiments' notes and the claim's verdict until it is answered", async () => {
  const L = await mod("lessons.js");
  const LS = await mod("lesson.js");
  const LE = await mod("giveaway.js");
  for (const lesson of L.LESSONS.filter((l) => l.reads === "train")) {
    eq(lesson.hides, ["lookat", "trainverdict"]);
    const open = { ui: { lesson: LS.freshLesson(lesson.id) } };
    assert.equal(LE.keptHidden(open), "lookat trainverdict");
    const answered = { ui: { lesson: { ...open.ui.lesson, feedback: { ok: true, text: "Correct." } } } };
    assert.equal(LE.keptHidden(answered), "");
  }
  // a training lesson sets up nothing of Explore's: opening it leaves the model and the text on screen as they are
  eq(LS.lessonUi([{ name: "textbook" }], L.lessonOf("train-no-scale")), null);
});

test("what the Train workspace measured is kept in the page's state, and a new experiment replaces it", async () => {
  const { act } = await mod("actions.js");
  const { initialState, reducer } = await mod("store.js");
  const s0 = initialState();
  assert.equal(s0.trained, null);
  const first = trained("no-scale", run([{}]), run([{}])).trained;
  const s1 = reducer(s0, act.trainMeasured(first));
  assert.equal(s1.trained, first);
  assert.equal(s1.ui, s0.ui); // not in the link
  const s2 = reducer(s1, act.trainMeasured({ experiment: "no-causal", runs: [] }));
  eq(s2.trained, { experiment: "no-causal", runs: [] });
});
