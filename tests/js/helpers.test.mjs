// The page's pure helpers, imported as ES modules and called directly: none of them needs a page. tests/test_js.py
// runs this file with node's test runner and sends what some of them build to the API; the helpers that draw into a
// page stay in Chromium (tests/browser/test_js_helpers.py).
import assert from "node:assert/strict";
import { test } from "node:test";

import { eq, mod, none, plain } from "./lib.mjs";

test("state round-trips through the URL", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const s = S.defaultState();
  Object.assign(s, {
    model: "random",
    text: "a b <c> & d",
    options: { d_model: 32, heads: 8, seed: 7, positions: true },
    allMasked: "zero",
    scale: false,
    view: "scores",
    palette: "cividis",
    layer: "all",
    focus: [2, 5],
    query: 3,
    page: 1,
  });
  s.masks = {
    causal: true,
    window: 2,
    padded: [0, 4],
    blocked: [
      [1, 0],
      [3, 2],
    ],
  };
  // the link's options are read as the model's /api/models entry declares them
  const random = { d_model: 64, heads: 4, kv_heads: null, seed: 0, positions: false };
  const back = S.decodeState("?" + S.encodeState(s), (m) => (m === "random" ? random : {}));
  const undeclared = S.decodeState("?" + S.encodeState(s)).options;
  const tb = S.defaultState();
  tb.matrices = { x: [[1, 2]], w_q: [[0.5]], w_k: [[1]], w_v: [[-1e-3]] };
  const out = plain({
    s,
    back,
    undeclared,
    tb: S.decodeState(S.encodeState(tb)).matrices,
    none: S.decodeState("?t=hello"),
    junk: S.decodeState("?m=random&pad=x,-1,2&block=1-a,2-3&view=nope&layer=-4&focus=a.b&query=-2&mx=%7B"),
  });
  assert.deepStrictEqual(out.back, out.s);
  eq(out.undeclared, {}); // a model that declares no options reads none from the link
  eq(out.tb, { x: [[1, 2]], w_q: [[0.5]], w_k: [[1]], w_v: [[-0.001]] });
  none(out.none);
  const junk = out.junk;
  eq(junk.masks.padded, [2]);
  eq(junk.masks.blocked, [[2, 3]]);
  eq([junk.view, junk.layer, junk.focus, junk.query, junk.matrices], ["weights", 0, null, null, null]);
});

test("a built request matches the API (what it sends: tests/test_js.py)", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const s = S.defaultState();
  Object.assign(s, { model: "random", text: "w x y z", options: { d_model: 16, heads: 2, kv_heads: null, seed: 1 } });
  s.masks = {
    causal: true,
    window: null,
    padded: [1, 9],
    blocked: [
      [3, 0],
      [8, 8],
    ],
  };
  const multi = S.buildRequest({ ...s, layer: 2 }, { layers: 6, heads: 12, d_model: 384 }, 4);
  const req = S.buildRequest(s, { layers: 1, heads: 4, d_model: 64 }, 4);
  const out = plain({
    req,
    multi,
    fit: (await mod("numbersettings.js")).fitRows(
      [
        [1, 2],
        [3, 4],
      ],
      3,
    ),
  });
  eq(out.req.masks, { causal: true, padded: [1], window: null, blocked: [[3, 0]] });
  eq(out.req.options, { d_model: 16, heads: 2, seed: 1 });
  assert.ok(!("layer" in out.req) && out.req.include.includes("contexts") && out.req.include.includes("qkv"));
  assert.ok(out.multi.layer === 2 && !out.multi.include.includes("contexts"));
  eq(out.fit, [
    [1, 2],
    [3, 4],
    [0, 0],
  ]);
});

test("a batch cell with no reasons reads masked", async () => {
  const M = await mod("masks.js");
  eq(M.cellReasons({ reasons: null, eligible: [[false]] }, 0, 0), ["masked"]);
});

test("mask edits are pure", async () => {
  const M = await mod("masks.js");
  const b0 = [[2, 1]];
  const b1 = M.toggleBlocked(b0, 0, 3);
  const prev = {
    model: "r",
    tokens: ["a", "b"],
    eligible: [
      [true, true],
      [true, true],
    ],
    layers: [
      {
        index: 0,
        heads: [
          {
            index: 0,
            weights: [
              [0.5, 0.5],
              [0.5, 0.5],
            ],
          },
        ],
      },
    ],
  };
  const next = {
    model: "r",
    tokens: ["a", "b"],
    eligible: [
      [true, false],
      [true, true],
    ],
    layers: [
      {
        index: 0,
        heads: [
          {
            index: 0,
            weights: [
              [1, 0],
              [0.5, 0.5],
            ],
          },
        ],
      },
    ],
  };
  const out = plain({
    b0,
    b1,
    b2: M.toggleBlocked(b1, 2, 1),
    p: M.togglePadded([4], 1),
    p2: M.togglePadded([1, 4], 4),
    flags: M.paddingFlags([1, 7], 3),
    none: M.paddingFlags([], 3),
    back: M.paddedFromFlags([true, false, false]),
    clamp: M.clampMasks(
      {
        causal: true,
        padded: [0, 3],
        blocked: [
          [0, 2],
          [1, 1],
        ],
      },
      2,
    ),
    rows: M.emptyRows([
      [false, false],
      [true, false],
    ]),
    split: M.splitTokens("  a\tb  c\n"),
    diff: M.diffResults(prev, next, 0),
    other: M.diffResults(prev, { ...next, tokens: ["a", "c"] }, 0).comparable,
  });
  eq(
    [out.b0, out.b1, out.b2],
    [
      [[2, 1]],
      [
        [0, 3],
        [2, 1],
      ],
      [[0, 3]],
    ],
  );
  eq([out.p, out.p2], [[1, 4], [1]]);
  eq(out.flags, [true, false, true]);
  none(out.none);
  eq(out.back, [1, 2]);
  eq(out.clamp, { causal: true, padded: [0], blocked: [[1, 1]] });
  // masks within the sequence come back as the same object: a run's answer, which settles the masks it was sent,
  // changes no mask of the state (and brings no eligibility grid into sight)
  const inside = { causal: true, padded: [1], blocked: [[0, 0]] };
  assert.equal(M.clampMasks(inside, 3), inside);
  eq(M.clampMasks({ causal: true }, 3), { causal: true, padded: [], blocked: [] });
  eq([out.rows, out.split], [[0], ["a", "b", "c"]]);
  const d = out.diff;
  assert.ok(d.comparable);
  eq([d.newlyMasked, d.newlyEligible], [[[0, 1]], []]);
  assert.equal(d.maxDelta, 0.5);
  eq(d.where, { head: 0, q: 0, k: 0 });
  assert.equal(out.other, false);
});

