// The page's views' pure helpers: links, request bodies, formatters and reducers, called directly (none of them
// needs a page; tests/test_js.py runs this file with node's test runner). The page behind each is tested in Chromium
// by the tests/browser/ module named above each test.
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod, none, plain } from "./lib.mjs";

const close = (actual, expected, rel = 1e-6) =>
  assert.ok(Math.abs(actual - expected) <= rel * Math.abs(expected), `${actual} is not ${expected}`);

// test_beyond_page.py
test("the patch setting round-trips and the body is built from the tokens on screen", async () => {
  const P = await mod("patch.js");
  const v = { position: 3, hook: "mlp_out", token: "a.b c%" };
  const att = { model: "minilm", text: "the cat sat", include: ["weights"], layer: 2, masks: { causal: true } };
  const out = plain({
    back: P.decodePatch(P.encodePatch(v)),
    junk: [P.decodePatch("x"), P.decodePatch("2.heads.moon"), P.decodePatch("2.z.%E0%A4%A")],
    body: P.patchRequest(att, ["[CLS]", "the", "cat", "sat", "[SEP]"], { position: 2, hook: "z", token: "dog" }, false),
    past: P.patchRequest(att, ["[CLS]", "the"], { position: 2, hook: "z", token: "dog" }, false),
    ld: { ...v, metric: { kind: "logit_diff", position: 4, correct: " a,b", wrong: "x@y" }, cell: [1, 2] },
    ldBack: P.decodePatch(
      P.encodePatch({ ...v, metric: { kind: "logit_diff", position: 4, correct: " a,b", wrong: "x@y" }, cell: [1, 2] }),
    ),
    ldBody: P.patchRequest(
      att,
      ["a", "b", "c"],
      { position: 0, hook: "z", token: "d", metric: { kind: "logit_diff", position: 2, correct: "b", wrong: "c" } },
      true,
    ),
    ldPast: P.patchRequest(
      att,
      ["a", "b", "c"],
      { position: 0, hook: "z", token: "d", metric: { kind: "logit_diff", position: 3, correct: "b", wrong: "c" } },
      true,
    ),
    ldNoPredict: P.patchRequest(
      att,
      ["a", "b", "c"],
      { position: 0, hook: "z", token: "d", metric: { kind: "logit_diff", position: 2, correct: "b", wrong: "c" } },
      false,
    ),
  });
  eq(out.back, { position: 3, hook: "mlp_out", token: "a.b c%" });
  eq(out.junk, [null, null, null]);
  const body = out.body;
  eq(body.clean, { model: "minilm", masks: { causal: true }, tokens: ["[CLS]", "the", "cat", "sat", "[SEP]"] });
  eq([body.corrupted.tokens[2], body.clean.tokens[2]], ["dog", "cat"]);
  eq([body.hook, body.metric], ["z", { kind: "output_distance" }]);
  none(out.past);
  assert.deepStrictEqual(out.ldBack, out.ld); // a token with "," or "@" in it survives the link
  eq(out.ldBody.metric, { kind: "logit_diff", position: 2, correct: "b", wrong: "c" });
  eq(out.ldPast.metric, { kind: "loss" }); // a position past the text: the default metric
  eq(out.ldNoPredict.metric, { kind: "output_distance" });
});

// test_beyond_page.py
test("the best patched cell is the one that recovers most, and a cell that takes the output away is named apart", async () => {
  const P = await mod("patch.js");
  // L0H1 takes the output 3.5 times the difference further from the clean run; L1H0 brings back 0.6 of it
  const grid = (recovered) => ({
    hook: "z",
    tokens: ["a", "b"],
    metric: { kind: "loss" },
    clean_metric: 1,
    corrupted_metric: 2,
    rows: recovered.length,
    columns: recovered[0].length,
    forwards: 2 + recovered.length * recovered[0].length,
    recovered,
  });
  const mixed = grid([
    [0.1, -3.5],
    [0.6, null],
  ]);
  eq(P.bestCell(mixed), { layer: 1, column: 0, value: 0.6 });
  eq(P.mostNegativeCell(mixed), { layer: 0, column: 1, value: -3.5 });
  const summary = P.patchSummary(mixed);
  assert.ok(summary.includes("Most recovered by one cell: L1 H0 (0.600)."), summary);
  assert.ok(summary.includes("Most negative: L0 H1 (-3.500), a patch that takes the output further"), summary);
  // nothing below 0: no cell named most negative
  const positive = grid([[0.2, 0.9]]);
  eq([P.bestCell(positive), P.mostNegativeCell(positive)], [{ layer: 0, column: 1, value: 0.9 }, null]);
  assert.ok(!P.patchSummary(positive).includes("Most negative"), P.patchSummary(positive));
  // every share at or below 0: the largest is still the one Enter opens, but no cell is said to recover any
  const harmful = grid([[-0.2, -4, 0]]);
  eq(P.bestCell(harmful), { layer: 0, column: 2, value: 0 });
  const words = P.patchSummary(harmful);
  assert.ok(words.includes("No one cell recovers any of the difference; the largest share is L0 H2 (0.000)."), words);
  assert.ok(!words.includes("Most recovered"), words);
  assert.ok(words.includes("Most negative: L0 H1 (-4.000)"), words);
  none(P.bestCell(grid([[null, null]])));
});

