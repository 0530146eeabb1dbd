// The Train workspace's pure helpers (static/js/trainplot.js, train.js's probeText): the phase change found where
// the induction score jumps, the curves' lines and scales, and a snapshot's float16 probe decoded.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod, none } from "./lib.mjs";

const snap = (step, induction, extra = {}) => ({ step, measures: { induction, ...extra } });

test("the phase change is where the best induction score has covered half of its rise", async () => {
  const { phaseChange } = await mod("trainplot.js");
  const run = [
    snap(0, [
      [0.01, 0.02],
      [0.0, 0.03],
    ]),
    snap(25, [
      [0.02, 0.01],
      [0.04, 0.05],
    ]),
    snap(50, [
      [0.03, 0.02],
      [0.3, 0.1],
    ]),
    snap(75, [
      [0.03, 0.02],
      [0.6, 0.1],
    ]),
    snap(100, [
      [0.03, 0.02],
      [0.85, 0.1],
    ]),
  ];
  // from 0.03 to 0.85: half the rise is 0.44, first reached at step 75 (a layer-0 head's score counts as much)
  eq(phaseChange(run), { step: 75, from: 50, score: 0.6 });
  // a score that rises little (a 1-layer run), or one snapshot, has none
  none(phaseChange(run.map((s, i) => snap(s.step, [[0.05 * i]]))));
  none(phaseChange([snap(0, [[0.1]])]));
  // a missing score (a diverged run's null) is skipped, not read as 0
  eq(phaseChange([snap(0, [[0.05]]), snap(5, [[null]]), snap(10, [[0.2]]), snap(15, [[0.6]])]), {
    step: 15,
    from: 10,
    score: 0.6,
  });
});

test("a curve has a line a layer, gaps where a value is missing, and round ticks holding every value", async () => {
  const { CURVES, curveLines, niceScale, tickStep } = await mod("trainplot.js");
  const entropy = CURVES.find((c) => c.key === "entropy");
  const run = [
    {
      step: 0,
      measures: {
        entropy: [
          [1, 3],
          [2, 2],
        ],
      },
    },
    {
      step: 10,
      measures: {
        entropy: [
          [0.5, 0.5],
          [null, null],
        ],
      },
    },
  ];
  eq(curveLines(entropy, run), [
    {
      label: "layer 0",
      points: [
        [0, 2],
        [10, 0.5],
      ],
    },
    { label: "layer 1", points: [[0, 2]] },
  ]);
  const bracket = CURVES.find((c) => c.key === "bracket");
  eq(curveLines(bracket, [{ step: 0, measures: { bracket: null } }]), []);
  eq([tickStep(1), tickStep(7), tickStep(0.03), tickStep(0)], [0.5, 2, 0.01, 1]);
  const s = niceScale([0.13, 2.7, 1]);
  eq(s, { min: 0, max: 3, ticks: [0, 1, 2, 3] });
  assert.ok(s.min <= 0.13 && s.max >= 2.7);
  eq(niceScale([]), { min: 0, max: 1, ticks: [0, 0.5, 1] });
  const flat = niceScale([4, 4]);
  assert.ok(flat.min < 4 && flat.max > 4, JSON.stringify(flat));
  eq(niceScale([NaN, Infinity]), { min: 0, max: 1, ticks: [0, 0.5, 1] });
});

test("a snapshot's float16 probe decodes into every head's rows", async () => {
  const { decodeProbe } = await mod("trainplot.js");
  // [1 layer, 2 heads, 2, 2] little-endian float16: 1.0 = 0x3c00, 0.5 = 0x3800, 0 = 0
  const halves = [0x3c00, 0, 0x3800, 0x3800, 0x3c00, 0, 0, 0x3c00];
  const bytes = new Uint8Array(halves.flatMap((h) => [h & 0xff, h >> 8]));
  const data = btoa(String.fromCharCode(...bytes));
  const out = decodeProbe({ shape: [1, 2, 2, 2], dtype: "float16", data, tokens: ["a", "b"] });
  eq(out, {
    tokens: ["a", "b"],
    layers: [
      [
        {
          index: 0,
          weights: [
            [1, 0],
            [0.5, 0.5],
          ],
        },
        {
          index: 1,
          weights: [
            [1, 0],
            [0, 1],
          ],
        },
      ],
    ],
  });
});

test("a snapshot opens in Explore on its probe's tokens, written as a text its tokenizer reads back", async () => {
  const { probeText } = await mod("train.js");
  assert.equal(probeText(["box", "bird", "=", "box", "bird"], "copy"), "box bird = box bird");
  // the text task's byte-level pieces: "Ġ" is the space before a word
  // the text task's byte-level pieces: "Ġ" the space before a word, "Ċ" a newline, "Ã©" the two bytes of "é"; the
  // last 8 pieces left out
  const pieces = ["def", "Ġf", "(", "x", "):", "Ċ", "ĠĠ", "Ġcaf", "Ã©"];
  assert.equal(probeText([...pieces, ..."abcdefgh"], "text"), "def f(x):\n   café");
});

test("head similarity is the least alike pair of a layer's heads, and a claim's measure names its curve", async () => {
  const { curveOf, leastAlike } = await mod("trainplot.js");
  const grid = [
    [
      [1, 0.9, 0.4],
      [0.9, 1, 0.7],
      [0.4, 0.7, 1],
    ],
    [[1]],
  ];
  eq(leastAlike(grid), { "layer 0": 0.4, "layer 1": null });
  eq(leastAlike(null), {});
  eq([curveOf("held_out_loss"), curveOf("induction")], ["loss", "induction"]);
});