test("colour scales", async () => {
  const C = await mod("colors.js");
  const out = plain({
    lo: C.colorAt(C.VIRIDIS, 0),
    hi: C.colorAt(C.VIRIDIS, 1),
    clampLo: C.colorAt(C.VIRIDIS, -3),
    nan: C.colorAt(C.VIRIDIS, NaN),
    mid: C.colorAt(C.RDBU, 0.5),
    scores: C.scaleFor("scores", "viridis", 2.5),
    zero: C.scaleFor("scores", "viridis", 0),
    weights: C.scaleFor("weights", "cividis", 9),
    maxAbs: C.maxAbsEligible(
      [
        {
          scores: [
            [1, -7],
            [3, 2],
          ],
        },
      ],
      [
        [true, false],
        [true, true],
      ],
    ),
    plotly: C.plotlyScale(["#000000", "#ffffff"]),
    ink: [C.inkOn([253, 231, 37]), C.inkOn([68, 1, 84])],
    maskIsOffScale: [...C.VIRIDIS, ...C.CIVIDIS, ...C.RDBU].includes(C.MASK_FILL),
  });
  eq(
    [out.lo, out.hi],
    [
      [68, 1, 84],
      [253, 231, 37],
    ],
  );
  eq(out.clampLo, out.lo);
  eq(out.nan, out.lo);
  eq(out.mid, [247, 247, 247]);
  eq([out.scores.min, out.scores.max, out.zero.max], [-2.5, 2.5, 1]);
  eq([out.weights.min, out.weights.max, out.weights.stops[0]], [0, 1, "#00224e"]);
  assert.equal(out.maxAbs, 3);
  eq(out.plotly, [
    [0, "#000000"],
    [1, "#ffffff"],
  ]);
  eq(out.ink, ["#111", "#fff"]);
  assert.equal(out.maskIsOffScale, false);
});

test("heatmap geometry", async () => {
  const H = await mod("heatmap.js");
  const L = H.layoutFor(10, { cell: 12, labels: true });
  const hits = [];
  for (let q = 0; q < 10; q++)
    for (let k = 0; k < 10; k++) {
      const c = H.cellAt(L, L.left + k * 12 + 6, L.top + q * 12 + 6);
      hits.push(c.q === q && c.k === k);
    }
  const out = plain({
    all: hits.every(Boolean),
    outside: [H.cellAt(L, L.left - 1, L.top), H.cellAt(L, L.left, L.top + 120)],
    masked: H.maskedCells([
      [true, false],
      [false, true],
    ]),
    drawn: H.drawnValues(
      [
        [0.3, 0.7],
        [1, 0],
      ],
      [
        [true, false],
        [true, true],
      ],
    ),
    thin: H.layoutFor(200, { cell: 2, labels: false }).step,
    t: H.truncate("abcdefghij", 5),
  });
  assert.ok(out.all);
  eq(out.outside, [null, null]);
  eq(out.masked, ["0-1", "1-0"]);
  eq(out.drawn, [
    [0.3, null],
    [1, 0],
  ]);
  assert.ok(out.thin > 1);
  assert.equal(out.t, "abcd…");
});

test("a learned sink column: geometry, weights per query, hover and caption", async () => {
  const H = await mod("heatmap.js");
  const heads = await mod("heads.js");
  const plainL = H.layoutFor(4, { cell: 10, labels: true });
  const L = H.layoutFor(4, { cell: 10, labels: true, sink: true });
  // a head without a sink: the layout of today, with no sink column and nothing over its place
  none(plainL.sinkX);
  eq(plain({ ...L, sinkX: undefined, width: undefined }), plain({ ...plainL, sinkX: undefined, width: undefined }));
  assert.equal(L.sinkX, L.left + 40 + H.SINK_GAP);
  assert.equal(L.width, plainL.width + H.SINK_GAP + 10);
  eq(H.cellAt(L, L.sinkX + 5, L.top + 25), { q: 2, k: null, sink: true });
  none(H.cellAt(L, L.sinkX - 2, L.top + 25)); // the gap is no cell
  none(H.cellAt(plainL, L.sinkX + 5, L.top + 25));
  eq(H.cellAt(L, L.left + 35, L.top + 5), { q: 0, k: 3 });
  // one number a query: a single answer's S, or item 1's row of a batch's B x S (the arrays form's typed rows too)
  eq(Array.from(H.sinkWeights({ sink: [0.5, 0.25] })), [0.5, 0.25]);
  eq(Array.from(H.sinkWeights({ sink: [Float32Array.of(0.5, 0.25), Float32Array.of(0.125, 0.75)] }, 1)), [0.125, 0.75]);
  none(H.sinkWeights({ weights: [[1]] }));
  eq(Array.from(heads.cardSink({ view: "weights", item: 0 }, { sink: Float32Array.of(0.5) })), [0.5]);
  none(heads.cardSink({ view: "scores", item: 0 }, { sink: [0.5] }));
  none(heads.cardSink({ view: "weights", item: 0 }, { weights: [[1]] }));
  const hover = H.sinkHover(2, 0.25);
  assert.match(
    hover,
    /^query \d+ → the head's sink: 0\.2500 \(no value; the row's weights over the keys sum to 1 - 0\.2500 = 0\.7500\)$/,
  );
  assert.equal(H.sinkCaption({ mean_sink_weight: 0.125 }), "learned sink w̄ 0.13");
  assert.equal(H.sinkCaption({ mean_entropy: 1 }), "");
  // the large head's sink column: half a cell right of K keys, coloured on the keys' scale, hovered per query
  const F = await mod("focuscells.js");
  const C = await mod("colors.js");
  const scale = { min: 0, max: 1, stops: ["#000000", "#ffffff"] };
  const col = F.sinkColumn(Float32Array.of(0, 0.5), scale, 3, { text: "#111" });
  eq([col.trace.x0, col.tick], [3.5, { value: 3.5, text: "sink" }]);
  eq(col.trace.z, [[C.colorAt(scale.stops, 0).map(Math.round)], [C.colorAt(scale.stops, 0.5).map(Math.round)]]);
  eq(col.trace.text, [[H.sinkHover(0, 0)], [H.sinkHover(1, 0.5)]]);
  eq([col.shape.x0, col.shape.x1, col.shape.y0, col.shape.y1], [3, 4, -0.5, 1.5]);
  // the stats table's row ends with the mean sink weight only where the heads have sinks
  const st = await mod("stats.js");
  const stats = {
    mean_entropy: 0.5,
    masked_share: [0],
    masked_weight: [0],
    max_row_sum_error: 0,
    zero_rows: [],
    mean_sink_weight: 0.25,
  };
  const withSink = st.statsRow("H0", stats, "H", true);
  assert.equal(withSink.length, st.STATS_COLUMNS.length + 1);
  assert.equal(withSink.at(-1), "0.250");
  eq(st.statsRow("H0", stats), withSink.slice(0, -1));
  assert.equal(st.SINK_STATS_COLUMN[0], "Mean sink weight");
});

