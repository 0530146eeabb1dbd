// The Vision workspace's pure helpers (static/js/visiongrid.js, visionpatch.js): a patch and its token both ways,
// the veil's opacity over each patch from a row of weights, the cursor the arrow keys move, the 2-D window's blocked
// cells, and the /api/patch body from the image shown and the other image, per position or per head.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod, none } from "./lib.mjs";

const TOKENS = ["[CLS]", ...Array.from({ length: 16 }, (_, i) => `p(${Math.floor(i / 4)},${i % 4})`)];

test("a patch and its token map both ways after the special tokens", async () => {
  const { firstPatch, patchOfToken, tokenOfPatch } = await mod("visiongrid.js");
  assert.equal(firstPatch(TOKENS), 1);
  assert.equal(firstPatch(["[CLS]", "[DIST]", "p(0,0)"]), 2);
  assert.equal(firstPatch(["a", "b"]), -1);
  for (let t = 1; t < TOKENS.length; t++) {
    const p = patchOfToken(t, [4, 4], 1);
    assert.equal(TOKENS[t], `p(${p.row},${p.col})`);
    assert.equal(tokenOfPatch(p.row, p.col, 4, 1), t);
  }
  none(patchOfToken(0, [4, 4], 1), "the [CLS] is no patch");
  none(patchOfToken(17, [4, 4], 1), "past the grid");
  eq(patchOfToken(6, [2, 3], 1), { row: 1, col: 2 }); // a grid wider than tall
});

test("the veil is 1 - w / max over the patches, clear on the most attended patch", async () => {
  const { veilAlphas } = await mod("visiongrid.js");
  // the [CLS] column's weight (0.5) is not a patch's: the veil reads the patches only
  eq(veilAlphas([0.5, 0.1, 0.2, 0.0, 0.2], [2, 2], 1), [0.5, 0, 1, 0]);
  eq(veilAlphas([1, 0, 0, 0, 0], [2, 2], 1), [1, 1, 1, 1]); // nothing on a patch: every patch veiled
  const { meanRow } = await mod("visiongrid.js");
  const heads = [{ weights: [[0.2, 0.8]] }, { weights: [[0.6, 0.4]] }];
  const mean = meanRow(heads, 0);
  assert.ok(Math.abs(mean[0] - 0.4) < 1e-12 && Math.abs(mean[1] - 0.6) < 1e-12, String(mean));
});

test("the arrow keys move the cursor on the grid and stop at its edges", async () => {
  const { moveCursor } = await mod("visiongrid.js");
  eq(moveCursor({ row: 0, col: 0 }, "ArrowRight", [4, 4]), { row: 0, col: 1 });
  eq(moveCursor({ row: 0, col: 0 }, "ArrowUp", [4, 4]), { row: 0, col: 0 });
  eq(moveCursor({ row: 3, col: 2 }, "ArrowDown", [4, 4]), { row: 3, col: 2 });
  eq(moveCursor({ row: 1, col: 1 }, "End", [4, 4]), { row: 3, col: 3 });
  none(moveCursor({ row: 1, col: 1 }, "a", [4, 4]));
});

test("a 2-D window blocks each patch from the patches more than its radius away, never the [CLS]", async () => {
  const { blockedCells, keyBlocked, windowBlocked } = await mod("visiongrid.js");
  const cells = windowBlocked(1, [4, 4], 1);
  const blocked = new Set(cells.map(([q, k]) => `${q},${k}`));
  for (let q = 0; q < 16; q++) {
    for (let k = 0; k < 16; k++) {
      const far = Math.max(Math.abs(Math.floor(q / 4) - Math.floor(k / 4)), Math.abs((q % 4) - (k % 4)));
      assert.equal(blocked.has(`${q + 1},${k + 1}`), far > 1, `p${q} -> p${k}`);
    }
  }
  // a corner patch sees 4 patches, an inner one 9: 16 * 16 - (4 * 4 + 8 * 6 + 4 * 9) cells blocked
  assert.equal(cells.length, 256 - 100);
  assert.ok(
    cells.every(([q, k]) => q > 0 && k > 0),
    "the [CLS] row and column are left",
  );
  eq(windowBlocked(3, [4, 4], 1), []); // a radius the grid fits in blocks nothing
  eq(keyBlocked(2, 3), [
    [0, 2],
    [1, 2],
    [2, 2],
  ]);
  // a blocked key and the window together list each cell once
  const both = blockedCells([16], 1, [4, 4], 1, 17);
  assert.equal(new Set(both.map(String)).size, both.length);
  assert.ok(
    both.some(([q, k]) => q === 0 && k === 16),
    "the key's column, the [CLS]'s row too",
  );
});

test("a row of the arrays form (a Float32Array) veils as its numbers in a plain array do", async () => {
  const { veilAlphas } = await mod("visiongrid.js");
  const row = new Float32Array([0.3, 0.1, 0.7, 0.2, 0.05]);
  assert.deepEqual(veilAlphas(row, [2, 2], 1), veilAlphas(Array.from(row), [2, 2], 1));
});

