"""The page's pure JS helpers, imported as ES modules in the real browser and called directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.browser


def test_state_round_trips_through_the_url(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'random', text: 'a b <c> & d',
          options: {d_model: 32, heads: 8, seed: 7, positions: true},
          allMasked: 'zero', scale: false, view: 'scores', palette: 'cividis', layer: 'all',
          focus: [2, 5], query: 3, page: 1});
        s.masks = {causal: true, window: 2, padded: [0, 4], blocked: [[1, 0], [3, 2]]};
        // the link's options are read as the model's /api/models entry declares them
        const random = {d_model: 64, heads: 4, kv_heads: null, seed: 0, positions: false};
        const back = S.decodeState('?' + S.encodeState(s), (m) => (m === 'random' ? random : {}));
        const undeclared = S.decodeState('?' + S.encodeState(s)).options;
        const tb = S.defaultState();
        tb.matrices = {x: [[1, 2]], w_q: [[0.5]], w_k: [[1]], w_v: [[-1e-3]]};
        return {s, back, undeclared, tb: S.decodeState(S.encodeState(tb)).matrices, none: S.decodeState('?t=hello'),
                junk: S.decodeState('?m=random&pad=x,-1,2&block=1-a,2-3&view=nope&layer=-4&focus=a.b&query=-2&mx=%7B')};
        """
    )
    assert out["back"] == out["s"]
    assert out["undeclared"] == {}  # a model that declares no options reads none from the link
    assert out["tb"] == {"x": [[1, 2]], "w_q": [[0.5]], "w_k": [[1]], "w_v": [[-0.001]]}
    assert out["none"] is None
    junk = out["junk"]
    assert junk["masks"]["padded"] == [2] and junk["masks"]["blocked"] == [[2, 3]]
    assert (junk["view"], junk["layer"], junk["focus"], junk["query"], junk["matrices"]) == (
        "weights",
        0,
        None,
        None,
        None,
    )


def test_build_request_matches_the_api(js: Callable[[str], Any], live_server: str) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'random', text: 'w x y z', options: {d_model: 16, heads: 2, kv_heads: null, seed: 1}});
        s.masks = {causal: true, window: null, padded: [1, 9], blocked: [[3, 0], [8, 8]]};
        const multi = S.buildRequest({...s, layer: 2}, {layers: 6, heads: 12, d_model: 384}, 4);
        const req = S.buildRequest(s, {layers: 1, heads: 4, d_model: 64}, 4);
        return {req, multi, fit: S.fitRows([[1, 2], [3, 4]], 3)};
        """
    )
    req = out["req"]
    assert req["masks"] == {"causal": True, "padded": [1], "window": None, "blocked": [[3, 0]]}
    assert req["options"] == {"d_model": 16, "heads": 2, "seed": 1}
    assert "layer" not in req and "contexts" in req["include"] and "qkv" in req["include"]
    assert out["multi"]["layer"] == 2 and "contexts" not in out["multi"]["include"]
    assert out["fit"] == [[1, 2], [3, 4], [0, 0]]
    resp = httpx.post(f"{live_server}/api/attention", json=req, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["masks"]["padding"] == [True, False, True, True]


@pytest.mark.parametrize(
    "masks",
    [
        {"causal": True, "window": None, "padded": [], "blocked": []},
        {"causal": False, "window": 2, "padded": [3], "blocked": [[0, 1]]},
        {"causal": True, "window": 3, "padded": [0, 5], "blocked": [[4, 4], [5, 1]]},
    ],
)
def test_cell_reasons_are_read_from_the_servers_reasons(
    js: Callable[[str], Any], live_server: str, masks: dict[str, Any]
) -> None:
    # the page holds no mask semantics: the reasons it shows for each cell are the result's own grids
    import json

    req = js(f"const M = await mod('masks.js'); return M.masksRequest({json.dumps(masks)}, 6);")
    resp = httpx.post(
        f"{live_server}/api/attention",
        json={"model": "random", "text": "a b c d e f", "masks": req, "all_masked": "zero", "include": ["eligibility"]},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    result = resp.json()
    given = json.dumps({"reasons": result["reasons"], "eligible": result["eligible"]})
    shown = js(
        f"""const M = await mod('masks.js'); const r = {given};
        return r.eligible.map((row, q) => row.map((_, k) => M.cellReasons(r, q, k)));"""
    )
    grids = result["reasons"]
    for q in range(6):
        for k in range(6):
            want = [n for n in ("causal", "window", "padding", "blocked") if n in grids and grids[n][q][k]]
            assert shown[q][k] == want, (q, k)
            assert (shown[q][k] == []) == result["eligible"][q][k]
    batch = js("const M = await mod('masks.js'); return M.cellReasons({reasons: null, eligible: [[false]]}, 0, 0);")
    assert batch == ["masked"]


def test_mask_edits_are_pure(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const M = await mod('masks.js');
        const b0 = [[2, 1]];
        const b1 = M.toggleBlocked(b0, 0, 3);
        const prev = {model: 'r', tokens: ['a', 'b'], eligible: [[true, true], [true, true]],
                      layers: [{index: 0, heads: [{index: 0, weights: [[0.5, 0.5], [0.5, 0.5]]}]}]};
        const next = {model: 'r', tokens: ['a', 'b'], eligible: [[true, false], [true, true]],
                      layers: [{index: 0, heads: [{index: 0, weights: [[1, 0], [0.5, 0.5]]}]}]};
        return {b0, b1, b2: M.toggleBlocked(b1, 2, 1), p: M.togglePadded([4], 1), p2: M.togglePadded([1, 4], 4),
                flags: M.paddingFlags([1, 7], 3), none: M.paddingFlags([], 3),
                back: M.paddedFromFlags([true, false, false]),
                clamp: M.clampMasks({causal: true, padded: [0, 3], blocked: [[0, 2], [1, 1]]}, 2),
                rows: M.emptyRows([[false, false], [true, false]]), split: M.splitTokens('  a\\tb  c\\n'),
                diff: M.diffResults(prev, next, 0),
                other: M.diffResults(prev, {...next, tokens: ['a', 'c']}, 0).comparable};
        """
    )
    assert out["b0"] == [[2, 1]] and out["b1"] == [[0, 3], [2, 1]] and out["b2"] == [[0, 3]]
    assert out["p"] == [1, 4] and out["p2"] == [1]
    assert out["flags"] == [True, False, True] and out["none"] is None and out["back"] == [1, 2]
    assert out["clamp"] == {"causal": True, "padded": [0], "blocked": [[1, 1]]}
    assert out["rows"] == [0] and out["split"] == ["a", "b", "c"]
    d = out["diff"]
    assert d["comparable"] and d["newlyMasked"] == [[0, 1]] and d["newlyEligible"] == []
    assert d["maxDelta"] == 0.5 and d["where"] == {"head": 0, "q": 0, "k": 0}
    assert out["other"] is False