test("view helpers", async () => {
  const heads = await mod("heads.js"),
    flow = await mod("flow.js"),
    focus = await mod("focuscells.js");
  const rd = await mod("retrieval.js"),
    api = await mod("api.js"),
    ex = await mod("exporter.js");
  const mx = await mod("numbersettings.js"),
    el = await mod("eligibility.js"),
    st = await mod("stats.js"),
    sel = await mod("selectors.js");
  const all = Array.from({ length: 72 }, (_, i) => i);
  const m = { x: [[1]], w_q: [[1]], w_k: [[1]], w_v: [[1]] };
  const out = plain({
    p0: sel.pageOf(all, 0),
    p9: sel.pageOf(all, 9),
    cells: [heads.cellSize(5, 1), heads.cellSize(200, 24)],
    thumb: heads.THUMB_PX,
    vis: [flow.visibleHeads(4), flow.visibleHeads(12)],
    shape: flow.shape([5, 3]),
    esc: focus.plotlyText("<b>&x</b>"),
    path: focus.maskPath([
      [true, false],
      [false, false],
    ]).x.length,
    widths: [rd.lineWidth(0), rd.lineWidth(0.5), rd.lineWidth(1), rd.lineWidth(7)],
    err: api.describeError(
      new api.ApiError(422, "no_eligible_key", "masks", "masks: query rows 0 have no eligible key"),
    ),
    net: api.describeError(new TypeError("Failed to fetch")).message,
    pad: api.describeError(new api.ApiError(422, "invalid_input", "masks.padded[0]", "out of range")).hint,
    sheet: ex.sheetLayout(
      [
        { w: 100, h: 80 },
        { w: 100, h: 80 },
        { w: 100, h: 80 },
      ],
      2,
    ),
    edit: mx.setEntry(m, "w_q", 0, 0, "2.5").w_q,
    bad: mx.setEntry(m, "x", 0, 0, "abc"),
    same: m.w_q,
    code: el.reasonCode(["causal", "padding"]),
    move: [
      el.moveCursor([0, 0], "ArrowUp", 5, 5),
      el.moveCursor([4, 2], "End", 5, 6),
      el.moveCursor([1, 1], "x", 5, 5),
    ],
    row: st.statsRow("H0", {
      mean_entropy: 0.5,
      masked_mass: [0.2, 0.4],
      max_masked_weight: 0,
      max_row_sum_error: 3e-8,
      eligible_score_min: -1,
      eligible_score_max: 2,
      score_min: -3,
      score_max: 4,
      mean_distance: 1.234,
      zero_rows: [2],
    }),
  });
  eq([out.p0.pages, out.p0.items.length, out.p9.page, out.p9.items[0]], [3, 24, 2, 48]);
  // a long sequence is downsampled into a fixed-size thumbnail instead of growing the card
  assert.ok(out.cells[0] <= 34 && out.cells[1] * 200 <= out.thumb);
  eq(out.vis, [
    [0, 1, 2, 3],
    [0, 1, 2, null, 10, 11],
  ]);
  // the masked cells' outline: one rectangle (6 points) per masked run of a row, (0, 1) and (1, 0..1)
  eq([out.shape, out.esc, out.path], ["5 × 3", "&lt;b&gt;&amp;x&lt;/b&gt;", 12]);
  const w = out.widths;
  assert.ok(w[0] < w[1] && w[1] < w[2] && w[2] === w[3], String(w));
  assert.ok(out.err.hint.includes("All-masked rows"));
  assert.equal(out.net, "Could not reach the attnlab server.");
  assert.ok(!out.pad.includes("All-masked rows")); // by code and field: a bad padding position is another error
  assert.equal(out.sheet.places[2].x, out.sheet.places[0].x);
  assert.ok(out.sheet.places[2].y > out.sheet.places[0].y);
  eq(out.edit, [[2.5]]);
  none(out.bad);
  eq(out.same, [[1]]);
  eq([out.code, out.move], ["CP", [[0, 0], [4, 5], null]]);
  // a result from before the masked_mass split still reads; it has no health numbers
  eq(out.row, ["H0", "0.500", "0.300", "0.000", "✓ 3.0e-8", "-1.000 … 2.000", "-3.000 … 4.000", "1.23", "2", "–", "–"]);
});

test("head types sort, filter and pick the best", async () => {
  const H = await mod("headtypes.js");
  const rows = [
    { layer: 0, head: 0, previous_token: 0.9, induction: 0.0, entropy: 0.2 },
    { layer: 0, head: 1, previous_token: 0.1, induction: null, entropy: 1.5 },
    { layer: 1, head: 0, previous_token: 0.2, induction: 0.8, entropy: 0.7 },
    { layer: 1, head: 3, previous_token: 0.3, induction: 0.6, entropy: 0.1 },
  ];
  const ids = (rs) => rs.map(H.headLabel);
  const out = plain({
    byInduction: ids(H.sortRows(rows, "induction", "desc")),
    byInductionAsc: ids(H.sortRows(rows, "induction", "asc")),
    byHeadDesc: ids(H.sortRows(rows, "head", "desc")),
    layerOrder: ids(H.sortRows([...rows].reverse(), null)),
    find: ["L1H3", "l1 h3", "L1", "H0", "1.3", "x", ""].map((t) => ids(rows.filter((r) => H.matchesText(r, t)))),
    threshold: ids(H.filterRows(rows, { score: "induction", min: 0.5 })),
    both: ids(H.filterRows(rows, { text: "L1", score: "previous_token", min: 0.25 })),
    best: H.headLabel(H.bestHead(rows, "induction")),
    none: H.bestHead(rows, "duplicate_token"),
    maxEntropy: H.columnMax(
      rows,
      H.COLUMNS.find((c) => c.key === "entropy"),
    ),
  });
  eq(out.byInduction, ["L1 H0", "L1 H3", "L0 H0", "L0 H1"]); // a missing score goes last
  eq(out.byInductionAsc, ["L0 H0", "L1 H3", "L1 H0", "L0 H1"]);
  eq(out.byHeadDesc, ["L1 H3", "L1 H0", "L0 H1", "L0 H0"]);
  eq(out.layerOrder, ["L0 H0", "L0 H1", "L1 H0", "L1 H3"]);
  eq(out.find, [
    ["L1 H3"],
    ["L1 H3"],
    ["L1 H0", "L1 H3"],
    ["L0 H0", "L1 H0"],
    ["L1 H3"],
    [],
    ["L0 H0", "L0 H1", "L1 H0", "L1 H3"],
  ]);
  eq(out.threshold, ["L1 H0", "L1 H3"]);
  eq(out.both, ["L1 H3"]);
  assert.equal(out.best, "L1 H0");
  none(out.none);
  assert.equal(out.maxEntropy, 1.5);
});

