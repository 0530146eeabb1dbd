"""The in-view walk's parts: a step is one thing a person does on the page, the action(s) it must perform and the
element it must leave in the viewport; `walk` performs the steps in turn, at one size, and fails on the first step
that performs nothing, performs something else, or leaves its answer out of sight. A walk's test opens its page with
the `sized` fixture (tests/browser/conftest.py), once at each screen of its SIZES.

The page names every action that changed its state as an "attnlab:action" window event (static/js/main.js);
`walk` records them. The store's actions (static/js/actions.js `act`) are either a person's, each performed by some
step of the walks (tests/browser/test_every_action.py checks the tables), or the page's own answers to one,
listed in NOT_A_PERSONS with why.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page

from tests.browser.conftest import open_workspace
from tests.helpers import node

# Whether the element `sel` names is at least partly in the viewport (and laid out).
IN_VIEW_JS = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return false;
  const r = el.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth;
}"""

WHERE_JS = """(sel) => {
  const el = document.querySelector(sel);
  if (!el) return 'missing';
  const r = el.getBoundingClientRect();
  return `top ${Math.round(r.top)} bottom ${Math.round(r.bottom)} of a ${innerHeight} px viewport`;
}"""

SHOWN_JS = """() => [...document.querySelectorAll('[data-workspace]')]
  .filter((w) => !w.hidden).map((w) => w.dataset.workspace)"""

# The actions the page performs from here on (installed once a page, emptied at each step).
RECORD_JS = """() => {
  if (!window.performedActions) {
    window.performedActions = [];
    addEventListener('attnlab:action', (e) => window.performedActions.push(e.detail));
  }
  window.performedActions.length = 0;
}"""

# The store's actions that are the page's own answers to a person's action, never a person's: why each is one.
NOT_A_PERSONS = {
    "modelsLoaded": "the models list came in",
    "modelsFailed": "the models list failed",
    "restored": "the page read its link",
    "runStarted": "a run went out",
    "layersTooMany": "the server said every layer at once is over its result limit",
    "runProgress": "the server reported a run's progress",
    "runSucceeded": "a run's answer came in",
    "runRest": "a streamed run's other layers came in",
    "restFailed": "a streamed run's other layers failed",
    "runFailed": "a run failed",
    "runTooLarge": "the server refused a run's size",
    "panelStarted": "a panel's request went out",
    "panelLoaded": "a panel's answer came in",
    "panelFailed": "a panel's request failed",
    "panelCleared": "a panel's answer no longer fits the input",
    "trainMeasured": "the Train workspace's run reported a measure",
}


# The page has settled after an action: the run it asked is answered and drawn (every layer of a streamed one), no
# panel's request is in flight, and no view waits to draw. The next step acts only then, so its own click cannot land
# while the last step's answer redraws what it clicks (a chip drawn anew between the press and the release takes no
# click), and the answer's place is read once it has its final layout.
SETTLED_JS = """async () => {
  const { pageState } = await import('/static/js/main.js');
  const s = pageState();
  if (!s) return false;
  const run = s.run;
  const panels = Object.values(s.panels).every((p) => !p || p.status !== 'loading');
  return run.answered === run.want && run.status !== 'loading' && !run.rest && panels
    && document.getElementById('views').getAttribute('aria-busy') === 'false';
}"""


def settled(page: Page, action: str) -> None:
    """Wait until the page has settled after `action` (SETTLED_JS); say what is still on its way when it does not."""
    try:
        page.wait_for_function(SETTLED_JS, timeout=30_000)
    except Exception as err:
        state = page.evaluate(
            """async () => { const { pageState } = await import('/static/js/main.js'); const s = pageState();
            return { run: [s.run.status, s.run.answered, s.run.want, !!s.run.rest],
              loading: Object.entries(s.panels).filter(([, p]) => p && p.status === 'loading').map(([n]) => n),
              busy: document.getElementById('views').getAttribute('aria-busy') }; }"""
        )
        raise AssertionError(f"after {action}, the page did not settle: {state}") from err