def test_colour_scales(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const C = await mod('colors.js');
        return {lo: C.colorAt(C.VIRIDIS, 0), hi: C.colorAt(C.VIRIDIS, 1), clampLo: C.colorAt(C.VIRIDIS, -3),
                nan: C.colorAt(C.VIRIDIS, NaN), mid: C.colorAt(C.RDBU, 0.5),
                scores: C.scaleFor('scores', 'viridis', 2.5),
                zero: C.scaleFor('scores', 'viridis', 0), weights: C.scaleFor('weights', 'cividis', 9),
                maxAbs: C.maxAbsEligible([{scores: [[1, -7], [3, 2]]}], [[true, false], [true, true]]),
                plotly: C.plotlyScale(['#000000', '#ffffff']), ink: [C.inkOn([253, 231, 37]), C.inkOn([68, 1, 84])],
                maskIsOffScale: [...C.VIRIDIS, ...C.CIVIDIS, ...C.RDBU].includes(C.MASK_FILL)};
        """
    )
    assert out["lo"] == [68, 1, 84] and out["hi"] == [253, 231, 37] and out["clampLo"] == out["lo"] == out["nan"]
    assert out["mid"] == [247, 247, 247]
    assert (out["scores"]["min"], out["scores"]["max"]) == (-2.5, 2.5) and out["zero"]["max"] == 1
    assert (out["weights"]["min"], out["weights"]["max"]) == (0, 1) and out["weights"]["stops"][0] == "#00224e"
    assert out["maxAbs"] == 3
    assert out["plotly"] == [[0, "#000000"], [1, "#ffffff"]]
    assert out["ink"] == ["#111", "#fff"] and out["maskIsOffScale"] is False


def test_heatmap_geometry(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const H = await mod('heatmap.js');
        const L = H.layoutFor(10, {cell: 12, labels: true});
        const hits = [];
        for (let q = 0; q < 10; q++) for (let k = 0; k < 10; k++) {
          const c = H.cellAt(L, L.left + k * 12 + 6, L.top + q * 12 + 6);
          hits.push(c.q === q && c.k === k);
        }
        return {all: hits.every(Boolean), outside: [H.cellAt(L, L.left - 1, L.top), H.cellAt(L, L.left, L.top + 120)],
                masked: H.maskedCells([[true, false], [false, true]]),
                drawn: H.drawnValues([[0.3, 0.7], [1, 0]], [[true, false], [true, true]]),
                thin: H.layoutFor(200, {cell: 2, labels: false}).step, t: H.truncate('abcdefghij', 5)};
        """
    )
    assert out["all"] and out["outside"] == [None, None]
    assert out["masked"] == ["0-1", "1-0"]
    assert out["drawn"] == [[0.3, None], [1, 0]]
    assert out["thin"] > 1 and out["t"] == "abcd…"


def test_view_helpers(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const heads = await mod('heads.js'), flow = await mod('flow.js'), focus = await mod('focuscells.js');
        const rd = await mod('retrieval.js'), api = await mod('api.js'), ex = await mod('exporter.js');
        const mx = await mod('matrices.js'), el = await mod('eligibility.js'), st = await mod('stats.js');
        const all = Array.from({length: 72}, (_, i) => i);
        const m = {x: [[1]], w_q: [[1]], w_k: [[1]], w_v: [[1]]};
        return {
          p0: heads.pageOf(all, 0), p9: heads.pageOf(all, 9), cells: [heads.cellSize(5, 1), heads.cellSize(200, 24)],
          thumb: heads.THUMB_PX,
          vis: [flow.visibleHeads(4), flow.visibleHeads(12)], shape: flow.shape([5, 3]),
          esc: focus.plotlyText('<b>&x</b>'), path: focus.maskPath([[true, false], [false, false]]).x.length,
          widths: [rd.lineWidth(0), rd.lineWidth(0.5), rd.lineWidth(1), rd.lineWidth(7)],
          err: api.describeError(
            new api.ApiError(422, 'no_eligible_key', 'masks', 'masks: query rows 0 have no eligible key')),
          net: api.describeError(new TypeError('Failed to fetch')).message,
          pad: api.describeError(new api.ApiError(422, 'invalid_input', 'masks.padded[0]', 'out of range')).hint,
          sheet: ex.sheetLayout([{w: 100, h: 80}, {w: 100, h: 80}, {w: 100, h: 80}], 2),
          edit: mx.setEntry(m, 'w_q', 0, 0, '2.5').w_q, bad: mx.setEntry(m, 'x', 0, 0, 'abc'), same: m.w_q,
          code: el.reasonCode(['causal', 'padding']),
          move: [el.moveCursor([0, 0], 'ArrowUp', 5, 5), el.moveCursor([4, 2], 'End', 5, 6),
                 el.moveCursor([1, 1], 'x', 5, 5)],
          row: st.statsRow('H0', {mean_entropy: 0.5, masked_mass: [0.2, 0.4], max_masked_weight: 0,
            max_row_sum_error: 3e-8, eligible_score_min: -1, eligible_score_max: 2, score_min: -3, score_max: 4,
            mean_distance: 1.234, zero_rows: [2]}),
        };
        """
    )
    assert (out["p0"]["pages"], len(out["p0"]["items"]), out["p9"]["page"], out["p9"]["items"][0]) == (3, 24, 2, 48)
    # a long sequence is downsampled into a fixed-size thumbnail instead of growing the card
    assert out["cells"][0] <= 34 and out["cells"][1] * 200 <= out["thumb"]
    assert out["vis"][0] == [0, 1, 2, 3] and out["vis"][1] == [0, 1, 2, None, 10, 11]
    # the masked cells' outline: one rectangle (6 points) per masked run of a row, (0, 1) and (1, 0..1)
    assert out["shape"] == "5 × 3" and out["esc"] == "&lt;b&gt;&amp;x&lt;/b&gt;" and out["path"] == 12
    w = out["widths"]
    assert w[0] < w[1] < w[2] == w[3]
    assert "All-masked rows" in out["err"]["hint"] and out["net"] == "Could not reach the attnlab server."
    assert "All-masked rows" not in out["pad"]  # by code and field: a bad padding position is another error
    assert out["sheet"]["places"][2]["x"] == out["sheet"]["places"][0]["x"]
    assert out["sheet"]["places"][2]["y"] > out["sheet"]["places"][0]["y"]
    assert out["edit"] == [[2.5]] and out["bad"] is None and out["same"] == [[1]]
    assert out["code"] == "CP" and out["move"] == [[0, 0], [4, 5], None]
    # a result from before the masked_mass split still reads; it has no health numbers
    assert out["row"] == [
        "H0",
        "0.500",
        "0.300",
        "0.000",
        "✓ 3.0e-8",
        "-1.000 … 2.000",
        "-3.000 … 4.000",
        "1.23",
        "2",
        "–",
        "–",
    ]


def test_head_types_sort_filter_and_best(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const H = await mod('headtypes.js');
        const rows = [
          {layer: 0, head: 0, previous_token: 0.9, induction: 0.0, entropy: 0.2},
          {layer: 0, head: 1, previous_token: 0.1, induction: null, entropy: 1.5},
          {layer: 1, head: 0, previous_token: 0.2, induction: 0.8, entropy: 0.7},
          {layer: 1, head: 3, previous_token: 0.3, induction: 0.6, entropy: 0.1},
        ];
        const ids = (rs) => rs.map(H.headLabel);
        return {
          byInduction: ids(H.sortRows(rows, 'induction', 'desc')),
          byInductionAsc: ids(H.sortRows(rows, 'induction', 'asc')),
          byHeadDesc: ids(H.sortRows(rows, 'head', 'desc')),
          layerOrder: ids(H.sortRows([...rows].reverse(), null)),
          find: ['L1H3', 'l1 h3', 'L1', 'H0', '1.3', 'x', ''].map((t) => ids(rows.filter((r) => H.matchesText(r, t)))),
          threshold: ids(H.filterRows(rows, {score: 'induction', min: 0.5})),
          both: ids(H.filterRows(rows, {text: 'L1', score: 'previous_token', min: 0.25})),
          best: H.headLabel(H.bestHead(rows, 'induction')),
          none: H.bestHead(rows, 'duplicate_token'),
          maxEntropy: H.columnMax(rows, H.COLUMNS.find((c) => c.key === 'entropy')),
        };
        """
    )
    assert out["byInduction"] == ["L1 H0", "L1 H3", "L0 H0", "L0 H1"]  # a missing score goes last
    assert out["byInductionAsc"] == ["L0 H0", "L1 H3", "L1 H0", "L0 H1"]
    assert out["byHeadDesc"] == ["L1 H3", "L1 H0", "L0 H1", "L0 H0"]
    assert out["layerOrder"] == ["L0 H0", "L0 H1", "L1 H0", "L1 H3"]
    assert out["find"] == [
        ["L1 H3"],
        ["L1 H3"],
        ["L1 H0", "L1 H3"],
        ["L0 H0", "L1 H0"],
        ["L1 H3"],
        [],
        ["L0 H0", "L0 H1", "L1 H0", "L1 H3"],
    ]
    assert out["threshold"] == ["L1 H0", "L1 H3"]
    assert out["both"] == ["L1 H3"]
    assert out["best"] == "L1 H0" and out["none"] is None
    assert out["maxEntropy"] == 1.5