// test_blockwise_page.py
test("the online softmax helper matches a softmax", async () => {
  const b = await mod("blockwise.js");
  const s = [0.5, 3, -1, 2, 7, 1, -4];
  const eligible = [true, true, false, true, true, false, true];
  const dense = s.map((v, k) => (eligible[k] ? Math.exp(v) : 0));
  const z = dense.reduce((a, v) => a + v, 0);
  const want = dense.map((v) => v / z);
  const runs = [1, 2, 3, 7, 50].map((B) => b.maxAbsDiff(b.onlineSoftmax(s, eligible, B).weights, want));
  const noneEligible = b.onlineSoftmax([1, 2], [false, false], 1);
  const first = b.onlineSoftmax(s, null, 3).steps;
  const masked = b.onlineSoftmax(s, eligible, 2).weights[2];
  const out = plain({ runs, none: noneEligible.weights, rescale: first.map((st) => st.rescale), masked });
  assert.ok(Math.max(...out.runs) < 1e-15, String(out.runs));
  eq([out.none, out.masked], [[0, 0], 0]);
  // blocks of 3: max 3, then 7 (the sum so far shrinks by exp(3 - 7)), then -4 (the maximum stays: a factor of 1)
  none(out.rescale[0]);
  close(out.rescale[1], Math.exp(3 - 7));
  assert.equal(out.rescale[2], 1);
});

// test_deepzoom_agg.py
test("the part of a parent under a finer tile", async () => {
  const z = await mod("zoomview.js");
  // a parent of 1,024 positions from 1,024 (blocks of 4: 256 pixels), and one at the matrix's end (S = 1,800:
  // 776 positions, 194 pixels); their children span 512 positions (blocks of 2)
  const parent = { k0: 1024, q0: 1024, cell: 4, canvas: { width: 256, height: 256 } };
  const edge = { k0: 1024, q0: 0, cell: 4, canvas: { width: 194, height: 256 } };
  const got = plain({
    first: z.parentPart(2, 2, 512, parent),
    second: z.parentPart(3, 2, 512, parent),
    cut: z.parentPart(3, 1, 512, edge),
    outside: z.parentPart(0, 2, 512, parent),
  });
  eq(got.first, { sx: 0, sy: 0, sw: 128, sh: 128 });
  eq(got.second, { sx: 128, sy: 0, sw: 128, sh: 128 });
  eq(got.cut, { sx: 128, sy: 128, sw: 66, sh: 128 });
  none(got.outside);
});

// test_dtype_page.py
test("dtype goes out on attention only and round-trips through the link", async () => {
  const S = await mod("state.js");
  const R = { ...(await mod("requests.js")), ...(await mod("perturbbodies.js")) };
  const s = { ...S.defaultState(), model: "random", text: "a b c", dtype: "bfloat16" };
  const req = R.buildRequest(s, { layers: 1, d_model: 64 }, 3);
  const out = plain({
    body: req.dtype,
    link: S.encodeState(s),
    back: S.decodeState("?m=random&dtype=float16").dtype,
    junk: S.decodeState("?m=random&dtype=float8").dtype,
    plain: "dtype" in R.buildRequest(S.defaultState(), null, 3),
    heads: "dtype" in R.headTypesRequest(req),
    single: "dtype" in R.singleRequest(req),
    batch: "dtype" in R.perturbBatchRequest(req, 0, 1, { kind: "shift", amount: 1 }),
  });
  assert.equal(out.body, "bfloat16");
  assert.ok(out.link.includes("dtype=bfloat16"));
  assert.equal(out.back, "float16");
  none(out.junk);
  eq([out.plain, out.heads, out.single, out.batch], [false, false, false, false]);
});

