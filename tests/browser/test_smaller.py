"""The page's smaller defects at length and on touch (issue 20, item 9), each against a real `attnlab serve` in
Chromium at the sizes that matter: the open head kept through a layer switch and brought into view from the
head-types table, the retrieval diagram opening on a real query, each layer's own protected positions hatched,
one map for an ablated head, chance beside the losses, no "best" head of a kind no head has, what each peak memory
measures, and analyses asked during a run using the settings on screen."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, Route, ViewportSize, expect

from tests.browser.conftest import open_workspace, wait_idle
from tests.browser.inview import focus_covered

pytestmark = pytest.mark.browser

Open = Callable[[str], Page]
MINILM = "?m=minilm&t=The+cat+sat+on+the+mat"


@pytest.fixture
def phone(phone_at: Callable[[str, str], Page], trained_server: str) -> Callable[[str], Page]:
    """A 390 px touch screen (a phone) on the server with the trained models."""
    return lambda query: phone_at(trained_server, query)


def large_head_title(page: Page) -> str:
    return page.locator("#focus-title").inner_text()


# ---- a. "all layers" keeps the open head -----------------------------------------------------------------------


def test_switching_to_all_layers_keeps_the_open_head(open_trained: Open) -> None:
    page = open_trained(f"{MINILM}&layer=2&focus=2.5")
    assert large_head_title(page).startswith("Layer 2 · head 5")
    page.get_by_test_id("layer-select").select_option("all")
    wait_idle(page)
    expect(page.locator("#focus-title")).to_contain_text("Layer 2 · head 5")
    expect(page.locator("#retrieval-title")).to_contain_text("L2 head 5")
    assert "focus=2.5" in page.url
    # and back to that head's own layer: still open; to another layer: that layer's first head
    page.get_by_test_id("layer-select").select_option("2")
    wait_idle(page)
    expect(page.locator("#focus-title")).to_contain_text("Layer 2 · head 5")
    page.get_by_test_id("layer-select").select_option("4")
    wait_idle(page)
    expect(page.locator("#focus-title")).to_contain_text("Layer 4 · head 0")


# ---- b. a head opened from the head-types table is brought into view --------------------------------------------

IN_VIEW = """() => {
  const r = document.querySelector('section[data-view=focus]').getBoundingClientRect();
  return r.height > 0 && r.top >= -1 && r.top < innerHeight / 2;
}"""


def _open_from_table(page: Page, press: Callable[[Any], None]) -> None:
    open_workspace(page, "inside")  # the head-types table; the large head is in Explore
    row = page.locator("[data-testid=head-type-row][data-layer='3'][data-head='7'] button.ht-open")
    row.scroll_into_view_if_needed()
    assert page.evaluate(IN_VIEW) is False  # the large head is out of view while the table is read
    press(row)
    expect(page.locator("#focus-title")).to_contain_text("Layer 3 · head 7")
    page.wait_for_function(IN_VIEW, timeout=5_000)


def test_a_head_opened_from_the_head_types_table_is_scrolled_into_view(open_trained: Open) -> None:
    page = open_trained(MINILM)
    open_workspace(page, "inside")
    page.wait_for_selector("[data-testid=head-type-row]")
    _open_from_table(page, lambda b: b.click())
    assert "ws=" not in page.url  # Explore, where the large head is
    # from the keyboard too: Back returns to the table, and the focus goes on to the large head it opens
    page.go_back()
    page.wait_for_function("() => !document.querySelector('[data-workspace=inside]').hidden")
    page.evaluate("scrollTo(0, document.body.scrollHeight)")
    row = page.locator("[data-testid=head-type-row][data-layer='3'][data-head='7'] button.ht-open")
    row.focus()
    page.locator("[data-testid=head-type-row][data-layer='1'][data-head='2'] button.ht-open").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#focus-title")).to_contain_text("Layer 1 · head 2")
    page.wait_for_function(IN_VIEW, timeout=5_000)
    assert page.evaluate("document.activeElement.id") == "focus-plot"


def test_a_head_tapped_in_the_head_types_table_on_a_phone_is_scrolled_into_view(phone: Callable[[str], Page]) -> None:
    page = phone(MINILM)
    open_workspace(page, "inside")
    page.wait_for_selector("[data-testid=head-type-row]")
    _open_from_table(page, lambda b: b.tap())


def test_going_back_up_the_head_types_table_never_hides_a_row_under_its_head(open_trained: Open) -> None:
    """The table scrolls under a sticky head: Shift+Tab from its last row up, each row's button is scrolled to
    below the head, not under it."""
    page = open_trained(MINILM)
    open_workspace(page, "inside")
    page.wait_for_selector("[data-testid=head-type-row]")
    page.locator(".ht-scroll tbody button").last.focus()
    inside = "() => !!document.activeElement.closest('.ht-scroll tbody')"
    seen, hidden = 0, []
    while page.evaluate(inside):
        seen += 1
        assert seen < 400, "Shift+Tab never left the table"
        if (what := focus_covered(page)) is not None:
            hidden.append(what)
        page.keyboard.press("Shift+Tab")
    assert seen >= 72, f"{seen} rows' controls for minilm's 72 heads"
    assert hidden == [], hidden


# ---- c. the retrieval diagram opens on a real query ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("?m=textbook", "query 3 “x4”"),  # x5 is padding by default: its row is all masked
        (MINILM, "query 6 “mat”"),  # not [SEP]
        ("?m=induction&t=red+ball+king+river", "query 3 “river”"),  # a decoder: the last token
    ],
)
def test_the_retrieval_diagram_opens_on_the_last_real_query(open_trained: Open, query: str, want: str) -> None:
    page = open_trained(query)
    expect(page.locator("#retrieval-title")).to_contain_text(want)
    q = int(want.split()[1])
    assert page.get_by_test_id("retrieval-diagram").get_attribute("data-query") == str(q)
    # its row has eligible keys: lines, not only struck-through boxes
    assert page.locator("#retrieval path.rd-line:not(.rd-blocked)").count() > 0
    # the arrow keys move on from there
    page.get_by_test_id("retrieval-diagram").focus()
    page.keyboard.press("ArrowUp")
    expect(page.get_by_test_id("retrieval-diagram")).to_have_attribute("data-query", str(q - 1))


# ---- g. no "best" head of a kind no head has ------------------------------------------------------------------------


def test_no_best_induction_head_is_offered_on_an_encoder_without_one(open_trained: Open) -> None:
    page = open_trained(MINILM)
    open_workspace(page, "inside")
    best = page.locator("#headtypes-best [data-best=induction]")
    expect(best).to_contain_text("none ≥ 0.4")
    expect(best).to_be_disabled()
    assert "L0 H10" not in best.inner_text()
    # a kind a head does have is still offered
    prev = page.locator("#headtypes-best [data-best=previous_token]")
    expect(prev).to_be_enabled()
    expect(prev).to_contain_text("1.000")


def test_the_induction_models_induction_head_is_offered(open_trained: Open) -> None:
    page = open_trained("?m=induction")
    open_workspace(page, "inside")
    best = page.locator("#headtypes-best [data-best=induction]")
    expect(best).to_be_enabled()
    expect(best).to_contain_text("L1 H")


# ---- d. each layer's own protected positions hatched --------------------------------------------------------------

WORDS = "red+ball+king+river+frog+clock+seed+moon+tree+door+car+road"
HATCHED = """svgs => svgs.map(svg => ({
  layer: svg.dataset.layer,
  hatched: [...svg.querySelectorAll('rect.bar.protected')].map(r => +r.dataset.position),
}))"""


@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, {"width": 800, "height": 900}])
def test_the_window_claim_hatches_each_layers_own_protected_positions(
    open_trained: Open, page: Page, viewport: ViewportSize
) -> None:
    page.set_viewport_size(viewport)
    # the induction model's two layers, a window of 2 without causal masking, position 5 changed: the change may
    # travel one position a layer, so layer 0 protects |q - 5| > 1 and layer 1 (and the final logits) |q - 5| > 2
    page = open_trained(f"?m=induction&t={WORDS}&causal=0&window=2&pert=5,direction,1")
    expect(page.get_by_test_id("perturb-verdict")).to_have_attribute("data-holds", "true")
    rows = page.locator("[data-testid=perturb-chart]").evaluate_all(HATCHED)
    S = 12
    want0 = [q for q in range(S) if abs(q - 5) > 1]
    want1 = [q for q in range(S) if abs(q - 5) > 2]
    assert rows == [
        {"layer": "0", "hatched": want0},
        {"layer": "1", "hatched": want1},
        {"layer": "final", "hatched": want1},
    ]
    # what a person sees: the hatched band behind positions 3 and 7 in layer 0 only
    bands = page.locator("[data-testid=perturb-chart]").evaluate_all(
        "svgs => svgs.map(svg => svg.querySelectorAll('rect.dc-protected').length)"
    )
    assert bands == [len(want0), len(want1), len(want1)]
    expect(page.locator("#claims-panel .dc-legend")).to_contain_text("after that layer")
    expect(page.locator("#claims-panel .dc-what")).to_have_text(
        "Changed: position 5 “clock” moved along a random direction of length 1."
    )


# ---- e. an ablated head drawn once; f. chance beside the losses ----------------------------------------------------

ABLATE_L1 = "?m=induction&abl=1.0.zero,1.1.zero,1.2.zero,1.3.zero"


@pytest.mark.parametrize(("width", "most"), [(1440, 260), (800, 260), (390, 460)])
def test_an_ablated_heads_identical_before_and_after_is_drawn_once(
    open_trained: Open, page: Page, width: int, most: int
) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page = open_trained(ABLATE_L1)
    result = page.get_by_test_id("intervention-result")
    expect(result.locator(".iv-pair.affected")).to_have_count(4)
    for pair in result.locator(".iv-pair.affected").all():
        assert pair.locator("canvas").count() == 1
        assert float(pair.get_attribute("data-max-abs") or "nan") == 0.0
    expect(result.locator(".iv-same-note")).to_contain_text(
        "identical before and after: each head's own weights are not changed by ablating it"
    )
    # the four maps were 428 px high at 1440 and 868 px at 800 and 390 (two each, a pair a row)
    height = result.locator(".iv-heads").bounding_box()
    assert height is not None and height["height"] < most, height


def test_an_edited_head_is_still_drawn_before_and_after(open_trained: Open) -> None:
    page = open_trained("?m=induction&abl=1.0.zero&edit=1.2.20.9@0.5")
    result = page.get_by_test_id("intervention-result")
    expect(result.locator(".iv-pair.affected")).to_have_count(2)
    expect(result.locator(".iv-pair.affected[data-head='2'] canvas")).to_have_count(2)
    expect(result.locator(".iv-pair.affected[data-head='0'] canvas")).to_have_count(1)
    expect(result.locator(".iv-same-note")).to_contain_text("L1 H0: drawn once, identical before and after")


def test_the_ablation_result_says_what_chance_is(open_trained: Open) -> None:
    page = open_trained(ABLATE_L1)
    result = page.get_by_test_id("intervention-result")
    chance = result.locator(".iv-chance")
    expect(chance).to_contain_text("a uniform guess over the 128-token vocabulary, is ln 128 = 4.852 nats")
    assert float(chance.get_attribute("data-chance") or "nan") == pytest.approx(math.log(128))
    after = float(result.get_attribute("data-loss-after") or "nan")
    expect(chance).to_contain_text(f"after {after - math.log(128):.3f} above chance")


# ---- h. what each peak memory measures ------------------------------------------------------------------------------


def test_the_cost_panel_and_the_audit_say_what_their_peak_memory_covers(open_trained: Open, page: Page) -> None:
    page = open_trained("?m=induction")
    open_workspace(page, "mechanics")
    with page.expect_response("**/api/cost") as measured:
        page.locator("#cost-measure").click()
    assert measured.value.request.post_data_json["measure"] is True
    cost = page.locator("#cost-measured")
    expect(cost.locator(".cost-scope")).to_contain_text("one attention layer alone")
    expect(cost.locator(".cost-scope")).to_contain_text("The audit's peak memory is the whole model's forward pass")
    with page.expect_download():
        page.locator("#audit-export").click()
    audit = page.locator("#audit-summary")
    scope = audit.locator("li[data-key=peak_scope]")
    expect(scope).to_contain_text("whole forward pass of this run: all 2 layers")
    expect(scope).to_contain_text("one attention layer alone")
    # the two figures differ, and both are on the page beside their lines
    one_layer = int(cost.get_attribute("data-peak-bytes") or "0")
    whole = int(audit.get_attribute("data-peak-bytes") or "0")
    assert 0 < one_layer < whole


# ---- i. an analysis asked while a run is in flight uses the settings on screen ---------------------------------------

RANDOM = "?m=random&t=the+cat+sat+on+the+mat"


def test_a_perturbation_asked_right_after_a_change_uses_the_new_settings(
    open_page: Callable[..., Page], page: Page
) -> None:
    page = open_page(f"{RANDOM}&causal=1&pert=q,direction,1")
    expect(page.get_by_test_id("perturb-verdict")).to_have_attribute("data-checks", "causal")
    sent: list[dict[str, Any]] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/api/perturb") else None)
    # causal off, and Perturb pressed in the same moment: before the run for the new masks has even started
    with page.expect_response(
        lambda r: r.url.endswith("/api/perturb") and r.request.post_data_json["masks"].get("causal") is False
    ):
        page.evaluate(
            "() => { document.querySelector('[data-testid=mask-causal]').click();"
            " document.querySelector('[data-testid=perturb-run]').click(); }"
        )
    wait_idle(page)
    expect(page.get_by_test_id("perturb-verdict")).to_have_attribute("data-checks", "")
    assert sent and all(b["masks"].get("causal") is False for b in sent), [b["masks"] for b in sent]


def test_an_audit_and_a_measurement_asked_during_a_run_are_of_that_run(
    open_page: Callable[..., Page], page: Page
) -> None:
    page = open_page(RANDOM)
    open_workspace(page, "mechanics")
    held: list[Route] = []

    def hold_the_run(route: Route) -> None:
        body = route.request.post_data_json or {}
        if not held and "audit" not in (body.get("include") or []):
            held.append(route)  # the run for the new text waits here until the analyses are asked
        else:
            route.continue_()

    page.route("**/api/attention", hold_the_run)
    page.get_by_test_id("sequence-input").fill("one two three four five six seven eight")
    page.get_by_test_id("run-button").click()
    page.wait_for_function("() => document.getElementById('views').getAttribute('aria-busy') === 'true'")
    assert len(held) == 1
    page.locator("#cost-measure").click()
    page.locator("#audit-export").click()
    with (
        page.expect_download() as dl,
        page.expect_request(lambda r: r.url.endswith("/api/cost") and r.post_data_json["measure"] is True) as cost,
    ):
        held[0].continue_()
    wait_idle(page)
    assert cost.value.post_data_json["seq_len"] == 8  # the new text's length, not the last run's 6
    with open(dl.value.path()) as f:
        audit = json.load(f)
    assert audit["seq_len"] == 8
    expect(page.locator("#audit-summary li[data-key=shape]")).to_contain_text("8 of 8 positions real")
    expect(page.locator("#cost-measured")).to_contain_text("over 8 tokens")