test("examples build repeats from a vocabulary and place pairs", async () => {
  const E = await mod("examples.js");
  const vocab = Array.from({ length: 50 }, (_, i) => `w${i}`);
  const a = E.repeatedWords(vocab, 12, 7);
  const tokens = ["[CLS]", "the", "animal", "didn", "'", "t", "cross", "it", "animal", "it", "[SEP]"];
  const out = plain({
    a,
    again: E.repeatedWords(vocab, 12, 7),
    other: E.repeatedWords(vocab, 12, 8),
    short: E.repeatedWords(["x", "y"], 5, 1),
    pair: E.resolvePair(tokens, { query: "it", key: "animal" }),
    upper: E.resolvePair(["The", "Cat", "it"], { query: "IT", key: "cat" }),
    missing: E.resolvePair(tokens, { query: "it", key: "street" }),
    at: E.resolvePair(tokens, { at: [9, 2] }),
    outside: E.resolvePair(tokens, { at: [20, 2] }),
    text: E.exampleText({ repeat: { words: 3, seed: 1 } }, { vocab }),
    noVocab: E.exampleText({ repeat: { words: 3, seed: 1 } }, { vocab: null }),
  });
  assert.equal(out.a.length, 24);
  assert.deepStrictEqual(out.a.slice(0, 12), out.a.slice(12));
  assert.equal(new Set(out.a.slice(0, 12)).size, 12);
  assert.deepStrictEqual(out.again, out.a);
  assert.notDeepStrictEqual(out.other, out.a);
  eq([...out.short].sort(), ["x", "x", "y", "y"]); // no more distinct words than the vocabulary holds
  eq(
    [out.pair, out.upper],
    [
      [7, 2],
      [2, 1],
    ],
  );
  none(out.missing);
  eq(out.at, [9, 2]);
  none(out.outside);
  assert.equal(out.text.split(/\s+/).filter(Boolean).length, 6);
  none(out.noVocab);
});

test("state keeps the pair and the head table in the URL", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const s = S.defaultState();
  Object.assign(s, {
    model: "minilm",
    text: "a b",
    pair: [10, 2],
    hsort: "induction",
    hdir: "asc",
    hfind: "L1",
    hscore: "previous_token",
    hmin: 0.25,
  });
  const att = {
    model: "minilm",
    text: "a b",
    masks: { causal: true },
    all_masked: "zero",
    scale: false,
    include: ["weights"],
    layer: 3,
  };
  const out = plain({
    s,
    back: S.decodeState("?" + S.encodeState(s)),
    half: S.encodeState({ ...S.defaultState(), pair: [3, null] }),
    junk: S.decodeState("?m=minilm&pair=a-1&hsort=nope&hmin=head:1"),
    heads: S.headTypesRequest(att),
    top: S.topHeadsRequest(att, [10, 2], 5),
    custom: S.headTypesRequest({
      model: "random",
      text: "a",
      options: { heads: 8 },
      x: [[1]],
      weights: { w_q: [[1]] },
      include: [],
      layer: 0,
    }),
  });
  assert.deepStrictEqual(out.back, out.s);
  assert.ok(!out.half.includes("pair"));
  eq([out.junk.pair, out.junk.hsort, out.junk.hscore], [null, null, ""]);
  eq(out.heads, { model: "minilm", text: "a b", all_masked: "zero", masks: { causal: true }, scale: false });
  eq(out.custom, { model: "random", text: "a", options: { heads: 8 }, x: [[1]], weights: { w_q: [[1]] } });
  const top = out.top;
  assert.ok(!("include" in top) && !("layer" in top));
  eq([top.query, top.key, top.k, top.scale], [10, 2, 5, false]);
});

test("stats name the masked share apart from the masked weight and flag head health", async () => {
  const st = await mod("stats.js"),
    heads = await mod("heads.js");
  const base = {
    mean_entropy: 0.5,
    max_masked_weight: 0,
    max_row_sum_error: 0,
    eligible_score_min: 0,
    eligible_score_max: 1,
    score_min: 0,
    score_max: 1,
    mean_distance: 1,
    zero_rows: [],
  };
  const dead = {
    ...base,
    masked_share: [0.5, 0.1],
    masked_weight: [0, 0],
    kl_from_uniform: 0.0004,
    dead: true,
    identical_to: [2, 3],
    qk_rank: 3,
    qk_rank_max: 16,
  };
  const fine = {
    ...base,
    masked_share: [0, 0],
    masked_weight: [0, 2e-7],
    kl_from_uniform: 1.2,
    dead: false,
    identical_to: [],
    qk_rank: 16,
    qk_rank_max: 16,
  };
  const out = plain({
    dead: st.statsRow("L1 H0", dead, "L1 H"),
    fine: st.statsRow("H1", fine),
    columns: st.STATS_COLUMNS.map((c) => c[0]),
    flags: heads.healthFlags(dead, "L1 H").map((f) => [f.kind, f.text]),
    fineFlags: heads.healthFlags(fine).map((f) => f.kind),
    none: heads.healthFlags(null),
    noRank: heads.healthFlags({ ...fine, qk_rank: null }).length,
  });
  const cols = out.columns;
  assert.ok(cols.includes("Masked share") && cols.includes("Weight on masked keys") && !cols.includes("Masked mass"));
  eq(cols.slice(-2), ["KL from uniform", "Health"]);
  const byColumn = (row) => {
    assert.equal(row.length, cols.length);
    return Object.fromEntries(cols.map((c, i) => [c, row[i]]));
  };
  const deadRow = byColumn(out.dead);
  eq([deadRow["Masked share"], deadRow["Weight on masked keys"]], ["0.300", "0.000"]);
  assert.equal(deadRow["KL from uniform"], "4.0e-4");
  assert.equal(deadRow.Health, "nearly uniform · = L1 H2, L1 H3 · QK rank 3/16");
  const fineRow = byColumn(out.fine);
  assert.equal(fineRow["Weight on masked keys"], "2.0e-7"); // not exactly 0: shown, so the page can flag it
  assert.equal(fineRow.Health, "QK rank 16/16");
  eq(out.flags, [
    ["uniform", "nearly uniform"],
    ["identical", "= L1 H2, L1 H3"],
    ["rank-low", "QK rank 3/16"],
  ]);
  eq([out.fineFlags, out.none, out.noRank], [["rank"], [], 0]);
});

test("experiment settings round-trip through the URL", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const C = await mod("claimsettings.js");
  const P = await mod("pin.js");
  const s = S.defaultState();
  Object.assign(s, {
    model: "induction",
    text: "a b a b",
    ablate: [
      { layer: 1, head: 0, mode: "zero" },
      { layer: 1, head: 3, mode: "mean" },
    ],
    edits: [{ layer: 1, head: 2, query: 3, key: 1, weight: 0.25 }],
    pin: { model: "induction", text: "a b c d", masks: { causal: true }, scale: true },
    perturbOn: true,
    perturb: { position: 2, kind: "token", amount: 1, token: "x,y" },
  });
  const follow = {
    ...S.defaultState(),
    perturbOn: true,
    perturb: { position: null, kind: "shift", amount: -2.5, token: "" },
  };
  const out = plain({
    s,
    back: S.decodeState("?" + S.encodeState(s)),
    follow,
    followBack: S.decodeState("?" + S.encodeState(follow)),
    plain: S.encodeState(S.defaultState()),
    junk: S.decodeState(
      "?m=random&abl=1.0.zero,1.0.mean,a.1.zero,1.2.half,-1.0.zero" +
        "&edit=1.2.3.1@2,1.2.3@0.5,0.0.1.0@0.5&pin=%5B1%5D&pert=x,shift,1",
    ),
    pinJunk: [
      P.parsePin('{"text": "no model"}'),
      P.parsePin('{"model": "m", "include": ["weights"], "layer": 2}'),
      P.parsePin("{bad"),
    ],
    pert: [C.parsePerturb("q,shift,abc"), C.parsePerturb("3,token,"), C.parsePerturb("q,shift,2")],
  });
  assert.deepStrictEqual(out.back, out.s);
  assert.deepStrictEqual(out.followBack, out.follow);
  for (const k of ["abl=", "edit=", "pin=", "pert="]) assert.ok(!out.plain.includes(k), k);
  const junk = out.junk;
  eq(junk.ablate, [{ layer: 1, head: 0, mode: "zero" }]); // one entry per head, bad ones dropped
  eq(junk.edits, [{ layer: 0, head: 0, query: 1, key: 0, weight: 0.5 }]);
  none(junk.pin);
  assert.equal(junk.perturbOn, false);
  eq(out.pinJunk, [null, { model: "m" }, null]);
  eq(out.pert, [null, null, { position: null, kind: "shift", amount: 2, token: "" }]);
});