def test_examples_build_repeats_from_a_vocabulary_and_place_pairs(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const E = await mod('examples.js');
        const vocab = Array.from({length: 50}, (_, i) => `w${i}`);
        const a = E.repeatedWords(vocab, 12, 7);
        const tokens = ['[CLS]', 'the', 'animal', 'didn', "'", 't', 'cross', 'it', 'animal', 'it', '[SEP]'];
        return {
          a, again: E.repeatedWords(vocab, 12, 7), other: E.repeatedWords(vocab, 12, 8),
          short: E.repeatedWords(['x', 'y'], 5, 1),
          pair: E.resolvePair(tokens, {query: 'it', key: 'animal'}),
          upper: E.resolvePair(['The', 'Cat', 'it'], {query: 'IT', key: 'cat'}),
          missing: E.resolvePair(tokens, {query: 'it', key: 'street'}),
          at: E.resolvePair(tokens, {at: [9, 2]}), outside: E.resolvePair(tokens, {at: [20, 2]}),
          text: E.exampleText({repeat: {words: 3, seed: 1}}, {vocab}),
          noVocab: E.exampleText({repeat: {words: 3, seed: 1}}, {vocab: null}),
        };
        """
    )
    a = out["a"]
    assert len(a) == 24 and a[:12] == a[12:] and len(set(a[:12])) == 12
    assert out["again"] == a and out["other"] != a
    assert sorted(out["short"]) == ["x", "x", "y", "y"]  # no more distinct words than the vocabulary holds
    assert out["pair"] == [7, 2] and out["upper"] == [2, 1] and out["missing"] is None
    assert out["at"] == [9, 2] and out["outside"] is None
    assert len(out["text"].split()) == 6 and out["noVocab"] is None


def test_state_keeps_the_pair_and_head_table_in_the_url(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'minilm', text: 'a b', pair: [10, 2], hsort: 'induction', hdir: 'asc',
                          hfind: 'L1', hscore: 'previous_token', hmin: 0.25});
        const att = {model: 'minilm', text: 'a b', masks: {causal: true}, all_masked: 'zero', scale: false,
                     include: ['weights'], layer: 3};
        return {
          s, back: S.decodeState('?' + S.encodeState(s)),
          half: S.encodeState({...S.defaultState(), pair: [3, null]}),
          junk: S.decodeState('?m=minilm&pair=a-1&hsort=nope&hmin=head:1'),
          heads: S.headTypesRequest(att),
          top: S.topHeadsRequest(att, [10, 2], 5),
          custom: S.headTypesRequest({model: 'random', text: 'a', options: {heads: 8}, x: [[1]],
                                      weights: {w_q: [[1]]}, include: [], layer: 0}),
        };
        """
    )
    assert out["back"] == out["s"]
    assert "pair" not in out["half"]
    junk = out["junk"]
    assert (junk["pair"], junk["hsort"], junk["hscore"]) == (None, None, "")
    assert out["heads"] == {
        "model": "minilm",
        "text": "a b",
        "all_masked": "zero",
        "masks": {"causal": True},
        "scale": False,
    }
    assert out["custom"] == {
        "model": "random",
        "text": "a",
        "options": {"heads": 8},
        "x": [[1]],
        "weights": {"w_q": [[1]]},
    }
    top = out["top"]
    assert "include" not in top and "layer" not in top
    assert (top["query"], top["key"], top["k"], top["scale"]) == (10, 2, 5, False)


