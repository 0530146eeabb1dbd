"""The in-view walk of the Vision and Train workspaces, which keep state of their own (no store actions): each
control a person operates changes what its answer shows (the step checks that itself), and that answer ends in the
viewport, at 1440x900 and on a 390x844 touch phone (tests/browser/inview.py `walk`).

One page a size, on the server that holds the `digits` image model, walks Vision and then Train: a run of a few
steps of the smallest shape from the knobs.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import Page

from tests.browser.inview import Step, press, walk

pytestmark = pytest.mark.browser

IMAGE = "[data-testid=vision-image]"
COL_A = "[data-testid=train-col-a]"
COL_B = "[data-testid=train-col-b]"
PATCHING = "[data-testid=vision-patching]"

# What the Vision workspace shows: its image's picture, the patch, layer, head and map chosen, the readout, the
# masks' line and the patching thumbnails.
VISION_JS = """() => {
  const img = document.querySelector('[data-testid=vision-image]');
  const pic = img.querySelector('image');
  return JSON.stringify([pic && (pic.getAttribute('href') || '').slice(0, 80), img.dataset.query, img.dataset.layer,
    img.dataset.head, document.querySelector('[data-testid=vision-map]').value,
    document.querySelector('[data-testid=vision-readout]').textContent,
    document.querySelector('[data-testid=vision-masked]').textContent,
    document.querySelectorAll('[data-testid=vision-patching] figure').length]);
}"""

# What the Train workspace shows: each column's run, snapshots and step, and the kept runs.
TRAIN_JS = """() => {
  const [a, b] = ['a', 'b'].map((side) => document.querySelector(`[data-testid=train-col-${side}]`).dataset);
  return JSON.stringify([a.run, a.status, a.snapshots, a.step, b.run, b.step,
    document.querySelector('[data-testid=train-runs]').textContent]);
}"""


# What the patching shows: its line, its view's text (a head table's shares) and pictures.
PATCH_JS = """() => JSON.stringify([document.querySelector('[data-testid=vision-patch-line]').textContent,
  document.querySelector('[data-testid=vision-patching]').textContent,
  document.querySelectorAll('[data-testid=vision-patching] figure').length])"""


def changing(probe: str, act: Callable[[Page], None]) -> Callable[[Page], None]:
    """`act`, then a wait until what `probe` reads of the workspace differs from before it: the act changed it."""

    def step(page: Page) -> None:
        page.wait_for_function(
            "() => !document.querySelector('[data-testid=vision-status]')?.textContent.includes('…')"
        )
        before = page.evaluate(probe)
        act(page)
        page.wait_for_function(f"(b) => ({probe})() !== b", arg=before, timeout=20_000)

    return step


def vision(act: Callable[[Page], None]) -> Callable[[Page], None]:
    return changing(VISION_JS, act)


def pick(selector: str, value: str) -> Callable[[Page], None]:
    def act(page: Page) -> None:
        page.locator(selector).scroll_into_view_if_needed()
        page.locator(selector).select_option(value)

    return act


def typed(selector: str, value: str, then: str | None = None) -> Callable[[Page], None]:
    """`value` typed into `selector`, then `then` pressed (or Enter, which commits the field)."""

    def act(page: Page) -> None:
        box = page.locator(selector)
        box.scroll_into_view_if_needed()
        box.fill(value)
        if then:
            press(page, then)
        else:
            box.press("Enter")

    return act


def png() -> bytes:
    out = io.BytesIO()
    Image.fromarray((np.indices((8, 8)).sum(axis=0) * 16).astype(np.uint8)).save(out, "PNG")
    return out.getvalue()


def upload(page: Page) -> None:
    page.locator("[data-testid=vision-file]").set_input_files(
        files=[{"name": "diagonal.png", "mimeType": "image/png", "buffer": png()}]
    )


def inverted_png() -> bytes:
    """Another image of one's own: the diagonal's shades turned over."""
    out = io.BytesIO()
    Image.fromarray((255 - np.indices((8, 8)).sum(axis=0) * 16).astype(np.uint8)).save(out, "PNG")
    return out.getvalue()


def patched(choose: Callable[[Page], None]) -> Callable[[Page], None]:
    """The other image (or the hook) chosen by `choose`, then Patch pressed: the patching's line and view change."""

    def act(page: Page) -> None:
        choose(page)
        press(page, "#vision-patch")

    return changing(PATCH_JS, act)


def other_file(page: Page) -> None:
    page.locator("#vision-other-file").set_input_files(
        files=[{"name": "turned.png", "mimeType": "image/png", "buffer": inverted_png()}]
    )
    page.wait_for_function("() => document.querySelector('#vision-other-file').dataset.read === 'turned.png'")


