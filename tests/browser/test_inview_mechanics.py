"""The in-view walk of the Mechanics workspace: decoding step by step, generating, the cost of a shape, the scale
sweep and the audit record, at 1440x900 and on a 390x844 touch phone, each leave the element it changed in the
viewport (tests/browser/inview.py `walk`).

One page a size, on the trained `induction` model (it predicts tokens, so the page offers generating), walks the
table in turn.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.inview import Step, press, walk
from tests.browser.test_inview_panels import pressing

pytestmark = pytest.mark.browser


def gen_run(page: Page) -> None:
    page.locator("#gen-tokens").scroll_into_view_if_needed()
    page.locator("#gen-tokens").fill("3")
    press(page, "#gen-run")


COST_SHAPE = {"batch": "3", "heads": "8", "kv_heads": "2", "seq_len": "64", "d_model": "128", "layers": "3"}


def cost_shape(page: Page) -> None:
    """Another shape typed into the cost form, field by field (each one's change costs the shape so far), then
    another dtype chosen."""
    page.locator("#cost-batch").scroll_into_view_if_needed()
    for field, value in COST_SHAPE.items():
        page.locator(f"#cost-{field}").fill(value)
        page.locator(f"#cost-{field}").press("Enter")
    page.locator("#cost-dtype").select_option("bfloat16")


def sweep_variance(page: Page) -> None:
    """The variance typed into its box, then moved with its slider."""
    page.locator("#sweep-variance").scroll_into_view_if_needed()
    page.locator("#sweep-variance").fill("2")
    page.locator("#sweep-variance").press("Enter")
    page.locator("#sweep-variance-range").fill("3")


# Where each element of `selectors` sits on the screen the person sees (its box against the visual viewport), read
# every frame from now until window.stopTracking(), which answers the positions each one took, in turn.
TRACK_JS = """(selectors) => {
  const seen = Object.fromEntries(selectors.map((s) => [s, []]));
  let on = true;
  const frame = () => {
    for (const s of selectors) {
      const r = document.querySelector(s).getBoundingClientRect();
      const at = [r.left - visualViewport.offsetLeft, r.top - visualViewport.offsetTop, r.width, r.height]
        .map(Math.round).join(' ');
      if (seen[s].at(-1) !== at) seen[s].push(at);
    }
    if (on) requestAnimationFrame(frame);
  };
  frame();
  window.stopTracking = () => { on = false; frame(); return seen; };
}"""


def moves(page: Page) -> dict[str, list[str]]:
    """What TRACK_JS saw move since it started, read once a frame has been laid out after the answer: each element
    that took more than one position, with those positions."""
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return {s: at for s, at in page.evaluate("() => window.stopTracking()").items() if len(at) != 1}


def cost_measure(page: Page) -> None:
    """The shape measured here, "Measure here" in the middle of the screen: it, the lengths box and "Measure both
    here", which the person presses next, stay where they were while the answer comes in (neither the answer's
    lines nor the page brought to them move them)."""
    page.evaluate("() => document.getElementById('cost-measure').scrollIntoView({ block: 'center' })")
    page.evaluate(TRACK_JS, ["#cost-measure", "#cost-lengths", "#cost-lengths-measure"])
    press(page, "#cost-measure")
    page.wait_for_selector("[data-testid=cost-measured] .cost-measured-line")  # the answer, not its loading line
    moved = moves(page)
    assert moved == {}, f"moved as the measurement came in (x y width height): {moved}"


def cost_lengths(page: Page) -> None:
    """The lengths typed and measured: the box and its button, which the person presses next for other lengths, stay
    where they were while the answer comes in (its table under them, its points on the plot above them), and the
    page does not widen for the table."""
    page.locator("#cost-lengths").scroll_into_view_if_needed()
    page.locator("#cost-lengths").fill("8, 16")
    page.locator("#cost-lengths-measure").scroll_into_view_if_needed()
    bar = ["#cost-lengths", "#cost-lengths-measure"]
    page.evaluate(TRACK_JS, bar)
    press(page, "#cost-lengths-measure")
    # its table and its points on the plot drawn, and a frame laid out after them
    page.wait_for_selector("[data-testid=cost-lengths-out] table.cost-lengths-table")
    page.wait_for_function("() => document.getElementById('cost-plot').dataset.measuredLengths === '2'")
    moved = moves(page)
    assert moved == {}, f"moved as the measurement came in (x y width height): {moved}"
    wide = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert wide <= 0, f"the page scrolls {wide} px sideways with the lengths' table"


def patch_by_logit_diff(page: Page) -> None:
    """A token patched and scored by the logit difference at a position: a model that predicts tokens offers that
    score, so it is walked here, on the induction model, rather than in the Test walk on `random`."""
    page.locator("#patch-token").scroll_into_view_if_needed()
    page.locator("#patch-token").fill("moon")
    page.locator("#patch-metric").select_option("logit_diff")
    page.locator("#patch-ld-position").select_option(index=1)
    page.locator("#patch-ld-correct").fill("river")
    page.locator("#patch-ld-wrong").fill("frog")
    press(page, "#patch-run")


STEPS: list[Step] = [
    Step(
        "decoding step by step",
        "mechanics",
        pressing("#decode-run"),
        "[data-testid=decode-step]",
        ("decodeSet",),
        ("decode-run",),
    ),
    Step(
        "the next decoding step",
        "mechanics",
        pressing("#decode-next"),
        "[data-testid=decode-step]",
        ("decodeStepSet",),
        ("decode-next",),
    ),
    Step(
        "the decoding played",
        "mechanics",
        pressing("#decode-play"),
        "[data-testid=decode-step]",
        ("playSet",),
        ("decode-play",),
    ),
    Step("tokens generated", "mechanics", gen_run, "[data-testid=decode-step]", ("decodeGenSet",), ("gen-run",)),
    Step(
        "the sweep drawn",
        "mechanics",
        pressing("#sweep-draw"),
        "[data-testid=scale-sweep]",
        ("panelSet",),
        ("sweep-draw",),
    ),
    Step(
        "the audit exported",
        "mechanics",
        pressing("#audit-export"),
        "[data-testid=audit-summary]",
        ("panelAsked",),
        ("audit-export",),
    ),
    Step(
        "the sweep's variance set",
        "mechanics",
        sweep_variance,
        "[data-testid=scale-sweep]",
        ("panelSet",),
        ("sweep-variance", "sweep-variance-range"),
    ),
    Step(
        "a shape costed",
        "mechanics",
        cost_shape,
        "#cost-table",
        ("panelSet",),
        (*(f"cost-{field}" for field in COST_SHAPE), "cost-dtype"),
    ),
    Step(
        "the run's shape costed again",
        "mechanics",
        pressing("#cost-reset"),
        "#cost-table",
        ("panelSet",),
        ("cost-reset",),
    ),
    Step(
        "the cost measured here",
        "mechanics",
        cost_measure,
        "[data-testid=cost-measured]",
        ("panelAsked",),
        ("cost-measure",),
    ),
    Step(
        "dense against blockwise measured",
        "mechanics",
        cost_lengths,
        "[data-testid=cost-lengths-out]",
        ("panelAsked",),
        ("cost-lengths", "cost-lengths-measure"),
    ),
    Step(
        "a token patched, scored by the logit difference",
        "test",
        patch_by_logit_diff,
        "[data-testid=patch-grid][data-metric=logit_diff]",
        ("panelSet",),
        ("patch-metric", "patch-ld-position", "patch-ld-correct", "patch-ld-wrong"),
    ),
]


def test_every_mechanics_action_leaves_what_it_changed_in_view(
    sized: Callable[[str, str], Page], trained_server: str
) -> None:
    page = sized(trained_server, "?m=induction&ws=mechanics")
    walk(page, STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