def test_stats_name_masked_share_apart_from_masked_weight_and_flag_head_health(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const st = await mod('stats.js'), heads = await mod('heads.js');
        const base = {mean_entropy: 0.5, max_masked_weight: 0, max_row_sum_error: 0, eligible_score_min: 0,
          eligible_score_max: 1, score_min: 0, score_max: 1, mean_distance: 1, zero_rows: []};
        const dead = {...base, masked_share: [0.5, 0.1], masked_weight: [0, 0], kl_from_uniform: 0.0004, dead: true,
          identical_to: [2, 3], qk_rank: 3, qk_rank_max: 16};
        const fine = {...base, masked_share: [0, 0], masked_weight: [0, 2e-7], kl_from_uniform: 1.2, dead: false,
          identical_to: [], qk_rank: 16, qk_rank_max: 16};
        return {
          dead: st.statsRow('L1 H0', dead, 'L1 H'), fine: st.statsRow('H1', fine),
          columns: st.STATS_COLUMNS.map((c) => c[0]),
          flags: heads.healthFlags(dead, 'L1 H').map((f) => [f.kind, f.text]),
          fineFlags: heads.healthFlags(fine).map((f) => f.kind), none: heads.healthFlags(null),
          noRank: heads.healthFlags({...fine, qk_rank: null}).length,
        };
        """
    )
    cols = out["columns"]
    assert "Masked share" in cols and "Weight on masked keys" in cols and "Masked mass" not in cols
    assert cols[-2:] == ["KL from uniform", "Health"]
    dead = dict(zip(cols, out["dead"], strict=True))
    assert dead["Masked share"] == "0.300" and dead["Weight on masked keys"] == "0.000"
    assert dead["KL from uniform"] == "4.0e-4"
    assert dead["Health"] == "nearly uniform · = L1 H2, L1 H3 · QK rank 3/16"
    fine = dict(zip(cols, out["fine"], strict=True))
    assert fine["Weight on masked keys"] == "2.0e-7"  # not exactly 0: shown, so the page can flag it
    assert fine["Health"] == "QK rank 16/16"
    want = [["uniform", "nearly uniform"], ["identical", "= L1 H2, L1 H3"], ["rank-low", "QK rank 3/16"]]
    assert out["flags"] == want
    assert out["fineFlags"] == ["rank"] and out["none"] == [] and out["noRank"] == 0


def test_experiment_settings_round_trip_through_the_url(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'induction', text: 'a b a b',
          ablate: [{layer: 1, head: 0, mode: 'zero'}, {layer: 1, head: 3, mode: 'mean'}],
          edits: [{layer: 1, head: 2, query: 3, key: 1, weight: 0.25}],
          pin: {model: 'induction', text: 'a b c d', masks: {causal: true}, scale: true},
          perturbOn: true, perturb: {position: 2, kind: 'token', amount: 1, token: 'x,y'}});
        const follow = {...S.defaultState(), perturbOn: true,
                        perturb: {position: null, kind: 'shift', amount: -2.5, token: ''}};
        return {
          s, back: S.decodeState('?' + S.encodeState(s)),
          follow, followBack: S.decodeState('?' + S.encodeState(follow)),
          plain: S.encodeState(S.defaultState()),
          junk: S.decodeState('?m=random&abl=1.0.zero,1.0.mean,a.1.zero,1.2.half,-1.0.zero' +
                              '&edit=1.2.3.1@2,1.2.3@0.5,0.0.1.0@0.5&pin=%5B1%5D&pert=x,shift,1'),
          pinJunk: [S.parsePin('{"text": "no model"}'),
                    S.parsePin('{"model": "m", "include": ["weights"], "layer": 2}'), S.parsePin('{bad')],
          pert: [S.parsePerturb('q,shift,abc'), S.parsePerturb('3,token,'), S.parsePerturb('q,shift,2')],
        };
        """
    )
    assert out["back"] == out["s"]
    assert out["followBack"] == out["follow"]
    plain = out["plain"]
    assert all(k not in plain for k in ("abl=", "edit=", "pin=", "pert="))
    junk = out["junk"]
    assert junk["ablate"] == [{"layer": 1, "head": 0, "mode": "zero"}]  # one entry per head, bad ones dropped
    assert junk["edits"] == [{"layer": 0, "head": 0, "query": 1, "key": 0, "weight": 0.5}]
    assert junk["pin"] is None and junk["perturbOn"] is False
    assert out["pinJunk"] == [None, {"model": "m"}, None]
    assert out["pert"] == [None, None, {"position": None, "kind": "shift", "amount": 2, "token": ""}]


def test_experiment_requests_match_the_contract(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const att = {model: 'minilm', text: 'a b', masks: {causal: true}, scale: true,
                     include: ['scores', 'weights'], layer: 3};
        return {
          shift: S.perturbRequest(att, 4, {position: null, kind: 'shift', amount: 1.5, token: 'zz'}),
          token: S.perturbRequest(att, 0, {position: 0, kind: 'token', amount: 1, token: 'dog'}),
          dir: S.perturbRequest({...att, demo_bug: 'flipped_mask'}, 2, {position: 2, kind: 'direction', amount: 2}),
          iv: S.interveneRequest({...att, include: ['weights']}, [{layer: 1, head: 2, mode: 'mean', extra: 1}],
                                 [{layer: 0, head: 1, query: 3, key: 0, weight: 0.5}], 5),
          ivAblateOnly: S.interveneRequest(att, [{layer: 0, head: 0, mode: 'zero'}], [], 3),
          pin: S.pinRequest(att),
          cmp: S.compareRequest(S.pinRequest(att), {...att, masks: {causal: false}}, 2),
          cmpAll: S.compareRequest(S.pinRequest(att), att, null),
          ivBug: S.interveneRequest({...att, demo_bug: 'softmax_over_queries'}, [{layer: 0, head: 0}], []),
          cmpBug: S.compareRequest(S.pinRequest(att), {...att, demo_bug: 'flipped_mask'}, null),
          batchBug: S.interveneRequest({...att, texts: ['a', 'b'], demo_bug: 'flipped_mask'}, [], []),
        };
        """
    )
    shift = out["shift"]
    assert "include" not in shift and "layer" not in shift
    assert shift["position"] == 4 and shift["change"] == {"kind": "shift", "amount": 1.5}
    assert out["token"]["change"] == {"kind": "token", "token": "dog"}
    # the default change, and the view's demo_bug goes with it (perturb runs the code the view shows)
    assert out["dir"]["change"] == {"kind": "direction", "norm": 2} and out["dir"]["demo_bug"] == "flipped_mask"
    iv = out["iv"]
    assert iv["ablate"] == [{"layer": 1, "head": 2, "mode": "mean"}]
    assert iv["edit"] == [{"layer": 0, "head": 1, "query": 3, "key": 0, "weight": 0.5}]
    assert iv["top_k"] == 5 and iv["include"] == ["weights"]
    assert "edit" not in out["ivAblateOnly"]
    assert out["pin"] == {"model": "minilm", "text": "a b", "masks": {"causal": True}, "scale": True}
    cmp = out["cmp"]
    assert cmp["a"]["masks"] == {"causal": True} and cmp["b"]["masks"] == {"causal": False}
    assert cmp["a"]["include"] == cmp["b"]["include"] == ["weights"]
    assert cmp["a"]["layer"] == cmp["b"]["layer"] == 2
    assert "layer" not in out["cmpAll"]["a"] and "layer" not in out["cmpAll"]["b"]
    # intervene and compare run the view's classic bug too, each side of a comparison its own
    assert out["ivBug"]["demo_bug"] == "softmax_over_queries" and "demo_bug" not in out["iv"]
    assert "demo_bug" not in out["cmpBug"]["a"] and out["cmpBug"]["b"]["demo_bug"] == "flipped_mask"
    assert out["batchBug"]["demo_bug"] == "flipped_mask"  # a batch's item runs on its own, on the view's code


def test_bodies_carry_the_views_bug_or_say_they_run_the_correct_code(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const R = await mod('requests.js'), B = await mod('bugs.js');
        const att = {model: 'induction', text: 'a b', masks: {causal: true}, include: ['weights'], layer: 1,
                     demo_bug: 'norm_over_sequence'};
        const key = (body) => JSON.stringify(body);
        return {single: R.singleRequest(att), claim: R.claimRequest(att), heads: R.headTypesRequest(att),
                carried: B.correctCodeNote('norm_over_sequence', [key(R.claimRequest(att)), null]),
                dropped: B.correctCodeNote('norm_over_sequence', [key(R.headTypesRequest(att))]),
                mixed: B.correctCodeNote('flipped_mask', [key(R.claimRequest(att)), key(R.headTypesRequest(att))]),
                noBug: B.correctCodeNote(null, [key(R.headTypesRequest(att))]),
                unasked: B.correctCodeNote('flipped_mask', [null])};
        """
    )
    assert out["single"]["demo_bug"] == out["claim"]["demo_bug"] == "norm_over_sequence"
    assert "demo_bug" not in out["heads"]
    assert out["carried"] is None and out["noBug"] is None and out["unasked"] is None
    assert out["dropped"] and "correct code" in out["dropped"] and "norm over the sequence axis" in out["dropped"]
    assert out["mixed"] and "flipped mask" in out["mixed"]