test("experiment requests match the contract", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const att = {
    model: "minilm",
    text: "a b",
    masks: { causal: true },
    scale: true,
    include: ["scores", "weights"],
    layer: 3,
  };
  const out = plain({
    shift: S.perturbRequest(att, 4, { position: null, kind: "shift", amount: 1.5, token: "zz" }),
    token: S.perturbRequest(att, 0, { position: 0, kind: "token", amount: 1, token: "dog" }),
    dir: S.perturbRequest({ ...att, demo_bug: "flipped_mask" }, 2, { position: 2, kind: "direction", amount: 2 }),
    iv: S.interveneRequest(
      { ...att, include: ["weights"] },
      [{ layer: 1, head: 2, mode: "mean", extra: 1 }],
      [{ layer: 0, head: 1, query: 3, key: 0, weight: 0.5 }],
      5,
    ),
    ivAblateOnly: S.interveneRequest(att, [{ layer: 0, head: 0, mode: "zero" }], [], 3),
    pin: S.pinRequest(att),
    cmp: S.compareRequest(S.pinRequest(att), { ...att, masks: { causal: false } }, 2),
    cmpAll: S.compareRequest(S.pinRequest(att), att, null),
    ivBug: S.interveneRequest({ ...att, demo_bug: "softmax_over_queries" }, [{ layer: 0, head: 0 }], []),
    cmpBug: S.compareRequest(S.pinRequest(att), { ...att, demo_bug: "flipped_mask" }, null),
    batchBug: S.interveneRequest({ ...att, texts: ["a", "b"], demo_bug: "flipped_mask" }, [], []),
  });
  const shift = out.shift;
  assert.ok(!("include" in shift) && !("layer" in shift));
  assert.equal(shift.position, 4);
  eq(shift.change, { kind: "shift", amount: 1.5 });
  eq(out.token.change, { kind: "token", token: "dog" });
  // the default change, and the view's demo_bug goes with it (perturb runs the code the view shows)
  eq(out.dir.change, { kind: "direction", norm: 2 });
  assert.equal(out.dir.demo_bug, "flipped_mask");
  const iv = out.iv;
  eq(iv.ablate, [{ layer: 1, head: 2, mode: "mean" }]);
  eq(iv.edit, [{ layer: 0, head: 1, query: 3, key: 0, weight: 0.5 }]);
  eq([iv.top_k, iv.include], [5, ["weights"]]);
  assert.ok(!("edit" in out.ivAblateOnly));
  eq(out.pin, { model: "minilm", text: "a b", masks: { causal: true }, scale: true });
  const cmp = out.cmp;
  eq([cmp.a.masks, cmp.b.masks], [{ causal: true }, { causal: false }]);
  eq([cmp.a.include, cmp.b.include], [["weights"], ["weights"]]);
  eq([cmp.a.layer, cmp.b.layer], [2, 2]);
  assert.ok(!("layer" in out.cmpAll.a) && !("layer" in out.cmpAll.b));
  // intervene and compare run the view's classic bug too, each side of a comparison its own
  assert.equal(out.ivBug.demo_bug, "softmax_over_queries");
  assert.ok(!("demo_bug" in out.iv));
  assert.ok(!("demo_bug" in out.cmpBug.a));
  assert.equal(out.cmpBug.b.demo_bug, "flipped_mask");
  assert.equal(out.batchBug.demo_bug, "flipped_mask"); // a batch's item runs on its own, on the view's code
});

test("bodies carry the view's bug or say they run the correct code", async () => {
  const R = await mod("requests.js"),
    B = await mod("bugs.js");
  const att = {
    model: "induction",
    text: "a b",
    masks: { causal: true },
    include: ["weights"],
    layer: 1,
    demo_bug: "norm_over_sequence",
  };
  const key = (body) => JSON.stringify(body);
  const out = plain({
    single: R.singleRequest(att),
    claim: R.claimRequest(att),
    heads: R.headTypesRequest(att),
    carried: B.correctCodeNote("norm_over_sequence", [key(R.claimRequest(att)), null]),
    dropped: B.correctCodeNote("norm_over_sequence", [key(R.headTypesRequest(att))]),
    mixed: B.correctCodeNote("flipped_mask", [key(R.claimRequest(att)), key(R.headTypesRequest(att))]),
    noBug: B.correctCodeNote(null, [key(R.headTypesRequest(att))]),
    unasked: B.correctCodeNote("flipped_mask", [null]),
  });
  eq([out.single.demo_bug, out.claim.demo_bug], ["norm_over_sequence", "norm_over_sequence"]);
  assert.ok(!("demo_bug" in out.heads));
  none(out.carried);
  none(out.noBug);
  none(out.unasked);
  assert.ok(out.dropped && out.dropped.includes("correct code") && out.dropped.includes("norm over the sequence axis"));
  assert.ok(out.mixed && out.mixed.includes("flipped mask"));
});

test("the rows Hide sinks sets are told apart", async () => {
  const B = await mod("bugs.js");
  const T = true,
    F = false;
  const causal = [
    [T, F, F],
    [T, T, F],
    [T, T, T],
    [F, F, F],
  ]; // the last row: all masked
  const rows = (m) => Object.fromEntries(m);
  const out = plain({
    renorm: rows(B.sinkRows(causal, [0], true)),
    kept: rows(B.sinkRows(causal, [0], false)),
    none: rows(B.sinkRows(causal, [], false)),
    two: rows(B.sinkRows(causal, [0, 1], true)),
  });
  eq(out.renorm, { 0: "hidden" });
  eq(out.kept, { 0: "hidden", 1: "kept", 2: "kept" });
  eq(out.none, {});
  eq(out.two, { 0: "hidden", 1: "hidden" });
});

