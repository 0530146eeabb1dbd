"""The page's helpers that draw into a page, imported as ES modules in the real browser and called directly.

The pure helpers run in node's own test runner (tests/js/, run by tests/test_js.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.browser


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