def in_view(page: Page, selector: str, action: str) -> None:
    """Wait until `selector` is in the viewport after `action`; say where it is when it never comes."""
    try:
        page.wait_for_function(IN_VIEW_JS, arg=selector, timeout=8_000)
    except Exception as err:  # the playwright timeout, with where the element sat
        where = page.evaluate(WHERE_JS, selector)
        raise AssertionError(f"after {action}, {selector} is not in the viewport: {where}") from err


# What is drawn over the middle of the focused element (a sticky header over a scroll box, say); null when nothing is.
FOCUS_COVERED_JS = """() => { const el = document.activeElement; const r = el.getBoundingClientRect();
  const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  const what = el.id || el.textContent.trim().slice(0, 40) || el.tagName;
  return top && (top === el || el.contains(top) || top.contains(el)) ? null
    : `${what} under ${top ? top.tagName + '.' + top.className : 'nothing'}`; }"""


def focus_covered(page: Page) -> str | None:
    """The focused element and what covers it, when something does; None when the element is itself in sight."""
    return page.evaluate(FOCUS_COVERED_JS)  # type: ignore[no-any-return]


def touch(page: Page) -> bool:
    return page.evaluate("() => matchMedia('(pointer: coarse)').matches")  # type: ignore[no-any-return]


def press(page: Page, selector: str) -> None:
    """A tap on a touch screen, a click elsewhere."""
    loc = page.locator(selector).first
    loc.scroll_into_view_if_needed()
    if touch(page):
        loc.tap()
    else:
        loc.click()


def shown(page: Page) -> list[str]:
    return page.evaluate(SHOWN_JS)  # type: ignore[no-any-return]


def set_causal(page: Page, on: bool) -> None:
    drawer = page.locator("#controls-toggle")
    if drawer.is_visible():
        drawer.click()
    box = page.locator("#mask-causal")
    if box.is_checked() != on:
        box.click()
    if drawer.is_visible():
        page.locator("#controls-close").click()


@dataclass(frozen=True)
class Step:
    """One thing a person does: `name` in words, the workspace it is done in, `act` doing it (through the page's own
    controls, as a person would), `does` the store's action types it must perform (empty for a workspace with state
    of its own, such as Vision and Train), and `answer` the element it changed, which must end in the viewport;
    `controls`: the controls (data-testid or id) of a workspace with state of its own that the step operates."""

    name: str
    workspace: str
    act: Callable[[Page], None]
    answer: str
    does: tuple[str, ...] = ()
    controls: tuple[str, ...] = ()


def walk(page: Page, steps: list[Step]) -> None:
    """Perform each step in turn: its workspace opened by its tab first when another is shown."""
    for step in steps:
        if shown(page) != [step.workspace]:
            open_workspace(page, step.workspace)
        page.evaluate(RECORD_JS)
        try:
            step.act(page)
        except Exception as err:  # the step named: a walk's steps share a few helpers, which the traceback names
            raise AssertionError(f"step {step.name!r} failed: {err}") from err
        for kind in step.does:
            try:
                page.wait_for_function("(k) => window.performedActions.includes(k)", arg=kind, timeout=8_000)
            except Exception as err:
                got = page.evaluate("() => window.performedActions")
                raise AssertionError(f"{step.name} performed {got}, not {kind}") from err
        settled(page, step.name)
        in_view(page, step.answer, step.name)


def store_actions(root: Path) -> list[str]:
    """The store's action types: the keys of static/js/actions.js `act`, read by node from the page's modules."""
    actions = json.dumps(str(root / "static/js/actions.js"))
    script = f"import({actions}).then((m) => console.log(JSON.stringify(Object.keys(m.act))))"
    out = subprocess.run([node(), "--input-type=module", "-e", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def performed_by(tables: list[list[Step]]) -> set[str]:
    return {kind for steps in tables for step in steps for kind in step.does}
