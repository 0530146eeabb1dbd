"""Beyond the heatmap on the page, part two: hiding attention sinks on every map, attention rollout beside the
per-layer maps, and opening one cell of the activation-patching grid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import focus_z, open_workspace, wait_idle
from tests.helpers import script_body

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]
REPEAT = "red+ball+king+river+frog+red+ball+king"


def close(got: Any, want: Any, atol: float = 1e-6) -> bool:
    return bool(np.allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), atol=atol, rtol=0))


def plain_weights(page: Page, body: dict[str, Any], layer: int, head: int) -> list[list[float]]:
    """The head's weights as the model computed them: the page's body without sinks, asked for as JSON."""
    bare = {k: v for k, v in script_body(body).items() if k != "sinks"}
    api = page.request.post(page.url.split("?")[0] + "api/attention", data=bare).json()
    lay = next(la for la in api["layers"] if la["index"] == layer)
    return next(h for h in lay["heads"] if h["index"] == head)["weights"]  # type: ignore[no-any-return]


def check_hidden(drawn: list[list[float | None]], plain: list[list[float]], hidden: set[int], renorm: bool) -> None:
    """Hidden columns are 0; every other eligible cell is the model's weight over what the row kept (renorm)."""
    checked = 0
    for q, row in enumerate(drawn):
        left = 1 - sum(plain[q][k] for k in hidden)
        for k, v in enumerate(row):
            if v is None:
                continue
            if k in hidden:
                assert v == 0.0, (q, k, v)
            elif renorm and left > 1e-6:
                assert v == pytest.approx(plain[q][k] / left, rel=1e-4, abs=1e-6), (q, k)
                checked += 1
            elif not renorm:
                assert v == pytest.approx(plain[q][k], rel=1e-4, abs=1e-6), (q, k)
                checked += 1
    assert checked > 10


def test_hiding_the_first_token_zeroes_its_column_renormalises_rows_and_survives_a_reload(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}&layer=1&focus=1.2")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("sinks-select").select_option("first")
    body = resp.value.request.post_data_json
    assert body["sinks"] == {"hide": "first", "renormalise": True}
    wait_idle(page)
    assert "sinks=first" in page.url and "renorm" not in page.url
    check_hidden(focus_z(page), plain_weights(page, body, 1, 2), {0}, renorm=True)
    # each head's sink mass, from the server's stats, in its caption
    api = page.request.post(resp.value.url, data=script_body(body)).json()
    head0 = next(la for la in api["layers"] if la["index"] == 1)["heads"][0]
    expect(page.locator("#head-1-0")).to_have_attribute("data-hidden", "0")  # framed as hidden, not only 0
    card = page.locator("#head-1-0 .meta")
    expect(card).to_contain_text(f"sink {head0['stats']['sink_mass']:.2f}")
    expect(page.get_by_test_id("sinks-shown")).to_contain_text("Hiding key 0 “red”, each row renormalised")
    page.reload()
    wait_idle(page)
    expect(page.get_by_test_id("sinks-select")).to_have_value("first")
    check_hidden(focus_z(page), plain_weights(page, body, 1, 2), {0}, renorm=True)


def test_named_positions_without_renormalising_keep_the_other_weights_as_computed(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}&layer=1&focus=1.2")
    page.get_by_test_id("sinks-select").select_option("positions")
    box = page.get_by_test_id("sinks-positions")
    expect(box).to_be_focused()
    box.fill("3, 0")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")):
        box.press("Enter")
    wait_idle(page)
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("sinks-renorm").press("Space")  # the keyboard reaches it
    body = resp.value.request.post_data_json
    assert body["sinks"] == {"hide": [0, 3], "renormalise": False}
    wait_idle(page)
    assert "sinks=0%2C3" in page.url and "renorm=0" in page.url
    check_hidden(focus_z(page), plain_weights(page, body, 1, 2), {0, 3}, renorm=False)
    box.fill("two")
    box.press("Enter")
    expect(page.locator("#sinks-error")).to_contain_text("got “two”")


def test_a_choice_the_server_refuses_shows_its_reason_at_the_control(open_page: Callable[..., Page]) -> None:
    page = open_page("")
    with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
        page.get_by_test_id("sinks-select").select_option("special")
    assert resp.value.status == 422
    err = resp.value.json()["error"]
    assert err["field"] == "sinks.hide"
    expect(page.get_by_test_id("error-banner")).to_contain_text(err["message"])
    expect(page.get_by_test_id("sinks-select")).to_have_attribute("aria-invalid", "true")
    assert "sinks" not in page.url  # rolled back to the run on screen