// test_first_visit.py
test("first visit reads the link and the stored mark", async () => {
  const S = await mod("start.js");
  const read = [];
  const f = (search, mark) => S.firstVisit(search, () => (read.push(search), mark));
  eq([f("", null), f("?m=random", null), f("", "1"), f("?", null)], [true, false, false, true]);
  eq(read, ["", "", "?"]); // a link with state never reads the stored mark
});

// test_flow_batch_page.py
test("the method round-trips and old links stay rollout", async () => {
  const R = await mod("rollout.js");
  const att = { model: "random", text: "a b", masks: {}, include: ["weights"], layer: 1, sinks: { hide: "first" } };
  const out = plain({
    old: R.decodeRollout("mean.1"),
    flow: R.decodeRollout("max.0.flow"),
    named: R.decodeRollout("min.1.rollout"),
    junk: ["mean.1.", "mean.1.pipes", "mean.2.flow", "flow", ""].map(R.decodeRollout),
    enc: [
      { heads: "mean", residual: true },
      { heads: "max", residual: false, method: "flow" },
      { heads: "min", residual: true, method: "rollout" },
    ].map(R.encodeRollout),
    reqFlow: R.rolloutRequest(att, { heads: "max", residual: false, method: "flow" }),
    reqRoll: R.rolloutRequest(att, { heads: "mean", residual: true }),
    maps: R.rolloutMaps({ layers: [{ index: 0, rollout: [[1]], attention_flow: [[0.5]] }], config: {} }, 0, "flow"),
  });
  eq(out.old, { heads: "mean", residual: true, method: "rollout" }); // every link before flow
  eq(out.flow, { heads: "max", residual: false, method: "flow" });
  assert.equal(out.named.method, "rollout");
  eq(out.junk, [null, null, null, null, null]);
  eq(out.enc, ["mean.1", "max.0.flow", "min.1"]); // rollout keeps its old form
  const flow = out.reqFlow;
  eq([flow.include, flow.rollout], [["attention_flow"], { heads: "max", residual: false }]);
  assert.ok(!("layer" in flow) && !("sinks" in flow));
  eq(out.reqRoll.include, ["rollout"]);
  eq(out.maps, [{ layer: 0, matrix: [[0.5]] }]);
});

// test_lessons.py
test("numbers are read as a learner types them", async () => {
  const L = await mod("lessons.js");
  const out = plain(["0.25", "1/4", " 1/√2 ", "0,5", "21", "abc", "", "1/"].map((t) => L.parseNumber(t)));
  eq([out[0], out[1], out[3], out[4]], [0.25, 0.25, 0.5, 21]);
  close(out[2], 0.70710678);
  for (const v of out.slice(5)) assert.ok(v === null || Number.isNaN(v), String(v));
});

// test_own_model_page.py
test("the label and reference line of a model", async () => {
  const M = await mod("modelinfo.js");
  const mine = {
    name: "mine",
    family: "llama",
    layers: 2,
    heads: 4,
    d_model: 64,
    reference: { library: "transformers 5.24.0", max_abs_diff: { weights: 3.1e-7, output: 2e-8 } },
  };
  const lib = "transformers 5.24.0";
  const wrong = { ...mine, reference: { library: lib, max_abs_diff: { weights: 1e-8, output: 0.31 } } };
  const why = "transformers is not installed";
  const alone = { ...mine, reference: { library: null, max_abs_diff: null, reason: why } };
  const random = { name: "random", family: "random", layers: 1, heads: 4, d_model: 64, reference: null };
  const out = plain({
    mine: M.modelLabel(mine, { model: "x" }),
    random: M.modelLabel(random, { model: "random", options: { heads: 8 } }),
    lines: [mine, wrong, alone, random].map(M.referenceLine),
  });
  assert.equal(out.mine, "mine · llama, 2 layers × 4 heads, width 64");
  assert.equal(out.random, "random · 8 heads"); // a built-in model is its own family: no family or width said
  eq(out.lines, [
    "matches transformers 5.24.0 to 3e-7",
    "differs from transformers 5.24.0 by up to 3e-1", // the worse of the two differences, and no "matches"
    "Not compared with transformers: transformers is not installed",
    "",
  ]);
});