def test_the_rows_hide_sinks_sets_are_told_apart(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const B = await mod('bugs.js');
        const T = true, F = false;
        const causal = [[T, F, F], [T, T, F], [T, T, T], [F, F, F]];  // the last row: all masked
        const rows = (m) => Object.fromEntries(m);
        return {renorm: rows(B.sinkRows(causal, [0], true)), kept: rows(B.sinkRows(causal, [0], false)),
                none: rows(B.sinkRows(causal, [], false)), two: rows(B.sinkRows(causal, [0, 1], true))};
        """
    )
    assert out["renorm"] == {"0": "hidden"}
    assert out["kept"] == {"0": "hidden", "1": "kept", "2": "kept"}
    assert out["none"] == {}
    assert out["two"] == {"0": "hidden", "1": "hidden"}


def test_claim_chart_helpers(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const C = await mod('claims.js');
        const checks = [
          {name: 'causal', claim: 'c', holds: true, max_delta: 0, protected: [0, 1, 2]},
          {name: 'padding', claim: 'p', holds: false, max_delta: 0.25, protected: [5, 1]},
        ];
        const prot = new Set(C.protectedPositions(checks));
        const bars = C.barGeometry([0, 0.5, 1, 2], 2, C.CHART, new Set([0, 1]));
        return {
          prot: [...prot], summary: C.verdictSummary({checks}), empty: C.verdictSummary({checks: []}),
          max: C.sharedMax([[0, -3], [2, NaN]]), bars,
          fmt: [C.formatDelta(0), C.formatDelta(0.5), C.formatDelta(2e-9)],
        };
        """
    )
    assert out["prot"] == [0, 1, 2, 5]
    s = out["summary"]
    assert s["holds"] is False and s["names"] == ["causal", "padding"]
    assert s["lines"][0]["text"].startswith("✓ holds · causal") and s["lines"][1]["text"].startswith("✗ leak")
    assert out["empty"]["holds"] is True and out["empty"]["names"] == []
    assert out["max"] == 3
    bars = out["bars"]
    assert bars[0]["height"] == 0 and bars[3]["height"] > bars[2]["height"] > bars[1]["height"] > 0
    assert [b["leak"] for b in bars] == [False, True, False, False]  # protected and moved = a leak
    assert all(bars[i + 1]["x"] > bars[i]["x"] for i in range(3))
    assert out["fmt"] == ["0", "0.5000", "2.00e-9"]


def test_intervention_helpers(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const I = await mod('interventions.js');
        let abl = I.toggleAblation([], 1, 3, 'zero');
        abl = I.toggleAblation(abl, 0, 2, 'mean');
        const off = I.toggleAblation(abl, 1, 3, 'zero');
        const edits = I.addEdit(I.addEdit([], {layer: 1, head: 0, query: 4, key: 1, weight: 0.2}),
                                {layer: 1, head: 0, query: 4, key: 1, weight: 0.9});
        const w = (v) => [[1, 0], [v, 1 - v]];
        const before = {layers: [{index: 0, heads: [{index: 0, weights: w(0.5)}, {index: 1, weights: w(0.5)}]},
                                 {index: 1, heads: [{index: 0, weights: w(0.5)}, {index: 1, weights: w(0.5)}]}]};
        const after = {layers: [{index: 0, heads: [{index: 0, weights: w(0.5)}, {index: 1, weights: w(0.5)}]},
                                {index: 1, heads: [{index: 0, weights: w(0.1)}, {index: 1, weights: w(0.7)}]}]};
        const tokens = ['a', 'b', 'c'];
        const g = (t, p) => [{token: t, p}];
        const preds = {before: [g('b', 0.9), g('c', 0.8), g('a', 0.5)], after: [g('b', 0.7), g('a', 0.4), g('a', 0.5)]};
        return {
          abl, off, edits, valid: I.keepValid([{layer: 1, head: 3}, {layer: 2, head: 0}, {layer: 0, head: 4}], 2, 4),
          affected: I.affectedHeads(abl, edits),
          shown: I.shownHeads(before, after, [{layer: 0, head: 1}]),
          rows: I.predictionRows(tokens, preds, [0.1, 0.2], [0.3, 2.5]),
          flipped: I.flippedPositions(preds), none: I.predictionRows(tokens, null),
          words: I.describeInterventions(abl, edits),
        };
        """
    )
    assert out["abl"] == [{"layer": 0, "head": 2, "mode": "mean"}, {"layer": 1, "head": 3, "mode": "zero"}]
    assert out["off"] == [{"layer": 0, "head": 2, "mode": "mean"}]
    assert out["edits"] == [{"layer": 1, "head": 0, "query": 4, "key": 1, "weight": 0.9}]
    assert out["valid"] == [{"layer": 1, "head": 3}]
    assert out["affected"] == [{"layer": 0, "head": 2}, {"layer": 1, "head": 0}, {"layer": 1, "head": 3}]
    shown = [(h["layer"], h["head"], h["affected"], round(h["maxAbs"], 6)) for h in out["shown"]]
    assert shown == [(0, 1, True, 0), (1, 0, False, 0.4), (1, 1, False, 0.2)]  # affected first, then most moved
    rows = out["rows"]
    assert [r["changed"] for r in rows] == [False, True, False]
    assert rows[0]["rightBefore"] and rows[1]["rightBefore"] and not rows[1]["rightAfter"]
    assert rows[1]["lossAfter"] == 2.5 and rows[2]["lossAfter"] is None and rows[2]["next"] is None
    assert out["flipped"] == [1] and out["none"] == []
    assert out["words"] == "L0 H2 mean-ablated · L1 H3 zeroed · L1 H0 weight 4→1 set to 0.9"


def test_compare_helpers(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const C = await mod('compare.js');
        const head = (i, m) => ({index: i, diff: [[0]], max_abs: m, where: [0, 0]});
        const many = {layers: [0, 1, 2].map((l) => ({index: l, heads: [0, 1, 2, 3].map((h) => head(h, l * 10 + h))}))};
        const big = C.diffMaps(many, 3);
        return {
          scale: C.diffScale(0.4), flat: C.diffScale(0),
          either: C.eitherEligible([[true, false], [false, false]], [[false, true], [false, false]]),
          big: big.maps.map((m) => [m.layer, m.head]), total: big.total,
          all: C.diffMaps(many).maps.length,
          body: C.describeBody({model: 'random', text: 'a b',
                                masks: {causal: true, padding: [true, false], window: 2}}),
          plain: C.describeBody({model: 'minilm', text: 'x'}),
        };
        """
    )
    assert (out["scale"]["min"], out["scale"]["max"]) == (-0.4, 0.4) and out["scale"]["stops"][5] == "#f7f7f7"
    assert (out["flat"]["min"], out["flat"]["max"]) == (-1, 1)
    assert out["either"] == [[True, True], [False, False]]
    assert out["big"] == [[2, 1], [2, 2], [2, 3]] and out["total"] == 12 and out["all"] == 12
    assert out["body"] == "random · “a b” · causal, window 2, 1 padded"
    assert out["plain"] == "minilm · “x” · default masks"


