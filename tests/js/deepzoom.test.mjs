// The Long input panel's pure helpers: which models it offers for a text's length (longmodels.js), and the geometry
// around the deep-zoom canvas (zoomaxes.js): the axes' ticks, the minimap's rectangle and where its click moves the
// view, the keyboard cell cursor. tests/browser/test_deepzoom_page.py checks the same on the page against the API.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod } from "./lib.mjs";

// /api/models' entries as far as the panel reads them
const MODELS = [
  {
    name: "textbook",
    reads: ["text", "tokens", "x", "weights"],
    max_positions: null,
    max_tokens: null,
    default_text: "x1 x2",
  },
  {
    name: "random",
    reads: ["text", "tokens", "x", "options"],
    max_positions: null,
    max_tokens: null,
    options: { positions: false },
  },
  { name: "minilm", reads: ["text", "tokens"], max_positions: 512, max_tokens: 512, default_text: "The animal" },
  { name: "induction", reads: ["text", "tokens"], max_positions: 64, max_tokens: 64, default_text: "red ball" },
  {
    name: "pycode",
    reads: ["text", "tokens"],
    max_positions: 256,
    max_tokens: 256,
    default_text: "def f(x):\n    return x\n",
  },
  { name: "mine", reads: ["text", "tokens"], max_positions: null, max_tokens: 2048, default_text: "hello" },
  { name: "given", reads: ["text", "tokens", "scores", "pattern", "values"], max_positions: null, max_tokens: null },
];

test("the models offered take the text's length; the others are named with their positions", async () => {
  const L = await mod("longmodels.js");
  const names = (words) => L.longChoice(MODELS, words).offered.map((m) => m.name);
  eq(names(0), ["random", "minilm", "induction", "pycode", "mine"]); // textbook and given: matrices typed in, never offered
  eq(names(64), ["random", "minilm", "induction", "pycode", "mine"]); // a model's own positions are enough
  eq(names(65), ["random", "minilm", "pycode", "mine"]);
  eq(names(5000), ["random"]);
  eq(L.longChoice(MODELS, 300).absent, [
    { name: "induction", positions: 64 },
    { name: "pycode", positions: 256 },
  ]);
  eq([L.positionsOf(MODELS[1]), L.positionsOf(MODELS[4]), L.positionsOf(MODELS[5])], [null, 256, 2048]);
  const line = L.absentLine(L.longChoice(MODELS, 5000).absent, 5000);
  assert.match(
    line,
    /^Not offered for 5,000 words: minilm \(512 positions\), induction \(64 positions\), pycode \(256 positions\), mine \(2,048 positions\)\./,
  );
  eq(L.absentLine([], 10), "");
  eq(
    L.fillable(MODELS).map((m) => m.name),
    ["minilm", "induction", "pycode", "mine"],
  );
});

test("a model's own text fills its positions and never passes them", async () => {
  const L = await mod("longmodels.js");
  const code = "def f(x):\n    return x\n";
  // pycode reads this text as 10 tokens (its <|endoftext|> counted): 25 copies, 250 tokens at most
  const filled = L.fillText(code, 10, 256);
  eq(filled.split("def f").length - 1, 25);
  assert.ok(filled.startsWith(code) && filled.endsWith("return x"));
  eq(L.fillText("red ball", 3, 64), Array(21).fill("red ball").join(" ")); // words: joined by a space
  eq(L.fillText("a b c d", 300, 256), "a b c d"); // longer than the positions: one copy, the server says so
});

test("the axes: round steps apart, every position with its token once a token fits", async () => {
  const A = await mod("zoomaxes.js");
  eq([A.tickStep(0.1), A.tickStep(1), A.tickStep(3), A.tickStep(10), A.tickStep(13.9)], [1000, 100, 20, 10, 5]);
  // 6,000 positions fitted to 512 pixels: ticks every 1,000 from 0, each at its position's middle
  const fitted = A.axisTicks(0, 6000, 512 / 6000, 6000);
  eq([fitted.tokens, fitted.step, fitted.ticks.map((t) => t.at)], [false, 1000, [0, 1000, 2000, 3000, 4000, 5000]]);
  assert.ok(Math.abs(fitted.ticks[1].px - 1000.5 * (512 / 6000)) < 1e-9);
  // zoomed in past 14 pixels a position, from position 100.25: every position whose middle is in view
  const close = A.axisTicks(100.25, 100.25 + 512 / 16, 16, 6000);
  eq([close.tokens, close.step, close.ticks[0].at, close.ticks.at(-1).at, close.ticks.length], [true, 1, 100, 131, 32]);
  eq(close.ticks[0].px, (100.5 - 100.25) * 16);
  // a view past the matrix's end has no tick beyond it
  eq(A.axisTicks(5990, 6022, 16, 6000).ticks.at(-1).at, 5999);
});

test("the minimap: the view's rectangle, and a click that centres the view there", async () => {
  const A = await mod("zoomaxes.js");
  const view = { k0: 1500, q0: 3000, k1: 2100, q1: 3600 };
  eq(A.minimapRect(view, 6000, 120), { x: 30, y: 60, w: 12, h: 12 });
  // a view wider than the matrix (the whole of a short run) shows the whole of it
  eq(A.minimapRect({ k0: -10, q0: -10, k1: 300, q1: 300 }, 200, 100), { x: 0, y: 0, w: 100, h: 100 });
  const to = A.minimapTarget(90, 30, 120, 6000, { k: 600, q: 600 });
  eq(to, { ox: 4200, oy: 1200 }); // the middle of the view: key 4,500, query 1,500
  const r = A.minimapRect({ k0: to.ox, q0: to.oy, k1: to.ox + 600, q1: to.oy + 600 }, 6000, 120);
  eq([r.x + r.w / 2, r.y + r.h / 2], [90, 30]);
});

test("the cell cursor: a block of the level at a time, inside the matrix, the view following it", async () => {
  const A = await mod("zoomaxes.js");
  const at = { query: 10, key: 4 };
  eq(A.moveCursor(at, "ArrowRight", 1, 100), { query: 10, key: 5 });
  eq(A.moveCursor(at, "ArrowUp", 1, 100), { query: 9, key: 4 });
  eq(A.moveCursor(at, "ArrowLeft", 8, 100), { query: 8, key: 0 }); // blocks of 8: on its block's first position
  eq(A.moveCursor({ query: 99, key: 0 }, "ArrowDown", 1, 100), { query: 99, key: 0 }); // the matrix's last row
  eq(A.moveCursor(at, "PageDown", 1, 100), { query: 26, key: 4 });
  eq(A.moveCursor(at, "End", 1, 100), { query: 10, key: 99 });
  eq(A.moveCursor(at, "Home", 1, 100), { query: 10, key: 0 });
  eq(A.moveCursor(at, "x", 1, 100), null);
  const view = { k0: 100, q0: 200 };
  eq(A.followCursor(view, { query: 210, key: 110 }, 1, { k: 32, q: 32 }), { ox: 100, oy: 200 }); // in view: stays
  eq(A.followCursor(view, { query: 232, key: 99 }, 1, { k: 32, q: 32 }), { ox: 99, oy: 201 }); // just outside
});