test("claim chart helpers", async () => {
  const C = await mod("claims.js");
  const checks = [
    { name: "causal", claim: "c", holds: true, max_delta: 0, protected: [0, 1, 2] },
    { name: "padding", claim: "p", holds: false, max_delta: 0.25, protected: [5, 1] },
  ];
  const prot = new Set(C.protectedPositions(checks));
  const bars = C.barGeometry([0, 0.5, 1, 2], 2, C.CHART, new Set([0, 1]));
  const out = plain({
    prot: [...prot],
    summary: C.verdictSummary({ checks }),
    empty: C.verdictSummary({ checks: [] }),
    max: C.sharedMax([
      [0, -3],
      [2, NaN],
    ]),
    bars,
    fmt: [C.formatDelta(0), C.formatDelta(0.5), C.formatDelta(2e-9)],
  });
  eq(out.prot, [0, 1, 2, 5]);
  const s = out.summary;
  assert.equal(s.holds, false);
  eq(s.names, ["causal", "padding"]);
  assert.ok(s.lines[0].text.startsWith("✓ holds · causal") && s.lines[1].text.startsWith("✗ leak"));
  assert.equal(out.empty.holds, true);
  eq(out.empty.names, []);
  assert.equal(out.max, 3);
  const b = out.bars;
  assert.equal(b[0].height, 0);
  assert.ok(b[3].height > b[2].height && b[2].height > b[1].height && b[1].height > 0);
  eq(
    b.map((x) => x.leak),
    [false, true, false, false],
  ); // protected and moved = a leak
  for (let i = 0; i < 3; i++) assert.ok(b[i + 1].x > b[i].x);
  eq(out.fmt, ["0", "0.5000", "2.00e-9"]);
});

test("intervention helpers", async () => {
  const I = await mod("interventions.js");
  const IS = await mod("interventionsettings.js");
  let abl = IS.toggleAblation([], 1, 3, "zero");
  abl = IS.toggleAblation(abl, 0, 2, "mean");
  const off = IS.toggleAblation(abl, 1, 3, "zero");
  const edits = IS.addEdit(IS.addEdit([], { layer: 1, head: 0, query: 4, key: 1, weight: 0.2 }), {
    layer: 1,
    head: 0,
    query: 4,
    key: 1,
    weight: 0.9,
  });
  const w = (v) => [
    [1, 0],
    [v, 1 - v],
  ];
  const before = {
    layers: [
      {
        index: 0,
        heads: [
          { index: 0, weights: w(0.5) },
          { index: 1, weights: w(0.5) },
        ],
      },
      {
        index: 1,
        heads: [
          { index: 0, weights: w(0.5) },
          { index: 1, weights: w(0.5) },
        ],
      },
    ],
  };
  const after = {
    layers: [
      {
        index: 0,
        heads: [
          { index: 0, weights: w(0.5) },
          { index: 1, weights: w(0.5) },
        ],
      },
      {
        index: 1,
        heads: [
          { index: 0, weights: w(0.1) },
          { index: 1, weights: w(0.7) },
        ],
      },
    ],
  };
  const tokens = ["a", "b", "c"];
  const g = (t, p) => [{ token: t, p }];
  const preds = { before: [g("b", 0.9), g("c", 0.8), g("a", 0.5)], after: [g("b", 0.7), g("a", 0.4), g("a", 0.5)] };
  const out = plain({
    abl,
    off,
    edits,
    valid: I.keepValid(
      [
        { layer: 1, head: 3 },
        { layer: 2, head: 0 },
        { layer: 0, head: 4 },
      ],
      2,
      4,
    ),
    affected: I.affectedHeads(abl, edits),
    shown: I.shownHeads(before, after, [{ layer: 0, head: 1 }]),
    rows: I.predictionRows(tokens, preds, [0.1, 0.2], [0.3, 2.5]),
    flipped: I.flippedPositions(preds),
    none: I.predictionRows(tokens, null),
    words: I.describeInterventions(abl, edits),
  });
  eq(out.abl, [
    { layer: 0, head: 2, mode: "mean" },
    { layer: 1, head: 3, mode: "zero" },
  ]);
  eq(out.off, [{ layer: 0, head: 2, mode: "mean" }]);
  eq(out.edits, [{ layer: 1, head: 0, query: 4, key: 1, weight: 0.9 }]);
  eq(out.valid, [{ layer: 1, head: 3 }]);
  eq(out.affected, [
    { layer: 0, head: 2 },
    { layer: 1, head: 0 },
    { layer: 1, head: 3 },
  ]);
  const round6 = (x) => Math.round(x * 1e6) / 1e6;
  const shown = out.shown.map((h) => [h.layer, h.head, h.affected, round6(h.maxAbs)]);
  eq(shown, [
    [0, 1, true, 0],
    [1, 0, false, 0.4],
    [1, 1, false, 0.2],
  ]); // affected first, then most moved
  const rows = out.rows;
  eq(
    rows.map((r) => r.changed),
    [false, true, false],
  );
  assert.ok(rows[0].rightBefore && rows[1].rightBefore && !rows[1].rightAfter);
  assert.equal(rows[1].lossAfter, 2.5);
  none(rows[2].lossAfter);
  none(rows[2].next);
  eq([out.flipped, out.none], [[1], []]);
  assert.equal(out.words, "L0 H2 mean-ablated · L1 H3 zeroed · L1 H0 weight 4→1 set to 0.9");
});

test("compare helpers", async () => {
  const C = await mod("compare.js");
  const head = (i, m) => ({ index: i, diff: [[0]], max_abs: m, where: [0, 0] });
  const many = { layers: [0, 1, 2].map((l) => ({ index: l, heads: [0, 1, 2, 3].map((h) => head(h, l * 10 + h)) })) };
  const big = C.diffMaps(many, 3);
  const out = plain({
    scale: C.diffScale(0.4),
    flat: C.diffScale(0),
    either: C.eitherEligible(
      [
        [true, false],
        [false, false],
      ],
      [
        [false, true],
        [false, false],
      ],
    ),
    big: big.maps.map((m) => [m.layer, m.head]),
    total: big.total,
    all: C.diffMaps(many).maps.length,
    body: C.describeBody({ model: "random", text: "a b", masks: { causal: true, padding: [true, false], window: 2 } }),
    plain: C.describeBody({ model: "minilm", text: "x" }),
  });
  eq([out.scale.min, out.scale.max, out.scale.stops[5]], [-0.4, 0.4, "#f7f7f7"]);
  eq([out.flat.min, out.flat.max], [-1, 1]);
  eq(out.either, [
    [true, true],
    [false, false],
  ]);
  eq(
    [out.big, out.total, out.all],
    [
      [
        [2, 1],
        [2, 2],
        [2, 3],
      ],
      12,
      12,
    ],
  );
  assert.equal(out.body, "random · “a b” · causal, window 2, 1 padded");
  assert.equal(out.plain, "minilm · “x” · default masks");
});