test("the patch body sends the image shown as clean and the other image, a sample or an upload, as corrupted", async () => {
  const { otherImage, patchBody } = await mod("visionpatch.js");
  const shown = { body: { sample: "digit-0" }, label: "digit-0" };
  const digit = otherImage("digit", "8", null);
  eq(digit, { body: { sample: "digit-8" }, label: "digit-8" });
  eq(patchBody("digits", shown, digit), {
    clean: { model: "digits", sample: "digit-0" },
    corrupted: { model: "digits", sample: "digit-8" },
    hook: "resid_pre",
    metric: { kind: "output_distance" },
  });
  const photo = patchBody("digits", shown, otherImage("china", "8", null), "z");
  eq([photo.corrupted, photo.hook], [{ model: "digits", sample: "china" }, "z"]);
  const upload = { body: { image: "data:image/png;base64,iVBOR" }, label: "mine.png" };
  const own = patchBody(
    "digits",
    { body: { image: "data:image/jpeg;base64,/9j/" }, label: "a.jpg" },
    otherImage("file", "8", upload),
  );
  eq(own.clean, { model: "digits", image: "data:image/jpeg;base64,/9j/" });
  eq(own.corrupted, { model: "digits", image: "data:image/png;base64,iVBOR" });
  // nothing to send: no file chosen yet, or no digit's number
  for (const [choice, n] of [
    ["file", "8"],
    ["digit", ""],
    ["digit", "-1"],
    ["digit", "2.5"],
  ]) {
    none(otherImage(choice, n, null), `${choice} ${n}`);
  }
});

test("a per-head answer names the head that brings back the most, the share clamped to 0..1", async () => {
  const { bestHead, headLine, share } = await mod("visionpatch.js");
  const got = {
    recovered: [
      [0.1, -0.9],
      [0.6, null],
    ],
    corrupted_metric: 1.25,
    columns: 2,
  };
  // a head that takes the output further away (-0.9) is larger in size, but brings nothing back
  eq(bestHead(got.recovered), { layer: 1, head: 0, value: 0.6 });
  assert.equal(
    headLine(got, "china", "digit-0"),
    "From china to digit-0: the final output is 1.250 away; head 0 of layer 1 brings back the most (0.600 of the difference).",
  );
  none(
    bestHead([
      [-0.2, null],
      [0, -1],
    ]),
  );
  assert.match(
    headLine({ ...got, recovered: [[null, -0.1]] }, "a", "b"),
    /no head alone brings it any of the way back/,
  );
  eq([share(-0.9), share(0.6), share(1.7), share(null)], [0, 0.6, 1, 0]);
});

// Every layer's heads at once (static/js/visionlayers.js): the rows drawn, their veils as one bitmap, the keyboard.
const LAYERS = [
  {
    heads: [
      {
        weights: [
          [0.1, 0.6, 0.3],
          [0.2, 0.2, 0.6],
        ],
      },
      {
        weights: [
          [0.5, 0.5, 0],
          [0, 0.25, 0.75],
        ],
      },
    ],
    rollout: [[0.3, 0.3, 0.4]],
  },
];

test("each layer's grid row is its heads' rows of the token shown, then their mean or the rollout", async () => {
  const { layerRows } = await mod("visionlayers.js");
  eq(layerRows(LAYERS, "patch", 1), [
    [
      [0.2, 0.2, 0.6],
      [0, 0.25, 0.75],
      [0.1, 0.225, 0.675],
    ],
  ]);
  eq(layerRows(LAYERS, "cls", 1)[0].slice(0, 2), [
    [0.1, 0.6, 0.3],
    [0.5, 0.5, 0],
  ]); // the [CLS]'s, whatever patch
  eq(layerRows(LAYERS, "rollout", 1)[0][2], [0.3, 0.3, 0.4]);
});

test("the veils of every thumbnail are one bitmap, a pixel a patch at the veil's most times its alpha", async () => {
  const { veilBytes } = await mod("visionlayers.js");
  const { VEIL_MAX } = await mod("visionpicture.js");
  // 2 layers x 2 columns of a 1 x 2 grid: each cell's alphas [a, b]
  const cells = [
    [
      [0, 1],
      [0.5, 0.25],
    ],
    [
      [1, 0],
      [0.1, 0.9],
    ],
  ];
  const { width, height, data } = veilBytes(cells, [1, 2], [10, 20, 30]);
  assert.equal(width, 4);
  assert.equal(height, 2);
  const alpha = (x, y) => data[(y * width + x) * 4 + 3];
  // row y is a layer; x is col * 2 + the patch's column
  eq(
    [0, 1, 2, 3].map((x) => alpha(x, 1)),
    [1, 0, 0.1, 0.9].map((a) => Math.round(255 * VEIL_MAX * a)),
  );
  assert.equal(alpha(3, 0), Math.round(255 * VEIL_MAX * 0.25));
  eq(Array.from(data.slice(0, 3)), [10, 20, 30]);
});

test("the arrow keys move the grid's tab stop and stop at its edges; each patch a whole number of pixels", async () => {
  const { cellGeometry, headOfColumn, moveCell } = await mod("visionlayers.js");
  eq(moveCell({ layer: 0, col: 0 }, "ArrowDown", 12, 13), { layer: 1, col: 0 });
  eq(moveCell({ layer: 0, col: 0 }, "ArrowUp", 12, 13), { layer: 0, col: 0 });
  eq(moveCell({ layer: 11, col: 12 }, "ArrowRight", 12, 13), { layer: 11, col: 12 });
  eq(moveCell({ layer: 4, col: 5 }, "End", 12, 13), { layer: 4, col: 12 });
  eq(moveCell({ layer: 4, col: 5 }, "Home", 12, 13), { layer: 4, col: 0 });
  none(moveCell({ layer: 4, col: 5 }, "x", 12, 13));
  const g = cellGeometry([14, 14], 1);
  assert.equal(g.w, 14 * g.s);
  assert.equal(g.cw, g.w + 2 * g.pad);
  assert.ok(cellGeometry([14, 14], 2).s >= 2 * g.s, "twice the pixels a patch on a screen of twice the density");
  assert.equal(headOfColumn(12, 12), "mean");
  assert.equal(headOfColumn(3, 12), "3");
});
