// The lessons' pure helpers (static/js/lessons.js, lessonread.js, lesson.js): how a typed shape is read, the words a
// touch device gets, numbers printed as the chapter prints them, and what an unanswered lesson hides. Each lesson's
// checks against the live API: tests/test_lessons_api.py; the page: tests/browser/test_lessons.py.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod } from "./lib.mjs";

test("a shape is read as a learner types it", async () => {
  const L = await mod("lessons.js");
  eq(["(4, 8, 32, 16)", "4 8 32 16", "[2,5]", "8x8", " 3 "].map(L.parseShape), [
    [4, 8, 32, 16],
    [4, 8, 32, 16],
    [2, 5],
    [8, 8],
    [3],
  ]);
  eq(["", "four", "2.5 3", "-1 2", "()"].map(L.parseShape), [null, null, null, null, null]);
});

test("a touch device reads tap where a mouse reads hover or click", async () => {
  const R = await mod("lessonread.js");
  const text = "Hover row x2, then click its cell; hovering shows it. Click a head card.";
  assert.equal(R.touchWords(text, true), "Tap row x2, then tap its cell; tapping shows it. Tap a head card.");
  assert.equal(R.touchWords(text, false), text);
  assert.equal(R.touchWords("the clicked cell", true), "the tapped cell");
});

test("numbers and shapes are printed as the chapter prints them", async () => {
  const R = await mod("lessonread.js");
  assert.equal(R.rowText([0.2300001, 0.2409, 0.26512, 0.264, 0]), "[0.23 0.241 0.265 0.264 0.]");
  assert.equal(R.rowText([1, 0.9999999], 6), "[1. 1.]");
  eq([R.shapeText([2, 2, 5, 5]), R.shapeText([5])], ["(2, 2, 5, 5)", "(5,)"]);
});

test("an unanswered lesson hides what it declares, and nothing once it is answered or shown", async () => {
  const LE = await mod("giveaway.js");
  const LS = await mod("lesson.js");
  const L = await mod("lessons.js");
  const ex2 = (extra = {}) => ({ ...LS.freshLesson("ex-2"), ...extra });
  eq(LS.freshLesson("ex-2").hides, ["pairs"]); // the open lesson's setting carries what it hides
  eq(LE.hiddenNow(ex2()), ["pairs"]);
  eq(LE.hiddenNow(ex2({ feedback: { ok: false, text: "Not yet: …" } })), ["pairs"]);
  eq(LE.hiddenNow(ex2({ feedback: { ok: true, text: "Correct." } })), []);
  eq(LE.hiddenNow(ex2({ shown: true })), []);
  eq(LE.hiddenNow(LS.freshLesson("lab-2")), ["symmetric"]);
  eq(LE.hiddenNow(null), []);
  // every name a lesson hides is one the page knows how to hide
  for (const lesson of L.LESSONS)
    for (const name of lesson.hides || []) assert.ok(name in LE.GIVEAWAYS, `${lesson.id}: ${name}`);
  // a view marks its own root with the names it shows that the open lesson keeps hidden, and only while it does
  const open = (value) => ({ ui: { lesson: value } });
  const root = { dataset: {} };
  LE.markGiveaways(root, open(ex2()), ["pairs", "verdict"]);
  eq(root.dataset, { giveaway: "pairs" });
  LE.markGiveaways(root, open(ex2()), ["symmetric"]);
  eq(root.dataset, {});
  LE.markGiveaways(root, open(ex2({ feedback: { ok: true, text: "Correct." } })), ["pairs"]);
  eq(root.dataset, {});
  eq(
    [LE.keptHidden(open(null)), LE.keptHidden({ ui: {} }), LE.keptHidden(open(LS.freshLesson("lab-2")))],
    ["", "", "symmetric"],
  );
});

test("every exercise and lab step is a lesson, ex-3 asks what the chapter asks", async () => {
  const L = await mod("lessons.js");
  const ids = [...Array.from({ length: 16 }, (_, i) => `ex-${i + 1}`), "lab-1", "lab-2", "lab-3"];
  for (const id of ids) assert.ok(L.lessonOf(id), id);
  assert.match(L.lessonOf("ex-3").prompt, /softmax run over the keys or over the queries/);
  assert.equal(L.lessonOf("ex-3").setup, "m=given&causal=0"); // a score matrix supplied, not a model's
});