// test_gemma_families.py: what /api/models says of each layer's kind, as the picker's line
test("the line of a model with local and global layers", async () => {
  const M = await mod("modelinfo.js");
  const k = (index, kind, window, rope_theta) => ({ index, kind, window, rope_theta, softcap: null });
  const out = plain([
    M.layerKindsLine({ layer_kinds: [k(0, "local", 512, 1e4), k(1, "global", null, 1e4)] }),
    M.layerKindsLine({ layer_kinds: [k(0, "local", 512, 1e4), k(1, "global", null, 1e6)] }),
    M.layerKindsLine({ layer_kinds: [k(0, "global", null, 1e4), k(1, "global", null, 1e4)] }),
    M.layerKindsLine({ layer_kinds: [k(0, "global", null, 1e4), k(1, "global", null, 1e6)] }),
    M.layerKindsLine({ name: "textbook" }),
    M.layerKindsLine({ layer_kinds: [k(0, "global", null, 5e6), k(1, "global", null, null)] }),
    M.layerKindsLine({ layer_kinds: [k(0, "global", null, 5e6), k(1, "no_positions", null, null)] }),
  ]);
  eq(out, [
    "L0 local 512 · L1 global",
    "L0 local 512 (theta 10000) · L1 global (theta 1e+6)", // the thetas said where the layers differ in them
    "", // every layer global with one theta: nothing particular to say
    "L0 global (theta 10000) · L1 global (theta 1e+6)",
    "",
    "L0 global (theta 5e+6) · L1 global (no rotary)", // a layer without rotary among layers with it
    "L0 global (theta 5e+6) · L1 no positions", // SmolLM3's: as /api/models says it
  ]);
});

test("one local layer shown is drawn under its own eligibility", async () => {
  const Sel = await mod("selectors.js");
  const grid = (rows) => rows.map((r) => r.map(Boolean));
  const all = grid([
      [1, 0, 0],
      [1, 1, 0],
      [1, 1, 1],
    ]),
    own = grid([
      [1, 0, 0],
      [1, 1, 0],
      [0, 1, 1],
    ]);
  const head = {
    index: 0,
    kv_group: 0,
    weights: [
      [1, 0, 0],
      [0.5, 0.5, 0],
      [0, 0.5, 0.5],
    ],
  };
  const result = {
    model: "g",
    tokens: ["a", "b", "c"],
    eligible: all,
    reasons: null,
    config: { n_layers: 2, n_heads: 1, n_kv_heads: 1 },
    masks: { causal: true, padding: null, window: null, blocked: [] },
    layers: [
      { index: 0, window: 2, eligible: own, heads: [head] },
      { index: 1, window: null, eligible: null, heads: [head] },
    ],
  };
  const drawn = (layer) =>
    Sel.selectView({ run: { result }, ui: { layer, view: "weights", palette: "viridis" } }).eligible;
  eq(plain([drawn(0), drawn(1), drawn("all")]), [own, all, all]);
  // a cell only the layer's window masks is said to be masked by it, in the grid's status and the hover text
  const M = await mod("masks.js"),
    F = await mod("focuscells.js");
  const reasons = {
    causal: grid([
      [0, 1, 1],
      [0, 0, 1],
      [0, 0, 0],
    ]),
  };
  const view = {
    ...Sel.selectView({
      run: { result: { ...result, reasons } },
      ui: { layer: 0, view: "weights", palette: "viridis" },
    }),
  };
  eq(plain([M.cellReasons(view, 2, 0), M.cellReasons(view, 0, 1), M.cellReasons(view, 2, 1)]), [
    ["layer window"],
    ["causal"],
    [],
  ]);
  assert.ok(F.hoverTexts(view, head)[2][0].includes("masked (layer window)"));
});

// test_positions_page.py
test("the count from 1 round-trips through the link", async () => {
  const S = await mod("state.js");
  const on = S.decodeState("?m=textbook&causal=1&from1=1");
  const off = S.decodeState("?m=textbook&causal=1");
  eq(
    [on.from1, off.from1, S.encodeState(on).includes("from1=1"), S.encodeState(off).includes("from1")],
    [true, false, true, false],
  );
});

test("the formatter shifts what is printed and reads back what is typed", async () => {
  const P = await mod("positions.js");
  const zero = [P.pos(4), P.typedPos(4), P.posList([0, 3])];
  const changed = P.countFrom1(true);
  const one = [P.pos(4), P.typedPos(5), P.posList([0, 3]), P.firstPosition(), P.countFrom1(true)];
  P.countFrom1(false);
  eq({ zero, changed, one }, { zero: [4, 4, "0, 3"], changed: true, one: [5, 4, "1, 4", 1, false] });
});

