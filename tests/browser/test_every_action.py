"""Every action of the page is in an in-view walk: each type of the store's actions is performed by some step of the
walks (tests/browser/test_inview_*.py) or is the page's own answer (inview.NOT_A_PERSONS); and each control a person
can operate in a workspace with state of its own (Vision, Train) and in a registered panel is operated by some step.

The controls are read from the templates, so a new control, like a new action, fails here until a walk does it.
"""

from __future__ import annotations

import importlib
import re
from html.parser import HTMLParser
from pathlib import Path

from tests.browser.inview import NOT_A_PERSONS, Step, performed_by, store_actions

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
WALKS = sorted(Path(__file__).parent.glob("test_inview_*.py"))

# The workspaces with state of their own (their acts change no store state): the template that holds each.
OWN_STATE = {"vision": "vision.html", "train": "train.html"}

OPERABLE = {"button", "input", "select", "textarea"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
JINJA = re.compile(r"\{[%#].*?[%#]\}", re.S)  # a template's statements and comments: no elements in them
FILLED = re.compile(r"\{\{.*?\}\}")  # a value the template fills in (a loop's `{{ side }}`): any value matches


# The controls no walk operates yet, by owner: each one is a gap in the in-view rule's check, written down so that it
# is seen, and so that a new control without a step still fails. An entry a walk comes to operate must leave (the
# test fails on a stale one). Empty: every control of the panels and of the Train and Vision workspaces is walked.
NOT_WALKED_YET: dict[str, list[str]] = {}


def operates(operated: str, control: str) -> bool:
    """Whether a step's `operated` names `control`: the same, a `*` of the template's matching any value (`[` and `]`
    are themselves, as in `[data-role=next]`)."""
    return re.fullmatch(re.escape(control).replace(r"\*", ".*"), operated) is not None


def control_name(attrs: dict[str, str | None]) -> str:
    """A control's name in a step's `controls`: its data-testid, else its id, else `[data-NAME=VALUE]` of its first
    data attribute (a zoom button's `[data-zoom=in]`); "" when it has none of them. A part the template fills in is
    a `*` that any value matches (`train-open-*`: the train-open-a a step names)."""
    for key in ("data-testid", "id"):
        if attrs.get(key):
            return FILLED.sub("*", str(attrs[key]))
    data = [(k, v) for k, v in attrs.items() if k.startswith("data-")]
    return f"[{data[0][0]}={data[0][1]}]" if data else ""


class Controls(HTMLParser):
    """The controls of a template a person can operate (a button, an input, a select, a text box, an element in the
    tab order, a canvas a click acts on, which says so in its label), each under the registered panel (data-panel)
    that holds it, or under `whole` when that is not None (the template of a workspace with state of its own)."""

    def __init__(self, whole: str | None) -> None:
        super().__init__()
        self.owners: list[str | None] = [whole]
        self.found: dict[str, list[str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        owner = next((o for o in reversed(self.owners) if o), None)
        canvas_acted_on = tag == "canvas" and "click" in (a.get("aria-label") or "")
        if owner and (tag in OPERABLE or a.get("tabindex") == "0" or canvas_acted_on):
            self.found.setdefault(owner, []).append(control_name(a) or f"<{tag}> with no name")
        if tag not in VOID:
            self.owners.append(f"panel {a['data-panel']}" if a.get("data-panel") else None)

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and len(self.owners) > 1:
            self.owners.pop()


def controls() -> dict[str, list[str]]:
    """{"panel NAME" or "workspace NAME": its controls} over every template."""
    found: dict[str, list[str]] = {}
    whole = {template: f"workspace {name}" for name, template in OWN_STATE.items()}
    for path in sorted(TEMPLATES.glob("*.html")):
        parser = Controls(whole.get(path.name))
        parser.feed(JINJA.sub("", path.read_text()))
        for owner, names in parser.found.items():
            found.setdefault(owner, []).extend(names)
    return found


def tables() -> dict[str, list[Step]]:
    return {path.stem: importlib.import_module(f"tests.browser.{path.stem}").STEPS for path in WALKS}


def test_every_persons_action_is_performed_by_a_step_of_a_walk() -> None:
    kinds = store_actions(ROOT)
    walks = tables()
    assert walks, "no in-view walk (tests/browser/test_inview_*.py) found"
    performed = performed_by(list(walks.values()))
    missing = [k for k in kinds if k not in NOT_A_PERSONS and k not in performed]
    assert missing == [], f"actions no step of {sorted(walks)} performs: {missing}"
    stale = sorted(set(NOT_A_PERSONS) - set(kinds))
    assert stale == [], f"NOT_A_PERSONS names types the store no longer has: {stale}"
    mislabelled = sorted(set(NOT_A_PERSONS) & performed)
    assert mislabelled == [], f"steps perform types NOT_A_PERSONS calls the page's own: {mislabelled}"
    unknown = sorted(performed - set(kinds))
    assert unknown == [], f"steps name types the store does not have: {unknown}"


def test_every_control_of_a_panel_or_a_workspace_of_its_own_is_operated_by_a_step() -> None:
    found = controls()
    # the reading itself: both workspaces of their own and the registered panels have controls to find
    assert {f"workspace {name}" for name in OWN_STATE} <= set(found)
    assert {"panel deepzoom", "panel lesson"} <= set(found)
    operated = {c for steps in tables().values() for step in steps for c in step.controls}
    missing = {owner: [c for c in names if not any(operates(o, c) for o in operated)] for owner, names in found.items()}
    unwalked = {o: [c for c in m if c not in NOT_WALKED_YET.get(o, [])] for o, m in missing.items()}
    assert {o: m for o, m in unwalked.items() if m} == {}, "controls no step of the walks operates"
    stale = {o: [c for c in names if c not in missing.get(o, [])] for o, names in NOT_WALKED_YET.items()}
    assert {o: c for o, c in stale.items() if c} == {}, "operated by a walk, or gone: out of NOT_WALKED_YET"