test("sums, pairs and steps", async () => {
  const B = await mod("bugs.js");
  const M = await mod("masks.js");
  const D = await mod("decode.js");
  const m = [
    [0.5, 0.5, 0],
    [0.25, 0.25, 0.5],
  ];
  const out = plain({
    rows: B.rowSums(m),
    cols: B.columnSums(m),
    report: B.sumsReport([1, 0.9995, 0.5]),
    drawn: B.drawnEligibility([[true, false]], "flipped_mask"),
    kept: B.drawnEligibility([[true, false]], "softmax_over_queries"),
    pairs: M.pairLines({ total: 36, causal: 21, window: 24, eligible: 15 }).map((l) => l.text),
    none: M.pairLines({ total: 25, eligible: 25 }).map((l) => l.text),
    missing: M.pairLines(null),
    steps: [D.clampStep(null, 5), D.clampStep(9, 5), D.clampStep(-2, 5), D.clampStep(2, 5)],
    match: [D.matchText(2.7e-5), D.matchText(0.01)],
    bytes: [D.formatBytes(64), D.formatBytes(1073741824)],
    geo: [
      D.cacheGeometry({ kv_heads: 2, d_head: 4, d_v: 4 }, 3, 6).kWidth,
      D.cacheGeometry({ kv_heads: 8, d_head: 4, d_v: 4 }, 3, 6).kWidth,
    ],
  });
  eq(
    [out.rows, out.cols],
    [
      [1, 1],
      [0.75, 0.75, 0.5],
    ],
  );
  eq(out.report, { ones: 2, total: 3, worst: 0.5 });
  eq([out.drawn, out.kept], [[[true, true]], [[true, false]]]);
  eq(out.pairs, ["causal: 21 of 36 pairs", "window: 24 of 36 pairs", "all together: 15 of 36 pairs eligible"]);
  eq([out.none, out.missing], [["no mask: 25 of 25 pairs eligible"], []]);
  eq(out.steps, [4, 4, 0, 2]);
  assert.ok(out.match[0].endsWith("matches the full pass") && out.match[1].endsWith("differs from the full pass"));
  eq(out.bytes, ["64 bytes", "1.07 GB"]);
  assert.equal(out.geo[1], 4 * out.geo[0]); // four times the K/V groups, a four times wider cache
});

test("a batch and a source become one sequence for the other endpoints", async () => {
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const s = { ...S.defaultState(), model: "random", text: "a b c" };
  s.masks = {
    causal: true,
    window: 2,
    padded: [1],
    blocked: [
      [0, 0],
      [2, 4],
    ],
  };
  // what a model takes is its /api/models entry's capabilities
  const random = { layers: 1, capabilities: { batches: true, cross_attention: true } };
  const src = S.buildRequest({ ...s, source: "x y z w v", sourcePadded: [4] }, random, 3);
  const batch = S.buildRequest({ ...s, batch: "p q\n\n r s t ", source: "x y" }, random, 3);
  const textbook = S.buildRequest({ ...s, model: "textbook", source: "x y", batch: "p q" }, { layers: 1 }, 3);
  const out = plain({
    src,
    batch,
    textbook,
    srcOne: S.singleRequest(src),
    item1: S.singleRequest(batch, 1),
    item9: S.singleRequest(batch, 9),
  });
  assert.equal(out.src.text, "a b c");
  eq(out.src.source, { text: "x y z w v", padding: [true, true, true, true, false] });
  eq(out.src.masks, {
    blocked: [
      [0, 0],
      [2, 4],
    ],
  });
  const b = out.batch;
  eq(b.texts, ["p q", "r s t"]);
  assert.ok(!("text" in b) && !("source" in b));
  assert.ok(!("padded" in b.masks) && b.masks.causal === true);
  assert.ok(!("texts" in out.textbook) && !("source" in out.textbook));
  const one = out.srcOne;
  assert.ok(!("source" in one) && one.text === "a b c");
  eq(one.masks.blocked, []);
  assert.equal(out.item1.text, "r s t");
  assert.ok(!("texts" in out.item1) && out.item1.masks.causal);
  assert.equal(out.item9.text, "r s t");
});

test("a batch item reads its own reasons", async () => {
  // The server's reasons for a batch are B x S x S: an item cut out of it names the masks behind its own cells.
  const B = await mod("batch.js"),
    M = await mod("masks.js");
  const F = false,
    T = true;
  const r = {
    tokens: ["a", "b"],
    config: { batch: 2 },
    masks: { causal: true, blocked: [] },
    batch_tokens: [
      ["a", "b"],
      ["c", "[PAD]"],
    ],
    batch_padding: [
      [T, T],
      [T, F],
    ],
    eligible: [
      [
        [T, F],
        [T, T],
      ],
      [
        [T, F],
        [T, F],
      ],
    ],
    reasons: {
      causal: [
        [
          [F, T],
          [F, F],
        ],
        [
          [F, T],
          [F, F],
        ],
      ],
      padding: [
        [
          [F, F],
          [F, F],
        ],
        [
          [F, T],
          [F, T],
        ],
      ],
    },
    layers: [],
  };
  const one = B.itemResult(r, 1),
    zero = B.itemResult(r, 0);
  const out = plain({
    one: [
      [0, 1],
      [1, 1],
      [1, 0],
    ].map(([q, k]) => M.cellReasons(one, q, k)),
    zero: [
      [0, 1],
      [1, 1],
    ].map(([q, k]) => M.cellReasons(zero, q, k)),
  });
  eq(out.one, [["causal", "padding"], ["padding"], []]);
  eq(out.zero, [["causal"], []]);
});

test("the store is one pure reducer over named actions", async () => {
  const S = await mod("store.js"),
    St = await mod("state.js"),
    Sel = await mod("selectors.js");
  // frozen all the way down: a reducer that changed the state it was given would throw (modules are strict)
  const freeze = (o) => {
    if (o && typeof o === "object" && !Object.isFrozen(o)) {
      Object.freeze(o);
      Object.values(o).forEach(freeze);
    }
    return o;
  };
  const model = {
    name: "random",
    layers: 1,
    heads: 1,
    options: { heads: 1, seed: 0 },
    default_text: "a b c",
    reads: ["text", "tokens", "x", "options"],
    default_masks: null,
    description: "",
  };
  const store = S.createStore((s, a) => freeze(S.reducer(freeze(s), a)), S.initialState());
  const seen = [];
  store.subscribe((s, prev, a) => seen.push(a.type));
  store.dispatch(S.act.modelsLoaded([model]));
  store.dispatch(S.act.restored(St.stateForModel(model)));
  const eligible = [
    [true, false, false],
    [true, true, false],
    [true, true, true],
  ];
  const w = [
    [1, 0, 0],
    [0.5, 0.5, 0],
    [0.2, 0.3, 0.5],
  ];
  const result = {
    model: "random",
    tokens: ["a", "b", "c"],
    eligible,
    reasons: null,
    config: { n_layers: 1, n_heads: 1, n_kv_heads: 1, batch: null },
    masks: { causal: true, padding: null, window: null, blocked: [] },
    layers: [{ index: 0, heads: [{ index: 0, kv_group: 0, weights: w, scores: w }] }],
  };
  store.dispatch(S.act.runSucceeded(result, { model: "random", text: "a b c" }, { masks: store.getState().ui.masks }));
  const good = store.getState().ui;
  store.dispatch(S.act.cellToggled(2, 0, "eligibility"));
  const toggled = store.getState();
  store.dispatch(S.act.runFailed({ code: "no_eligible_key", field: "masks", message: "no key", hint: "h" }));
  const failed = store.getState();
  const same = store.getState();
  store.dispatch(S.act.optionSet("heads", 1)); // the value it already has: no change at all
  let unknown = null;
  try {
    S.reducer(same, { type: "noSuchAction" });
  } catch (e) {
    unknown = e.message;
  }
  const out = plain({
    seen,
    want: toggled.run.want,
    blocked: toggled.ui.masks.blocked,
    where: toggled.run.where,
    rolledBack: failed.ui === good || JSON.stringify(failed.ui) === JSON.stringify(good),
    error: failed.run.error,
    kept: failed.run.result === toggled.run.result,
    noop: store.getState() === same,
    view: Sel.selectView(failed).focus,
    unknown,
  });
  eq(out.seen, ["modelsLoaded", "restored", "runSucceeded", "cellToggled", "runFailed"]);
  eq([out.want, out.blocked, out.where], [2, [[2, 0]], "eligibility"]);
  assert.ok(out.rolledBack && out.kept && out.noop);
  eq([out.error.where, out.error.action], ["eligibility", "cell query 2 → key 0 blocked"]);
  eq([out.view, out.unknown], [[0, 0], "unknown action noSuchAction"]);
});