// test_sinks_rollout_page.py
test("sinks round-trip through the link and go out as the body field", async () => {
  const S = await mod("state.js");
  const R = { ...(await mod("requests.js")), ...(await mod("perturbbodies.js")) };
  const back = (q) => {
    const s = S.decodeState(q);
    return [s.sinks, s.renorm, S.encodeState(s)];
  };
  const s = { ...S.defaultState(), model: "induction", text: "a b", sinks: [0, 3], renorm: false };
  const req = R.buildRequest(s, { layers: 2, d_model: 64 }, 2);
  const out = plain({
    first: back("?m=x&causal=0&sinks=first"),
    special: back("?m=x&causal=0&sinks=special"),
    pos: back("?m=x&causal=0&sinks=3,0,3&renorm=0"),
    junk: ["?m=x&sinks=-1", "?m=x&sinks=a,b", "?m=x&sinks=", "?m=x"].map((q) => S.decodeState(q).sinks),
    renormAlone: S.encodeState({ ...S.defaultState(), renorm: false }),
    body: req.sinks,
    heads: "sinks" in R.headTypesRequest(req),
    size: R.sizeKey(req) === R.sizeKey({ ...req, sinks: undefined }),
  });
  eq(out.first.slice(0, 2), ["first", true]);
  assert.ok(out.first[2].includes("sinks=first"));
  eq(out.special.slice(0, 2), ["special", true]);
  eq(out.pos.slice(0, 2), [[0, 3], false]);
  assert.ok(out.pos[2].includes("sinks=0%2C3") && out.pos[2].includes("renorm=0"));
  eq(out.junk, [null, null, null, null]);
  assert.ok(!out.renormAlone.includes("renorm")); // without sinks there is nothing to renormalise
  eq(out.body, { hide: [0, 3], renormalise: false });
  assert.equal(out.heads, false); // /api/heads, decode, perturb and patch return no weights and refuse sinks
  assert.equal(out.size, true);
});

// test_stream_page.py
// test_chapter_page.py, test_dtype_page.py, test_experiments.py
test("each page feature's body field reaches the bodies its declaration says", async () => {
  const S = await mod("state.js");
  const R = { ...(await mod("requests.js")), ...(await mod("perturbbodies.js")) };
  const F = await mod("features.js");
  const ui = { ...S.defaultState(), model: "induction", text: "a b c", sinks: "first", dtype: "float16" };
  const req = R.buildRequest({ ...ui, bug: "flipped_mask", scale: false, allMasked: "zero" }, { layers: 2 }, 3);
  const has = (body) => ["dtype", "sinks", "demo_bug", "scale", "all_masked"].filter((k) => k in body);
  const out = plain({
    attention: has(req),
    single: has(R.singleRequest(req)), // intervene, compare
    claim: has(R.claimRequest(req)), // perturb, the pinned side
    heads: has(R.headTypesRequest(req)), // head types, top heads, decode
    batch: has(R.perturbBatchRequest({ ...req, texts: ["a b", "c"] }, 1, 0, { kind: "shift", amount: 1 })),
    // what sets an answer's size is the same without the view's sinks, bug, scaling and all-masked rows
    size: R.sizeKey(req) === R.sizeKey(R.buildRequest({ ...ui, sinks: null }, { layers: 2 }, 3)),
    reaches: Object.values(F.FEATURES).map((f) => f.reach ?? null),
  });
  eq(out.attention, ["dtype", "sinks", "demo_bug", "scale", "all_masked"]);
  eq(out.single, ["sinks", "demo_bug", "scale", "all_masked"]);
  eq(out.claim, ["demo_bug", "scale", "all_masked"]);
  eq(out.heads, ["scale", "all_masked"]);
  eq(out.batch, ["demo_bug", "scale", "all_masked"]);
  assert.ok(out.size, "only the precision of the features' fields is in an answer's size key");
  for (const r of out.reaches) assert.ok(r === null || ["attention", "weights", "claims", "every"].includes(r), r);
  // an action type declared by two features is refused when the actions are gathered
  F.FEATURES.twice = { actions: { countSet: () => ({ type: "countSet" }) } };
  try {
    assert.throws(() => F.featureActions(), /action countSet is declared twice/);
  } finally {
    delete F.FEATURES.twice;
  }
});