def test_a_leak_is_drawn_as_a_leak(js: Callable[[str], Any]) -> None:
    # the real engine never leaks, so a made-up answer shows what a broken mask would look like
    out = js(
        """
        const C = await mod('claims.js');
        const root = document.createElement('section');
        root.innerHTML = '<span data-role="status"></span><p data-testid="perturb-verdict" hidden></p>' +
                         '<ul data-role="checks"></ul><div data-role="charts"></div>';
        document.body.append(root);
        const result = {
          model: 'm', tokens: ['a', 'b', 'c', 'd'], tokens_after: ['a', 'b', 'c', 'd'], position: 2,
          change: {kind: 'shift', amount: 1}, final: 'the last layer',
          layers: [{index: 0, delta: [0, 0, 1, 0.5]}, {index: 1, delta: [0.25, 0, 1, 0.5]}],
          final_delta: [0.25, 0, 1, 0.5],
          checks: [{name: 'causal', claim: 'positions 0-1 do not move', holds: false, max_delta: 0.25,
                    protected: [0, 1]}],
          verdict: 'causal leaks at position 0',
        };
        C.renderPerturb(root, {result, status: 'ready', message: ''});
        const v = root.querySelector('[data-testid=perturb-verdict]');
        const chart = (l) => [...root.querySelectorAll(`svg[data-layer="${l}"] rect.bar`)]
          .map((b) => b.getAttribute('class'));
        const out = {text: v.textContent, holds: v.dataset.holds, cls: v.className, hidden: v.hidden,
                     checks: [...root.querySelectorAll('li')].map((li) => [li.dataset.check, li.className]),
                     l0: chart(0), l1: chart(1), charts: root.querySelectorAll('svg.delta-chart').length};
        C.renderPerturb(root, {result: null, status: 'error', message: 'nope'});
        out.cleared = [v.hidden, root.querySelectorAll('svg.delta-chart').length,
                       root.querySelector('[data-role=status]').textContent];
        root.remove();
        return out;
        """
    )
    assert out["text"].startswith("✗ causal leaks") and out["holds"] == "false" and "leak" in out["cls"]
    assert out["hidden"] is False and out["checks"] == [["causal", "leak"]]
    assert out["l0"] == ["bar protected", "bar protected", "bar changed", "bar"]
    assert out["l1"][0] == "bar leak protected" and out["l1"][1] == "bar protected"
    assert out["charts"] == 3  # two layers and the final output
    assert out["cleared"] == [True, 0, "nope"]


def test_the_chapter_settings_round_trip_and_stay_out_of_other_endpoints(js: Callable[[str], Any]) -> None:
    out = js(
        """
        // the cost's and the sweep's settings are their panels' declarations, registered as main.js registers
        // data-panel="cost" and data-panel="sweep"
        const R = await mod('registry.js'), Sw = await mod('sweep.js'), Co = await mod('cost.js');
        const Au = await mod('audit.js');
        R.register('cost', Co.panel);
        R.register('sweep', Sw.panel);
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'random', text: 'a b c', bug: 'flipped_mask', decodeOn: true, decodeStep: 3,
          cost: {seq_len: 8192, dtype: 'bfloat16'}, sweep: {variance: 2.5}});
        const back = S.decodeState('?' + S.encodeState(s));
        const fresh = S.decodeState('?' + S.encodeState({...S.defaultState(), model: 'random'}));
        const att = {...S.buildRequest(s, {layers: 2, heads: 4, d_model: 64}, 3), layer: 1};
        const junk = S.decodeState('?m=random&bug=typo&cost=seq_len:-1,heads:x,dtype:int8,layers:3&sweep=99&dec=x');
        return {s, back, fresh, att, sweepMax: Sw.SWEEP_VARIANCE.max,
                heads: S.headTypesRequest(att), decode: S.decodeRequest(att),
                audit: Au.auditRequest(att), junk,
                cost: Co.costRequest({n_heads: 8, n_kv_heads: 2, d_model: 32, n_layers: 1, dtype: 'float32',
                                     batch: null}, 6, {heads: 2, kv_heads: 2}, true)};
        """
    )
    assert out["back"] == out["s"]
    fresh = out["fresh"]
    assert (fresh["bug"], fresh["decodeOn"], fresh["cost"], fresh["sweep"]) == (None, False, None, None)
    assert out["att"]["demo_bug"] == "flipped_mask"
    for key in ("heads", "decode"):
        assert "demo_bug" not in out[key] and "include" not in out[key] and "layer" not in out[key]
    assert out["audit"]["include"] == ["audit"] and out["audit"]["demo_bug"] == "flipped_mask"
    assert "layer" not in out["audit"]
    junk = out["junk"]
    assert junk["bug"] is None and junk["cost"] == {"layers": 3} and junk["sweep"] == {"variance": out["sweepMax"]}
    assert junk["decodeOn"] is True and junk["decodeStep"] is None
    assert out["cost"] == {
        "batch": 1, "heads": 2, "kv_heads": 2, "seq_len": 6, "d_model": 32, "layers": 1, "dtype": "float32",
        "measure": True,
    }  # fmt: skip


def test_sums_pairs_and_steps(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const B = await mod('bugs.js');
        const M = await mod('masks.js');
        const D = await mod('decode.js');
        const m = [[0.5, 0.5, 0], [0.25, 0.25, 0.5]];
        return {rows: B.rowSums(m), cols: B.columnSums(m), report: B.sumsReport([1, 0.9995, 0.5]),
                drawn: B.drawnEligibility([[true, false]], 'flipped_mask'),
                kept: B.drawnEligibility([[true, false]], 'softmax_over_queries'),
                pairs: M.pairLines({total: 36, causal: 21, window: 24, eligible: 15}).map(l => l.text),
                none: M.pairLines({total: 25, eligible: 25}).map(l => l.text), missing: M.pairLines(null),
                steps: [D.clampStep(null, 5), D.clampStep(9, 5), D.clampStep(-2, 5), D.clampStep(2, 5)],
                match: [D.matchText(2.7e-5), D.matchText(0.01)], bytes: [D.formatBytes(64), D.formatBytes(1073741824)],
                geo: [D.cacheGeometry({kv_heads: 2, d_head: 4, d_v: 4}, 3, 6).kWidth,
                      D.cacheGeometry({kv_heads: 8, d_head: 4, d_v: 4}, 3, 6).kWidth]};
        """
    )
    assert out["rows"] == [1, 1] and out["cols"] == [0.75, 0.75, 0.5]
    assert out["report"] == {"ones": 2, "total": 3, "worst": 0.5}
    assert out["drawn"] == [[True, True]] and out["kept"] == [[True, False]]
    assert out["pairs"] == [
        "causal: 21 of 36 pairs",
        "window: 24 of 36 pairs",
        "all together: 15 of 36 pairs eligible",
    ]
    assert out["none"] == ["no mask: 25 of 25 pairs eligible"] and out["missing"] == []
    assert out["steps"] == [4, 4, 0, 2]
    assert out["match"][0].endswith("matches the full pass") and out["match"][1].endswith("differs from the full pass")
    assert out["bytes"] == ["64 bytes", "1.07 GB"]
    assert out["geo"][1] == 4 * out["geo"][0]  # four times the K/V groups, a four times wider cache


def test_a_batch_and_a_source_become_one_sequence_for_the_other_endpoints(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = {...S.defaultState(), model: 'random', text: 'a b c'};
        s.masks = {causal: true, window: 2, padded: [1], blocked: [[0, 0], [2, 4]]};
        // what a model takes is its /api/models entry's capabilities
        const random = {layers: 1, capabilities: {batches: true, cross_attention: true}};
        const src = S.buildRequest({...s, source: 'x y z w v', sourcePadded: [4]}, random, 3);
        const batch = S.buildRequest({...s, batch: 'p q\\n\\n r s t ', source: 'x y'}, random, 3);
        const textbook = S.buildRequest({...s, model: 'textbook', source: 'x y', batch: 'p q'}, {layers: 1}, 3);
        return {src, batch, textbook, srcOne: S.singleRequest(src), item1: S.singleRequest(batch, 1),
                item9: S.singleRequest(batch, 9)};
        """
    )
    src = out["src"]
    assert src["text"] == "a b c" and src["source"] == {"text": "x y z w v", "padding": [True] * 4 + [False]}
    assert src["masks"] == {"blocked": [[0, 0], [2, 4]]}
    batch = out["batch"]
    assert batch["texts"] == ["p q", "r s t"] and "text" not in batch and "source" not in batch
    assert "padded" not in batch["masks"] and batch["masks"]["causal"] is True
    assert "texts" not in out["textbook"] and "source" not in out["textbook"]
    one = out["srcOne"]
    assert "source" not in one and one["text"] == "a b c" and one["masks"]["blocked"] == []
    assert out["item1"]["text"] == "r s t" and "texts" not in out["item1"] and out["item1"]["masks"]["causal"]
    assert out["item9"]["text"] == "r s t"