test("the limit hint names the setting of the limit hit", async () => {
  // Too many characters (413) is ATTNLAB_MAX_TEXT_CHARS; too many tokens (422) is ATTNLAB_MAX_TOKENS.
  const api = await mod("api.js");
  const hint = (status, field) => api.describeError(new api.ApiError(status, "too_large", field, "x")).hint;
  const out = plain({
    chars: hint(413, "text"),
    token: hint(422, "text"),
    item: hint(413, "texts[2]"),
    tok: hint(413, "tokens[0]"),
    src: hint(422, "source.tokens"),
    include: hint(422, "include"),
  });
  assert.ok(out.chars.includes("ATTNLAB_MAX_TEXT_CHARS") && !out.chars.includes("ATTNLAB_MAX_TOKENS"));
  assert.ok(out.token.includes("ATTNLAB_MAX_TOKENS") && !out.token.includes("TEXT_CHARS"));
  assert.ok(out.item.includes("ATTNLAB_MAX_TEXT_CHARS") && out.tok.includes("ATTNLAB_MAX_TEXT_CHARS"));
  assert.ok(out.src.includes("ATTNLAB_MAX_TOKENS") && out.include.includes("ATTNLAB_MAX_RESULT_VALUES"));
});

// last: it registers two panels, which every module of this file then shares
test("the chapter settings round-trip and stay out of other endpoints", async () => {
  // the cost's and the sweep's settings are their panels' declarations, registered as main.js registers
  // data-panel="cost" and data-panel="sweep"
  const R = await mod("registry.js"),
    Sw = await mod("sweep.js"),
    Co = await mod("cost.js");
  const Au = await mod("audit.js");
  R.register("cost", Co.panel);
  R.register("sweep", Sw.panel);
  const S = { ...(await mod("state.js")), ...(await mod("requests.js")) };
  const s = S.defaultState();
  Object.assign(s, {
    model: "random",
    text: "a b c",
    bug: "flipped_mask",
    decodeOn: true,
    decodeStep: 3,
    cost: { seq_len: 8192, dtype: "bfloat16" },
    sweep: { variance: 2.5 },
  });
  const back = S.decodeState("?" + S.encodeState(s));
  const fresh = S.decodeState("?" + S.encodeState({ ...S.defaultState(), model: "random" }));
  const att = { ...S.buildRequest(s, { layers: 2, heads: 4, d_model: 64 }, 3), layer: 1 };
  const junk = S.decodeState("?m=random&bug=typo&cost=seq_len:-1,heads:x,dtype:int8,layers:3&sweep=99&dec=x");
  const out = plain({
    s,
    back,
    fresh,
    att,
    sweepMax: Sw.SWEEP_VARIANCE.max,
    heads: S.headTypesRequest(att),
    decode: S.decodeRequest(att),
    audit: Au.auditRequest(att),
    junk,
    cost: Co.costRequest(
      { n_heads: 8, n_kv_heads: 2, d_model: 32, n_layers: 1, dtype: "float32", batch: null },
      6,
      { heads: 2, kv_heads: 2 },
      true,
    ),
  });
  assert.deepStrictEqual(out.back, out.s);
  const f = out.fresh;
  eq([f.bug, f.decodeOn, f.cost, f.sweep], [null, false, null, null]);
  assert.equal(out.att.demo_bug, "flipped_mask");
  for (const key of ["heads", "decode"]) {
    for (const field of ["demo_bug", "include", "layer"]) assert.ok(!(field in out[key]), `${key}.${field}`);
  }
  eq(out.audit.include, ["audit"]);
  assert.equal(out.audit.demo_bug, "flipped_mask");
  assert.ok(!("layer" in out.audit));
  const junk2 = out.junk;
  none(junk2.bug);
  eq(junk2.cost, { layers: 3 });
  eq(junk2.sweep, { variance: out.sweepMax });
  assert.equal(junk2.decodeOn, true);
  none(junk2.decodeStep);
  eq(out.cost, {
    batch: 1,
    heads: 2,
    kv_heads: 2,
    seq_len: 6,
    d_model: 32,
    layers: 1,
    dtype: "float32",
    measure: true,
  });
});

test("the page's first run is asked in the task of the action that wants it, once for the latest want", async () => {
  const S = await mod("store.js"),
    St = await mod("state.js"),
    E = await mod("effects.js");
  const model = {
    name: "random",
    layers: 1,
    heads: 1,
    options: { heads: 1, seed: 0 },
    default_text: "a b c",
    reads: ["text", "tokens", "x", "options"],
    default_masks: null,
    description: "",
  };
  const sent = [];
  const fail = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (url, init) => {
    sent.push([String(url), JSON.parse(init.body).text]);
    return new Promise((_, reject) => fail.push(() => reject(new TypeError("Failed to fetch"))));
  };
  try {
    const store = S.createStore(S.reducer, S.initialState());
    E.startEffects(store);
    store.dispatch(S.act.modelsLoaded([model]));
    store.dispatch(S.act.restored(St.stateForModel(model)));
    store.dispatch(S.act.restored({ ...St.stateForModel(model), text: "a b c d" })); // a second want, same task
    await Promise.resolve(); // the microtasks queued so far, no timer
    eq(sent, [["/api/attention", "a b c d"]]);
    // the request refused: the run fails (and stops asking for its progress)
    const failed = new Promise((done) => store.subscribe((s) => s.run.status === "error" && done()));
    fail.forEach((f) => f());
    await failed;
  } finally {
    globalThis.fetch = realFetch;
  }
});