test("an error frame reads as the server's error", async () => {
  // A stream that fails after its head: the page's reader throws the error frame as the API's error.
  const frames = await mod("frames.js");
  const doc = (obj) => {
    const header = new TextEncoder().encode(JSON.stringify(obj));
    const out = new Uint8Array(8 + header.length + 8);
    out.set([65, 84, 78, 65]);
    new DataView(out.buffer).setUint32(4, header.length, true);
    out.set(header, 8);
    return out;
  };
  const frame = (obj) => {
    const d = doc(obj),
      f = new Uint8Array(4 + d.length);
    new DataView(f.buffer).setUint32(0, d.length, true);
    f.set(d, 4);
    return f;
  };
  const head = frame({ head: { tokens: ["a"], config: { n_layers: 2 }, layers: [{ index: 0, heads: [] }] } });
  const error = frame({ error: { status: 422, code: "out_of_range", field: "precision", message: "too big" } });
  const body = new Blob([head, error]);
  let heard = null;
  let out = "no error";
  try {
    await frames.readStream(new Response(body), {
      onHead: (h) => {
        heard = h.layers.length;
      },
      toError: (e) => Object.assign(new Error(e.message), { code: e.code, field: e.field }),
    });
  } catch (e) {
    out = { message: e.message, code: e.code, field: e.field, heard };
  }
  eq(out, { message: "too big", code: "out_of_range", field: "precision", heard: 1 });
});

/** A run in flight with layer `shown` on screen, and the pieces its answers are made of. */
async function runInFlight(shown) {
  const store = await mod("store.js"),
    actions = await mod("actions.js"),
    sel = await mod("selectors.js");
  const layer = (i) => ({ index: i, heads: [{ index: 0, weights: [[1]] }] });
  const top = {
    model: "m",
    tokens: ["a"],
    eligible: [[true]],
    masks: { blocked: [] },
    reasons: null,
    config: { n_layers: 3, n_heads: 1, n_kv_heads: 1, layers_computed: 1, batch: null },
  };
  const s = store.initialState();
  return {
    store,
    actions,
    sel,
    layer,
    top,
    s: { ...s, ui: { ...s.ui, layer: shown }, run: { ...s.run, want: 1, started: 1, status: "loading" } },
  };
}

test("the run reducers keep the layer drawn when the others come", async () => {
  // runSucceeded with the head (partial), then runRest with the whole answer: the drawn layer's object is kept,
  // `base` stays, every layer is held, and nothing is waited for any more.
  const { store, actions, sel, layer, top, s: s0 } = await runInFlight(1);
  let s = s0;
  const head = { ...top, config: { ...top.config, layers_computed: 2 }, layers: [layer(1)] };
  s = store.reducer(s, actions.act.runSucceeded(head, { model: "m" }, null, true));
  const atHead = {
    rest: s.run.rest,
    held: sel.shownHeld(s),
    base: s.run.base === s.run.result,
    holds2: store.holdsLayer(s, 2),
  };
  const drawnLayer = s.run.result.layers[0];
  const deps = sel.shownDeps(s);
  const whole = { ...top, config: { ...top.config, layers_computed: 3 }, layers: [layer(0), layer(1), layer(2)] };
  s = store.reducer(s, actions.act.runRest(whole));
  const deps2 = sel.shownDeps(s);
  const out = plain({
    atHead,
    rest: s.run.rest,
    kept: s.run.result.layers[1] === drawnLayer,
    count: s.run.result.layers.length,
    computed: s.run.result.config.layers_computed,
    sameDeps: deps.length === deps2.length && deps.every((x, i) => x === deps2[i]),
  });
  eq(out.atHead, { rest: "loading", held: true, base: true, holds2: true });
  none(out.rest);
  assert.ok(out.kept);
  eq([out.count, out.computed], [3, 3]);
  assert.ok(out.sameDeps);
});

test("a switch to a layer still on its way is drawn when it comes", async () => {
  const { store, actions, sel, layer, top, s: s0 } = await runInFlight(0);
  let s = s0;
  s = store.reducer(s, actions.act.runSucceeded({ ...top, layers: [layer(0)] }, { model: "m" }, null, true));
  const want = s.run.want;
  s = store.reducer(s, actions.act.layerSet(2));
  const waiting = { want: s.run.want === want, held: sel.shownHeld(s), layer: s.ui.layer };
  s = store.reducer(s, actions.act.runRest({ ...top, layers: [layer(0), layer(1), layer(2)] }));
  const out = plain({ waiting, held: sel.shownHeld(s) });
  eq(out.waiting, { want: true, held: false, layer: 2 }); // no new run: the layer is on its way
  assert.ok(out.held);
});