def test_a_batch_item_reads_its_own_reasons(js: Callable[[str], Any]) -> None:
    """The server's reasons for a batch are B x S x S: an item cut out of it names the masks behind its own cells."""
    out = js(
        """
        const B = await mod('batch.js'), M = await mod('masks.js');
        const F = false, T = true;
        const r = {tokens: ['a', 'b'], config: {batch: 2}, masks: {causal: true, blocked: []},
          batch_tokens: [['a', 'b'], ['c', '[PAD]']], batch_padding: [[T, T], [T, F]],
          eligible: [[[T, F], [T, T]], [[T, F], [T, F]]],
          reasons: {causal: [[[F, T], [F, F]], [[F, T], [F, F]]], padding: [[[F, F], [F, F]], [[F, T], [F, T]]]},
          layers: []};
        const one = B.itemResult(r, 1), zero = B.itemResult(r, 0);
        return {one: [[0, 1], [1, 1], [1, 0]].map(([q, k]) => M.cellReasons(one, q, k)),
                zero: [[0, 1], [1, 1]].map(([q, k]) => M.cellReasons(zero, q, k))};
        """
    )
    assert out["one"] == [["causal", "padding"], ["padding"], []]
    assert out["zero"] == [["causal"], []]


def test_the_store_is_one_pure_reducer_over_named_actions(js: Callable[[str], Any]) -> None:
    out = js(
        """
        const S = await mod('store.js'), St = await mod('state.js'), Sel = await mod('selectors.js');
        // frozen all the way down: a reducer that changed the state it was given would throw (modules are strict)
        const freeze = (o) => {
          if (o && typeof o === 'object' && !Object.isFrozen(o)) { Object.freeze(o); Object.values(o).forEach(freeze); }
          return o;
        };
        const model = {name: 'random', layers: 1, heads: 1, options: {heads: 1, seed: 0}, default_text: 'a b c',
                       reads: ['text', 'tokens', 'x', 'options'], default_masks: null, description: ''};
        const store = S.createStore((s, a) => freeze(S.reducer(freeze(s), a)), S.initialState());
        const seen = [];
        store.subscribe((s, prev, a) => seen.push(a.type));
        store.dispatch(S.act.modelsLoaded([model]));
        store.dispatch(S.act.restored(St.stateForModel(model)));
        const eligible = [[true, false, false], [true, true, false], [true, true, true]];
        const w = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]];
        const result = {model: 'random', tokens: ['a', 'b', 'c'], eligible, reasons: null,
          config: {n_layers: 1, n_heads: 1, n_kv_heads: 1, batch: null},
          masks: {causal: true, padding: null, window: null, blocked: []},
          layers: [{index: 0, heads: [{index: 0, kv_group: 0, weights: w, scores: w}]}]};
        store.dispatch(S.act.runSucceeded(result, {model: 'random', text: 'a b c'}, store.getState().ui.masks));
        const good = store.getState().ui;
        store.dispatch(S.act.cellToggled(2, 0, 'eligibility'));
        const toggled = store.getState();
        store.dispatch(S.act.runFailed({code: 'no_eligible_key', field: 'masks', message: 'no key', hint: 'h'}));
        const failed = store.getState();
        const same = store.getState();
        store.dispatch(S.act.optionSet('heads', 1));  // the value it already has: no change at all
        let unknown = null;
        try { S.reducer(same, {type: 'noSuchAction'}); } catch (e) { unknown = e.message; }
        return {seen, want: toggled.run.want, blocked: toggled.ui.masks.blocked, where: toggled.run.where,
                rolledBack: failed.ui === good || JSON.stringify(failed.ui) === JSON.stringify(good),
                error: failed.run.error, kept: failed.run.result === toggled.run.result,
                noop: store.getState() === same, view: Sel.selectView(failed).focus, unknown};
        """
    )
    assert out["seen"] == ["modelsLoaded", "restored", "runSucceeded", "cellToggled", "runFailed"]
    assert out["want"] == 2 and out["blocked"] == [[2, 0]] and out["where"] == "eligibility"
    assert out["rolledBack"] and out["kept"] and out["noop"]
    assert out["error"]["where"] == "eligibility" and out["error"]["action"] == "cell query 2 → key 0 blocked"
    assert out["view"] == [0, 0] and out["unknown"] == "unknown action noSuchAction"


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_arrays_reader_gives_the_json_numbers(js: Callable[[str], Any], precision: str) -> None:
    """static/js/arrays.js reads what the server writes (stacked heads, float16 widened) into the JSON's numbers."""
    out = js(
        f"""
        const {{ readArrays, halfRows, widenHalf, MEDIA_TYPE }} = await mod('arrays.js');
        const req = {{model: 'random', text: 'one two three two one four',
          options: {{heads: 3, kv_heads: 1, d_model: 12}}, masks: {{causal: true, padded: [4]}},
          include: ['scores', 'weights', 'qkv', 'contexts', 'output', 'stats'], precision: '{precision}'}};
        const post = (accept) => fetch('/api/attention', {{method: 'POST',
          headers: {{'content-type': 'application/json', accept}}, body: JSON.stringify(req)}});
        const json = await (await post('application/json')).json();
        const resp = await post(MEDIA_TYPE);
        const got = readArrays(await resp.arrayBuffer());
        // every number of the JSON against the reader's, by path; typed rows read like arrays
        let worst = 0, count = 0;
        const problems = [];
        const walk = (a, b, path) => {{
          if (typeof a === 'number') {{
            if (typeof b !== 'number') problems.push(path + ': ' + typeof b);
            else {{ worst = Math.max(worst, Math.abs(a - b) / Math.max(1, Math.abs(a))); count++; }}
            return;
          }}
          if (a === null || typeof a !== 'object') {{ if (a !== b) problems.push(path); return; }}
          if (Array.isArray(a)) {{
            if (b == null || b.length !== a.length) {{ problems.push(path + ' length'); return; }}
            for (let i = 0; i < a.length; i++) walk(a[i], b[i], path + '.' + i);
            return;
          }}
          for (const k of Object.keys(a)) walk(a[k], b[k], path + '.' + k);
          for (const k of Object.keys(b || {{}})) if (!(k in a)) problems.push(path + '.' + k + ' extra');
        }};
        walk(json, got, '');
        const head = got.layers[0].heads[2];
        const w = head.weights;
        // a float16 head's bit patterns, which widen to its weights; a head reads back the same rows every time
        const bits = halfRows(head, 'weights');
        const half = bits && {{rowType: bits[0].constructor.name,
                                widens: bits.every((row, q) => widenHalf(row).every((v, k) => v === w[q][k]))}};
        return {{problems, worst, count, rowType: w[0].constructor.name, rows: w.length, half,
                 same: head.weights === w && head.scores === head.scores, stats: halfRows(head, 'stats'),
                 eligible: typeof got.eligible[0][0], type: resp.headers.get('content-type')}};
        """
    )
    assert out["problems"] == [] and out["type"] == "application/vnd.attnlab.arrays"
    assert out["count"] > 2 * 3 * 6 * 6, out  # the matrices were compared, not skipped
    assert out["rowType"] == "Float32Array" and out["rows"] == 6 and out["eligible"] == "boolean"
    assert out["same"] and out["stats"] is None
    assert out["half"] == ({"rowType": "Uint16Array", "widens": True} if precision == "float16" else None)
    # float32: the same float32 numbers (JSON writes their shortest decimal); float16 keeps about 3 digits
    assert out["worst"] <= (1e-6 if precision == "float32" else 5e-3), out