def cursor_enter(page: Page) -> None:
    page.locator(IMAGE).focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")


def start_run(page: Page, into: str, heads: int, width: int, steps: int, snapshot_every: int) -> None:
    """A run of one layer over 8 positions, trained from the knobs into column `into` ("a" or "b")."""
    knobs = {"layers": 1, "heads": heads, "width": width, "positions": 8, "batch": 2, "warmup": 0}
    for name, value in {**knobs, "steps": steps, "snapshot_every": snapshot_every}.items():
        page.locator(f"#train-{name}").fill(str(value))
    page.locator("#train-into").select_option(into)
    press(page, "[data-testid=train-start]")


def train_run(page: Page) -> None:
    start_run(page, "a", heads=1, width=16, steps=20, snapshot_every=10)
    page.wait_for_function(
        "(s) => ['finished', 'failed', 'cancelled'].includes(document.querySelector(s).dataset.status)",
        arg=COL_A,
        timeout=60_000,
    )
    col = page.locator(COL_A)
    assert col.get_attribute("data-status") == "finished", page.locator("[data-testid=train-status]").inner_text()


def scrub(side: str) -> Callable[[Page], None]:
    """Column `side`'s scrubber to its first snapshot."""

    def act(page: Page) -> None:
        page.locator(f"[data-testid=train-scrub-{side}]").scroll_into_view_if_needed()
        page.locator(f"[data-testid=train-scrub-{side}]").fill("0")

    return act


def refresh(page: Page) -> None:
    """The kept runs asked again: the list drawn anew from the server's, the run trained first in it."""
    old = page.locator("[data-testid=train-runs] li").first.element_handle()
    press(page, "#train-refresh")
    page.wait_for_function("(li) => !li.isConnected", arg=old)
    page.wait_for_selector("[data-testid=train-runs] li")


def show_in_b(page: Page) -> None:
    """The first kept run shown in column B, read to its end: its heads are drawn at its first snapshot, and the
    others follow on the run's events. The next step scrubs back to the first, which it could not see change if
    column B were still at that snapshot, the others still on their way. A kept run's events tell its status
    ("finished") before its snapshots, so the column has read them all once it holds as many as its row counts."""
    row = page.locator("[data-testid=train-runs] li").first
    counted = re.search(r"(\d+) snapshots", row.inner_text())
    assert counted, row.inner_text()
    kept = int(counted.group(1))
    assert kept >= 2, f"the kept run has {kept} snapshots: too few to scrub back to its first"
    press(page, "[data-testid=train-runs] li >> text=Show in B")
    page.wait_for_function(
        "([s, n]) => { const d = document.querySelector(s).dataset;"
        " return ['finished', 'failed', 'cancelled'].includes(d.status) && Number(d.snapshots) === n; }",
        arg=[COL_B, kept],
    )


def train(act: Callable[[Page], None]) -> Callable[[Page], None]:
    return changing(TRAIN_JS, act)


def wide_run(page: Page) -> None:
    """A long run of 26 heads (more than a page of 24) into column B, followed until its first snapshot's heads."""
    start_run(page, "b", heads=26, width=26, steps=20000, snapshot_every=100)
    page.wait_for_function(
        "(s) => document.querySelector(s).dataset.status === 'running' && "
        "!document.querySelector(`${s} [data-role=pager]`).hidden",
        arg=COL_B,
        timeout=30_000,
    )


def turned(role: str) -> Callable[[Page], None]:
    """Column B's pager turned by its `role` button: the page's label says other heads."""

    def act(page: Page) -> None:
        label = f"{COL_B} [data-role=page-label]"
        before = page.locator(label).inner_text()
        press(page, f"{COL_B} [data-role={role}]")
        page.wait_for_function("([s, b]) => document.querySelector(s).textContent !== b", arg=[label, before])

    return act


def cancel(page: Page) -> None:
    press(page, "[data-testid=train-cancel-b]")
    page.wait_for_function("(s) => document.querySelector(s).dataset.status === 'cancelled'", arg=COL_B)