// test_tokens_page.py
test("piece text marks what would not show", async () => {
  const P = await mod("piece.js");
  const labels = [" the", "\n", "\r\n", "\t", "  ", "", "你", "◌◌", "a b ", "שלום", "\u0007"];
  const out = plain({
    text: labels.map(P.pieceText),
    label: P.pieceLabel(" abcdefgh", 5),
    rtl: P.pieceLabel("שלום"),
    quote: P.pieceQuote("the"),
    title: P.pieceTitle(" the", true),
    held: P.pieceTitle("◌◌"),
  });
  eq(out.text, ["␣the", "↵", "↵", "→", "␣␣", "∅", "你", "◌◌", "a b␣", "שלום", "␇"]);
  assert.equal(out.label, "␣abc…"); // cut to 5 characters
  assert.equal(out.rtl, "\u2068שלום\u2069"); // right-to-left text isolated in a plain-text place
  assert.equal(out.quote, "“the”");
  assert.equal(out.title, '" the" · starts with a space · special token');
  assert.equal(out.held, '"◌◌" · 2 more bytes of the character before');
});

// test_moved_source_page.py
test("the strip helpers scale, name the top positions, and the body is built from state", async () => {
  const C = await mod("contrib.js");
  const R = { ...(await mod("requests.js")), ...(await mod("perturbbodies.js")) };
  const S = await mod("state.js");
  const base = { ...S.defaultState(), model: "random", text: "a b c" };
  const att = {
    model: "random",
    text: "a b",
    source: { text: "x y", padding: [true, false] },
    masks: { blocked: [] },
    include: ["weights"],
    layer: 0,
    sinks: { hide: "first" },
    demo_bug: "norm_over_sequence",
  };
  const url = (s) => S.encodeState(s).toString();
  const withSrc = { ...base, source: "x y z", perturbOn: true, perturb: { ...base.perturb, side: "source" } };
  const noSrc = { ...base, perturbOn: true, perturb: { ...base.perturb, side: "source" } };
  const out = plain({
    scale: C.stripScale([0, 2, 0.5]),
    zero: C.stripScale([0, 0]),
    top: C.topPositions(Float32Array.from([0.5, 2, 0.5, 1])),
    label: C.stripLabel([0.5, 2, 1], ["a", "b", "c"], "Head 0"),
    moved: R.buildRequest({ ...base, view: "moved" }, null, 3).include,
    weights: R.buildRequest(base, null, 3).include,
    body: R.perturbSourceRequest(att, "source", 1, { kind: "direction", amount: 2 }),
    query: R.perturbSourceRequest(att, "sideways", 0, { kind: "shift", amount: 1 }).side,
    url: url(withSrc),
    plain: url(noSrc),
    back: S.decodeState("?" + url(withSrc)).perturb.side,
    junk: S.decodeState("?m=random&pert=q,direction,1&pside=left").perturb.side ?? null,
  });
  eq(out.scale, { min: 0, max: 2, largest: 2 });
  eq(out.zero, { min: 0, max: 1, largest: 0 }); // nothing divides by 0
  eq(
    out.top.map((t) => t.position),
    [1, 3, 0],
  ); // largest first, ties to the earlier position
  assert.ok(out.label.startsWith("Head 0 adds to the layer output, per query position: most at 1 “b” 2.000"));
  assert.ok(out.label.includes("total 3.500"));
  assert.ok(out.moved.includes("value_norms") && out.moved.includes("head_contributions"));
  assert.ok(!out.weights.includes("head_contributions") && !out.weights.includes("value_norms"));
  const body = out.body;
  eq([body.source, body.side], [{ text: "x y", padding: [true, false] }, "source"]);
  eq([body.position, body.change], [1, { kind: "direction", norm: 2 }]);
  assert.equal(body.demo_bug, "norm_over_sequence"); // the claim is tested on the code the view shows
  for (const key of ["include", "layer", "sinks", "texts"]) assert.ok(!(key in body), key);
  assert.equal(out.query, "query");
  assert.ok(out.url.includes("pside=source") && !out.plain.includes("pside"));
  assert.equal(out.back, "source");
  none(out.junk);
});

