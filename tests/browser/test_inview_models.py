"""The in-view walk of the controls only some models offer: a layer chosen on a model with two (induction, of the
trained server), and matrices typed in (`given`, of the server that reads them). Each leaves the heads it redrew in
the viewport, at 1440x900 and on a 390x844 touch phone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page

from tests.browser.inview import Step, press, walk
from tests.browser.test_inview_explore import HEADS, choose, in_drawer

pytestmark = pytest.mark.browser


def typed(page: Page) -> None:
    page.get_by_test_id("typed-matrix").fill("1 0 0\n0 1 0\n0 0 1")
    press(page, "[data-testid=typed-apply]")


LAYER_STEPS: list[Step] = [
    Step("the second layer chosen", "explore", choose("#layer-select", "1"), HEADS, ("layerSet",)),
    Step("every layer chosen", "explore", choose("#layer-select", "all"), HEADS, ("layerSet",)),
]
TYPED_STEPS: list[Step] = [
    Step("a matrix typed in and run", "explore", in_drawer(typed), HEADS, ("typedSet",)),
]
STEPS = LAYER_STEPS + TYPED_STEPS


def test_a_models_own_controls_leave_the_heads_in_view(
    sized: Callable[[str, str], Page], trained_server: str, typed_pycode_server: str
) -> None:
    walk(sized(trained_server, "?m=induction"), LAYER_STEPS)
    page = sized(typed_pycode_server, "?m=given")
    walk(page, TYPED_STEPS)
    assert page.errors == []  # type: ignore[attr-defined]