def test_limit_hint_names_the_setting_of_the_limit_hit(js: Callable[[str], Any]) -> None:
    """Too many characters (413) is ATTNLAB_MAX_TEXT_CHARS; too many tokens (422) is ATTNLAB_MAX_TOKENS."""
    out = js(
        """
        const api = await mod('api.js');
        const hint = (status, field) => api.describeError(new api.ApiError(status, 'too_large', field, 'x')).hint;
        return {chars: hint(413, 'text'), token: hint(422, 'text'), item: hint(413, 'texts[2]'),
                tok: hint(413, 'tokens[0]'), src: hint(422, 'source.tokens'), include: hint(422, 'include')};
        """
    )
    assert "ATTNLAB_MAX_TEXT_CHARS" in out["chars"] and "ATTNLAB_MAX_TOKENS" not in out["chars"]
    assert "ATTNLAB_MAX_TOKENS" in out["token"] and "TEXT_CHARS" not in out["token"]
    assert "ATTNLAB_MAX_TEXT_CHARS" in out["item"] and "ATTNLAB_MAX_TEXT_CHARS" in out["tok"]
    assert "ATTNLAB_MAX_TOKENS" in out["src"] and "ATTNLAB_MAX_RESULT_VALUES" in out["include"]


def test_the_audit_lines_show_the_measured_axis_and_the_flags(js: Callable[[str], Any]) -> None:
    """The audit panel's lines from real audits: the softmax axis as measured (a ✗ under softmax over queries),
    repeated weight rows flagged, each head's scale where widths differ, and a verdict per text of a batch."""
    out = js(
        """
        const Au = await mod('audit.js');
        const audit = async (body) => (await (await fetch('/api/attention', {method: 'POST',
          headers: {'content-type': 'application/json'},
          body: JSON.stringify({...body, include: ['audit']})})).json()).audit;
        const lines = (a) => Object.fromEntries(Au.auditLines(a).map((l) => [l.key, l]));
        const rng = (n, m) =>
          Array.from({length: n}, (_, i) => Array.from({length: m}, (_, j) => Math.sin(7 * i + 3 * j + 1)));
        const unequal = await audit({x: rng(5, 6), weights: {w_q: rng(6, 6), w_k: rng(6, 6), w_v: rng(6, 6)}, heads: 2,
                                     head_widths: [2, 4]});
        const el = document.createElement('div');
        Au.renderAudit(el, {audit: await audit({model: 'random', text: 'a b a b c'}), status: 'done', model: 'random'});
        return {
          right: lines(await audit({model: 'random', text: 'a b a b c', masks: {causal: true}})),
          bug: lines(await audit({model: 'random', text: 'a b c d', masks: {causal: true},
                                  demo_bug: 'softmax_over_queries'})),
          repeats: lines(await audit({model: 'random', text: 'a b a b c'})),
          unequal: lines(unequal),
          batch: lines(await audit({model: 'random', texts: ['a b c', 'd'], masks: {causal: true}})),
          // 9 texts: text 0 costs 2 passes, each shorter one 4 (causal and padding), so the default 16 covers 0-3
          many: lines(await audit({model: 'random', masks: {causal: true}, texts: ['a b c d e f g h i j',
                                   ...'abcdefgh'.split('').map((c, i) => 'w '.repeat(i + 1) + c)]})),
          flagged: el.querySelector('li.flag')?.dataset.key ?? null,
        };
        """
    )
    right, bug = out["right"]["softmax_axis"], out["bug"]["softmax_axis"]
    assert right["ok"] is True and right["text"].startswith("softmax over keys, measured"), right
    assert bug["ok"] is False and bug["text"].startswith("softmax measured over queries, declared over keys"), bug
    assert "flag" not in out["right"]["repeated_rows"] and "no two queries" in out["right"]["repeated_rows"]["text"]
    repeats = out["repeats"]["repeated_rows"]
    assert repeats["flag"] is True and "queries 0 and 2" in repeats["text"], repeats
    assert out["flagged"] == "repeated_rows"
    assert "per head: × 0.7071, 0.5000" in out["unequal"]["scale"]["text"]
    assert "d_k per head 2, 4" in out["unequal"]["shape"]["text"]
    assert {"perturbation.0.causal", "perturbation.1.padding"} <= set(out["batch"]), list(out["batch"])
    assert out["batch"]["perturbation.1.padding"]["text"].startswith("text 1 padding: ")
    assert "perturbation_unchecked" not in out["batch"]  # every text of a small batch has its verdicts
    many = out["many"]
    assert {k.split(".")[1] for k in many if k.startswith("perturbation.")} == {"0", "1", "2", "3"}, list(many)
    left = many["perturbation_unchecked"]
    assert left["flag"] is True, left
    assert left["text"].startswith("verdicts for texts 0-3 of 9; texts 4-8 not checked"), left
    assert "ATTNLAB_MAX_AUDIT_RUNS" in left["text"] and "/api/perturb" in left["text"]