STEPS: list[Step] = [
    # Vision: an image chosen (a digit, a photo, a file of one's own), a patch chosen (pressed, or by the keys),
    # what is shown of it, masks and an ablation, and patching from a second image
    Step(
        "a digit shown",
        "vision",
        vision(typed("#vision-digit", "3", "#vision-digit-go")),
        IMAGE,
        controls=("vision-digit", "vision-digit-go"),
    ),
    Step(
        "a photo shown",
        "vision",
        vision(lambda p: press(p, "#vision-photos [data-photo]")),
        IMAGE,
        controls=("vision-photos",),
    ),
    Step("an image of one's own", "vision", vision(upload), IMAGE, controls=("vision-file",)),
    Step("a patch pressed", "vision", vision(lambda p: press(p, f"{IMAGE} [data-token='6']")), IMAGE),
    Step("a patch chosen by the keys", "vision", vision(cursor_enter), IMAGE, controls=("vision-image",)),
    Step("a head chosen", "vision", vision(pick("#vision-head", "1")), IMAGE, controls=("vision-head",)),
    Step("the [CLS]'s attention shown", "vision", vision(pick("#vision-map", "cls")), IMAGE, controls=("vision-map",)),
    Step("the patch's attention again", "vision", vision(pick("#vision-map", "patch")), IMAGE),
    Step("a layer chosen", "vision", vision(pick("#vision-layer", "0")), IMAGE, controls=("vision-layer",)),
    Step(
        "a head's thumbnail pressed",
        "vision",
        vision(lambda p: press(p, "[data-testid=vision-heads] [data-head='2']")),
        IMAGE,
        controls=("vision-heads",),
    ),
    Step(
        "the patch blocked as a key",
        "vision",
        vision(lambda p: press(p, "#vision-block")),
        IMAGE,
        controls=("vision-block",),
    ),
    Step("a 2-D window", "vision", vision(typed("#vision-radius", "1")), IMAGE, controls=("vision-radius",)),
    Step(
        "the head ablated", "vision", vision(lambda p: press(p, "#vision-ablate")), IMAGE, controls=("vision-ablate",)
    ),
    # the one image model chosen again: its masks and ablation, which named its tokens and heads, are cleared
    Step("the model chosen", "vision", vision(pick("#vision-model", "digits")), IMAGE, controls=("vision-model",)),
    Step("a 2-D window again", "vision", vision(typed("#vision-radius", "1")), IMAGE),
    Step("the masks cleared", "vision", vision(lambda p: press(p, "#vision-clear")), IMAGE, controls=("vision-clear",)),
    Step(
        "patched from a second image",
        "vision",
        vision(typed("#vision-corrupt", "8", "#vision-patch")),
        PATCHING,
        controls=("vision-corrupt", "vision-patch"),
    ),
    Step(
        "patched from a photograph",
        "vision",
        patched(lambda p: p.locator("#vision-other").select_option(index=1)),
        PATCHING,
        controls=("vision-other",),
    ),
    Step(
        "patched from an image of one's own", "vision", patched(other_file), PATCHING, controls=("vision-other-file",)
    ),
    Step(
        "patched head by head",
        "vision",
        patched(lambda p: p.locator("#vision-hook").select_option("z")),
        PATCHING,
        controls=("vision-hook",),
    ),
    # Train: a run of a few steps from the knobs into column A, its first snapshot, the kept runs
    Step(
        "a run trained from the knobs",
        "train",
        train(train_run),
        COL_A,
        controls=("train-knobs", "train-into", "train-start"),
    ),
    Step("its first snapshot", "train", train(scrub("a")), "[data-testid=train-heads-a]", controls=("train-scrub-a",)),
    Step(
        "the kept runs refreshed",
        "train",
        refresh,
        "[data-testid=train-runs]",
        controls=("train-refresh",),
    ),
    Step(
        "a kept run shown in column B",
        "train",
        show_in_b,
        "[data-testid=train-heads-b] [data-testid=head-heatmap]",
        controls=("train-runs",),
    ),
    Step(
        "column B's first snapshot",
        "train",
        train(scrub("b")),
        "[data-testid=train-heads-b]",
        controls=("train-scrub-b",),
    ),
    # a long run of more heads than a page holds into column B: its pager turned both ways, the run cancelled
    Step("a run of 26 heads started in column B", "train", wide_run, "[data-testid=train-heads-b]"),
    Step(
        "column B's next heads",
        "train",
        turned("next"),
        "[data-testid=train-heads-b]",
        controls=("[data-role=next]",),
    ),
    Step(
        "column B's first heads again",
        "train",
        turned("prev"),
        "[data-testid=train-heads-b]",
        controls=("[data-role=prev]",),
    ),
    Step("column B's run cancelled", "train", cancel, COL_B, controls=("train-cancel-b",)),
    Step(
        "its step opened in Explore",
        "train",
        lambda p: press(p, "[data-testid=train-open-a]"),
        "[data-workspace=explore] [data-testid=head-heatmap]",
        controls=("train-open-a",),
    ),
]


def test_every_lab_act_leaves_what_it_changed_in_view(
    sized: Callable[[str, str], Page], typed_pycode_server: str
) -> None:
    page = sized(typed_pycode_server, "?ws=vision")
    page.wait_for_selector(f"{IMAGE} [data-token]", timeout=20_000)
    walk(page, STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