// test_sight.py
test("the distance from the viewport", async () => {
  const { distance } = await mod("sight.js");
  const cases = [
    [{ top: 100, bottom: 400, width: 10, height: 300 }, 900, false, 0], // in sight
    [{ top: 1000, bottom: 1400, width: 10, height: 400 }, 900, false, 0], // within the margin
    [{ top: 1500, bottom: 1900, width: 10, height: 400 }, 900, false, 400], // below it
    [{ top: -700, bottom: -300, width: 10, height: 400 }, 900, false, 100], // scrolled past
    [{ top: 0, bottom: 0, width: 0, height: 0 }, 900, false, null], // hidden: drawn at once
    [{ top: 0, bottom: 0, width: 0, height: 0 }, 900, true, Infinity], // in a closed <details>
  ];
  for (const [box, viewport, closed, want] of cases) {
    eq(distance(box, viewport, closed), want, JSON.stringify(box));
  }
});

// test_typed_page.py
test("the typed helpers read rows and build the body", async () => {
  const T = await mod("typed.js");
  const R = await mod("typedsettings.js");
  const S = R;
  const include = ["scores", "weights", "stats", "output", "contexts", "qkv"];
  const req = { model: "given", text: "a b", include };
  const typed = {
    kind: "pattern",
    m: [
      [1, 0],
      [0.5, 0.5],
    ],
    values: null,
  };
  const out = plain({
    grid: T.parseGrid("1, 2\n\n[3 4]"),
    ragged: T.parseGrid("1 2\n3").error,
    word: T.parseGrid("1 x").error,
    labels: [R.labelsFor("a b", 2), R.labelsFor("a b", 3)],
    body: R.typedBody(req, typed),
    withValues: R.typedBody(req, { ...typed, values: [[1], [2]] }).include,
    link: S.parseTyped(JSON.stringify(typed)),
    bad: S.parseTyped('{"kind":"pattern","m":[[1,0]]}'),
  });
  eq(out.grid, {
    matrix: [
      [1, 2],
      [3, 4],
    ],
  });
  assert.ok(out.ragged.includes("row 2 has 1 numbers but row 1 has 2") && out.word.includes("“x” is not a number"));
  eq(out.labels, ["a b", "x1 x2 x3"]);
  eq(
    [out.body.pattern, out.body.include],
    [
      [
        [1, 0],
        [0.5, 0.5],
      ],
      ["scores", "weights", "stats"],
    ],
  );
  eq(out.withValues, ["scores", "weights", "stats", "output", "contexts"]);
  eq(out.link, {
    kind: "pattern",
    m: [
      [1, 0],
      [0.5, 0.5],
    ],
    values: null,
  });
  none(out.bad);
});

// test_widget.py (browser): the notebook widget's traits, the cell a press selects and the blocked-cell toggle
test("the widget reads its traits from a state, the cell pressed, and toggles a blocked cell", async () => {
  const W = await mod("widget.js");
  const s = { show: "head", ui: { layer: 1, focus: [1, 3], query: 5 }, highlight: { q: 2, k: 4 } };
  eq(W.traitsOf(s), { view: "head", layer: 1, head: 3, query: 5 });
  eq(W.selectedBy(s, s, { type: "headOpened", layer: 1, head: 0, query: null }), {
    layer: 1,
    head: 0,
    query: 2,
    key: 4,
  });
  eq(W.selectedBy(s, s, { type: "querySet", query: 6, key: 1 }), { layer: 1, head: 3, query: 6, key: 1 });
  eq(W.selectedBy(s, s, { type: "pairSet", q: 0, k: 7 }), { layer: 1, head: 3, query: 0, key: 7 });
  assert.equal(W.selectedBy(s, s, { type: "querySet", query: 6 }), undefined); // a query chosen from a list: no cell
  eq(W.toggledCell([[0, 1]], 2, 3), [
    [0, 1],
    [2, 3],
  ]);
  eq(
    W.toggledCell(
      [
        [0, 1],
        [2, 3],
      ],
      0,
      1,
    ),
    [[2, 3]],
  );
  const bytes = new Uint8Array([9, 1, 2, 3, 4, 9]);
  eq([...new Uint8Array(W.bufferOf(new DataView(bytes.buffer, 1, 4)))], [1, 2, 3, 4]);
});
