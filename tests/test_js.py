"""The page's pure JS helpers in node's own test runner (tests/js/*.test.mjs), and what they build sent to the API.

Helpers that draw into a page stay in Chromium (tests/browser/test_js_helpers.py)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.fixtures import make_app_client
from tests.pagejs import JS_TESTS, copy_page_modules, run_node_tests, run_page_js

JS_FILES = sorted(JS_TESTS.glob("*.test.mjs"))


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's modules, where node reads them as ES modules."""
    return copy_page_modules(tmp_path_factory.mktemp("page") / "js")


@pytest.mark.parametrize("path", JS_FILES, ids=[p.name for p in JS_FILES])
def test_page_helpers_pass_in_node(path: Path, modules: Path) -> None:
    proc = run_node_tests(path, modules)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-12_000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail) (\d+)$", proc.stdout, re.M)}
    declared = len(re.findall(r"^test\(", path.read_text(encoding="utf-8"), re.M))
    assert counts == {"tests": declared, "pass": declared, "fail": 0}, out[-12_000:]


def test_node_reports_a_failing_helper_test(tmp_path: Path, modules: Path) -> None:
    """The negative control: a file whose assertion fails makes the run fail, with node's message."""
    bad = tmp_path / "bad.test.mjs"
    lib = (JS_TESTS / "lib.mjs").as_uri()
    bad.write_text(
        "import { test } from 'node:test';\n"
        f"import {{ eq, mod }} from '{lib}';\n"
        "test('a blocked cell toggles off', async () => {\n"
        "  const M = await mod('masks.js');\n"
        "  eq(M.toggleBlocked([[2, 1]], 2, 1), [[2, 1]]);\n"
        "});\n",
        encoding="utf-8",
    )
    proc = run_node_tests(bad, modules)
    assert proc.returncode != 0
    assert "not ok 1 - a blocked cell toggles off" in proc.stdout and "# fail 1" in proc.stdout


@pytest.fixture(scope="module")
def api() -> Iterator[TestClient]:
    """The fast models in-process, under the limits the page is tested against."""
    with make_app_client(models="textbook,random,custom", max_tokens=256, max_result_values=4_000_000) as client:
        yield client


def test_build_request_is_accepted_by_the_api(api: TestClient, modules: Path) -> None:
    """The body the page builds (its shape: tests/js/helpers.test.mjs) is one the API computes."""
    req = run_page_js(
        modules,
        """
        const S = { ...(await mod('state.js')), ...(await mod('requests.js')) };
        const s = S.defaultState();
        Object.assign(s, {model: 'random', text: 'w x y z', options: {d_model: 16, heads: 2, kv_heads: null, seed: 1}});
        s.masks = {causal: true, window: null, padded: [1, 9], blocked: [[3, 0], [8, 8]]};
        return S.buildRequest(s, {layers: 1, heads: 4, d_model: 64}, 4);
        """,
    )
    assert req["masks"] == {"causal": True, "padded": [1], "window": None, "blocked": [[3, 0]]}
    resp = api.post("/api/attention", json=req)
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
def test_cell_reasons_are_read_from_the_servers_reasons(api: TestClient, modules: Path, masks: dict[str, Any]) -> None:
    # the page holds no mask semantics: the reasons it shows for each cell are the result's own grids
    req = run_page_js(modules, "const M = await mod('masks.js'); return M.masksRequest(data, 6);", masks)
    resp = api.post(
        "/api/attention",
        json={"model": "random", "text": "a b c d e f", "masks": req, "all_masked": "zero", "include": ["eligibility"]},
    )
    assert resp.status_code == 200, resp.text
    result = resp.json()
    given = {"reasons": result["reasons"], "eligible": result["eligible"]}
    shown = run_page_js(
        modules,
        """const M = await mod('masks.js'); const r = data;
        return r.eligible.map((row, q) => row.map((_, k) => M.cellReasons(r, q, k)));""",
        given,
    )
    grids = result["reasons"]
    for q in range(6):
        for k in range(6):
            want = [n for n in ("causal", "window", "padding", "blocked") if n in grids and grids[n][q][k]]
            assert shown[q][k] == want, (q, k)
            assert (shown[q][k] == []) == result["eligible"][q][k]


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_arrays_reader_gives_the_json_numbers(api: TestClient, modules: Path, precision: str) -> None:
    """static/js/arrays.js reads what the server writes (stacked heads, float16 widened) into the JSON's numbers."""
    req = {
        "model": "random",
        "text": "one two three two one four",
        "options": {"heads": 3, "kv_heads": 1, "d_model": 12},
        "masks": {"causal": True, "padded": [4]},
        "include": ["scores", "weights", "qkv", "contexts", "output", "stats"],
        "precision": precision,
    }
    as_json = api.post("/api/attention", json=req, headers={"accept": "application/json"})
    as_arrays = api.post("/api/attention", json=req, headers={"accept": "application/vnd.attnlab.arrays"})
    assert as_json.status_code == as_arrays.status_code == 200, (as_json.text[:500], as_arrays.text[:500])
    assert as_arrays.headers["content-type"] == "application/vnd.attnlab.arrays"
    data = {"json": json.loads(as_json.text), "arrays": base64.b64encode(as_arrays.content).decode()}
    out = run_page_js(
        modules,
        """
        const { readArrays, halfRows, widenHalf } = await mod('arrays.js');
        const bytes = Buffer.from(data.arrays, 'base64');
        const json = data.json;
        const got = readArrays(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
        // every number of the JSON against the reader's, by path; typed rows read like arrays
        let worst = 0, count = 0;
        const problems = [];
        const walk = (a, b, path) => {
          if (typeof a === 'number') {
            if (typeof b !== 'number') problems.push(path + ': ' + typeof b);
            else { worst = Math.max(worst, Math.abs(a - b) / Math.max(1, Math.abs(a))); count++; }
            return;
          }
          if (a === null || typeof a !== 'object') { if (a !== b) problems.push(path); return; }
          if (Array.isArray(a)) {
            if (b == null || b.length !== a.length) { problems.push(path + ' length'); return; }
            for (let i = 0; i < a.length; i++) walk(a[i], b[i], path + '.' + i);
            return;
          }
          for (const k of Object.keys(a)) walk(a[k], b[k], path + '.' + k);
          for (const k of Object.keys(b || {})) if (!(k in a)) problems.push(path + '.' + k + ' extra');
        };
        walk(json, got, '');
        const head = got.layers[0].heads[2];
        const w = head.weights;
        // a float16 head's bit patterns, which widen to its weights; a head reads back the same rows every time
        const bits = halfRows(head, 'weights');
        const half = bits && {rowType: bits[0].constructor.name,
                              widens: bits.every((row, q) => widenHalf(row).every((v, k) => v === w[q][k]))};
        return {problems, worst, count, rowType: w[0].constructor.name, rows: w.length, half,
                same: head.weights === w && head.scores === head.scores, stats: halfRows(head, 'stats'),
                eligible: typeof got.eligible[0][0]};
        """,
        data,
    )
    assert out["problems"] == []
    assert out["count"] > 2 * 3 * 6 * 6, out  # the matrices were compared, not skipped
    assert out["rowType"] == "Float32Array" and out["rows"] == 6 and out["eligible"] == "boolean"
    assert out["same"] and out["stats"] is None
    assert out["half"] == ({"rowType": "Uint16Array", "widens": True} if precision == "float16" else None)
    # float32: the same float32 numbers (JSON writes their shortest decimal); float16 keeps about 3 digits
    assert out["worst"] <= (1e-6 if precision == "float32" else 5e-3), out
