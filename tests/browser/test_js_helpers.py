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