def test_rollout_draws_the_servers_maps_and_keeps_its_options_in_the_link(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    open_workspace(page, "inside")
    with page.expect_response(
        lambda r: r.url.endswith("/api/attention") and "rollout" in (r.request.post_data or "")
    ) as resp:
        page.get_by_test_id("rollout-on").check()
    sent = resp.value.request.post_data_json
    assert sent["include"] == ["rollout"] and sent["rollout"] == {"heads": "mean", "residual": True}
    assert "layer" not in sent  # every layer's J
    grid = page.get_by_test_id("rollout-grid")
    expect(grid).to_have_attribute("data-drawn", "mean.1")
    maps = page.get_by_test_id("rollout-map")
    expect(maps).to_have_count(2)
    api = resp.value.json()
    drawn = page.evaluate("() => [...document.querySelectorAll('[data-testid=rollout-map]')].map((f) => f.drawn)")
    for layer, want in zip(api["layers"], drawn, strict=True):
        assert close(want, layer["rollout"])
        assert all(sum(row) == pytest.approx(1, abs=1e-5) for row in want)
    assert "rollout=mean.1" in page.url
    fuse = page.get_by_test_id("rollout-fuse")
    with page.expect_response(
        lambda r: r.url.endswith("/api/attention") and "rollout" in (r.request.post_data or "")
    ) as resp2:
        fuse.focus()
        fuse.select_option("max")
    assert resp2.value.request.post_data_json["rollout"] == {"heads": "max", "residual": True}
    expect(grid).to_have_attribute("data-drawn", "max.1")
    with page.expect_response(
        lambda r: r.url.endswith("/api/attention") and "rollout" in (r.request.post_data or "")
    ) as resp3:
        page.get_by_test_id("rollout-resid").uncheck()
    assert resp3.value.request.post_data_json["rollout"] == {"heads": "max", "residual": False}
    expect(grid).to_have_attribute("data-drawn", "max.0")
    assert "rollout=max.0" in page.url
    drawn = page.evaluate("() => document.querySelector('[data-testid=rollout-map]').drawn")
    assert close(drawn, resp3.value.json()["layers"][0]["rollout"])
    page.reload()
    wait_idle(page)
    expect(grid).to_have_attribute("data-drawn", "max.0")
    expect(page.get_by_test_id("rollout-fuse")).to_have_value("max")


def test_rollout_of_a_cross_attention_run_is_refused_with_the_servers_reason(open_page: Callable[..., Page]) -> None:
    page = open_page("?m=random&t=a+b+c&src=x+y+z+w")
    open_workspace(page, "inside")
    with page.expect_response(
        lambda r: r.url.endswith("/api/attention") and "rollout" in (r.request.post_data or "")
    ) as resp:
        page.get_by_test_id("rollout-on").check()
    assert resp.value.status == 422
    err = resp.value.json()["error"]
    assert err["field"] == "include"
    reason = page.get_by_test_id("rollout-reason")
    expect(reason).to_contain_text(err["message"][:60])
    expect(page.get_by_test_id("rollout-fuse")).to_be_disabled()
    expect(page.get_by_test_id("rollout-resid")).to_be_disabled()
    expect(page.get_by_test_id("rollout-map")).to_have_count(0)


def test_a_patch_cell_opens_by_keyboard_and_click_with_its_metric_and_three_maps(open_trained: Open) -> None:
    page = open_trained(f"?m=induction&t={REPEAT}")
    with page.expect_response("**/api/patch") as resp:
        page.goto(page.url + "&patch=2.pattern.moon")
    api = resp.value.json()
    grid = page.get_by_test_id("patch-grid")
    expect(grid).to_have_attribute("data-drawn", "1")
    grid.focus()
    grid.press("ArrowRight")  # from L0 H0 to L0 H1, then down to L1 H1
    grid.press("ArrowDown")
    expect(page.locator("#patch-cursor")).to_contain_text("L1 H1: recovered")
    with page.expect_response("**/api/patch/run") as run_resp, page.expect_response("**/api/compare") as cmp_resp:
        grid.press("Enter")
    sent = cmp_resp.value.request.post_data_json
    ran = run_resp.value.request.post_data_json
    assert ran["hook"] == "pattern" and ran["cell"] == {"layer": 1, "column": 1} and ran["corrupted"]["layer"] == 1
    assert sent["a"]["layer"] == 1 and sent["b"]["layer"] == 1 and sent["a"]["include"] == ["weights"]
    assert sent["a"]["tokens"][2] == "king" and sent["b"]["tokens"][2] == "moon"
    cell = page.get_by_test_id("patch-cell")
    expect(cell).to_have_attribute("data-cell", "1.1")
    assert float(cell.get_attribute("data-metric") or "nan") == api["metric_grid"][1][1]
    expect(page.locator("#patch-cell-numbers")).to_contain_text(f"metric {api['metric_grid'][1][1]:.4f}")
    expect(page.get_by_test_id("patch-map")).to_have_count(3)
    cmp = cmp_resp.value.json()
    drawn = page.evaluate("() => [...document.querySelectorAll('[data-testid=patch-map]')].map((f) => f.drawn)")
    assert close(drawn[0], cmp["a"]["layers"][0]["heads"][1]["weights"])
    assert close(drawn[1], cmp["b"]["layers"][0]["heads"][1]["weights"])
    assert close(drawn[2], run_resp.value.json()["layers"][0]["heads"][1]["weights"])
    assert close(drawn[2], drawn[0]) and not close(drawn[2], drawn[1])  # a pattern patch: the clean map
    expect(page.locator("#patch-cell-note")).to_contain_text("L1H1's map is the clean one")
    assert "patch=2.pattern.moon%401.1" in page.url or "patch=2.pattern.moon@1.1" in page.url
    expect(page.locator("#patch-cell-link")).to_have_attribute("href", "?" + page.url.split("?")[1])
    # a click on the grid opens the cell under the pointer: L0 H3 (rows are layers from the top, columns heads)
    box = page.locator("#patch-grid .nsewdrag").first.bounding_box()
    assert box is not None
    rows, cols = len(api["recovered"]), len(api["recovered"][0])
    with page.expect_response("**/api/compare"):
        page.mouse.click(box["x"] + box["width"] * (3.5 / cols), box["y"] + box["height"] * (0.5 / rows))
    expect(cell).to_have_attribute("data-cell", "0.3")
    page.reload()
    wait_idle(page)
    expect(page.get_by_test_id("patch-cell")).to_have_attribute("data-cell", "0.3")
