"""The Train workspace on one page load (/?ws=train): a tiny run started from the knobs streams its snapshots into
column A (curves of its measures, every head's map of the probe), the scrubber goes back to step 0, the run is
cancelled and its step opened as the model train:RUN@STEP in Explore; the six ready-made experiments are buttons
with what to look at, and the kept runs list holds the run. Nothing waits a fixed time: each step waits for what the
page shows."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from playwright.sync_api import Page, expect

from engine.trainlab.experiments import BY_ID, EXPERIMENTS, mean
from tests.browser.conftest import PageLog, wait_idle

pytestmark = pytest.mark.browser

# A run small enough to snapshot often on a loaded machine, long enough to be cancelled while it trains on a fast one.
TINY = {"layers": "2", "heads": "2", "width": "16", "positions": "8", "batch": "4", "warmup": "0"}
LONG = {**TINY, "steps": "20000", "snapshot_every": "50"}  # the server's default limits: 401 snapshots at most

COL_A = "[data-testid=train-col-a]"
ENDED = ("finished", "cancelled", "failed", "interrupted")


def snapshots(page: Page) -> int:
    return int(page.locator(COL_A).get_attribute("data-snapshots") or 0)


def test_a_run_trains_streams_scrubs_cancels_and_opens_in_explore(open_page: Callable[..., Page]) -> None:
    page = open_page("?ws=train", wait=False)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # the experiments, one button each, with their titles and what to look at
    page.wait_for_selector("[data-testid=train-experiments] button")
    for e in EXPERIMENTS:
        button = page.locator(f"[data-testid=train-exp-{e.id}]")
        assert button.inner_text() == e.title
        card = button.locator("xpath=..").inner_text()
        assert e.look_at in card and " vs ".join(e.labels) in card

    # a run from the knobs: snapshots arrive one by one while it trains
    page.locator("#train-task").select_option("copy")
    for name, value in LONG.items():
        page.locator(f"#train-{name}").fill(value)
    page.locator("#train-scale").uncheck()
    # a knob past the server's limits: refused before anything trains, the knob marked and the limit said
    page.locator("#train-steps").fill("100000000")
    page.locator("[data-testid=train-start]").click()
    page.wait_for_selector("#train-steps[aria-invalid=true]")
    assert "steps" in page.locator("[data-testid=train-status]").inner_text()
    assert page.evaluate("() => document.activeElement.id") == "train-steps"
    page.locator("#train-steps").fill(LONG["steps"])
    page.locator("[data-testid=train-start]").click()
    page.wait_for_function(
        "(sel) => Number(document.querySelector(sel).dataset.snapshots) >= 3", arg=COL_A, timeout=60_000
    )
    col = page.locator(COL_A)
    assert col.get_attribute("data-status") == "running"
    # every head of both layers drawn by the heads grid's cards, at the last snapshot the column holds
    heads = col.locator("[data-testid=train-heads-a] [data-testid=head-heatmap]")
    assert heads.count() == 4
    shown = int(col.get_attribute("data-step") or -1)
    assert shown > 0 and shown % 50 == 0
    # curves of the measures, one line a layer for the heads' scores, the train and held-out losses together
    curves = col.locator("[data-testid=train-curves-a] figure")
    keys = [curves.nth(i).get_attribute("data-curve") for i in range(curves.count())]
    assert keys == [
        "loss",
        "induction",
        "previous_token",
        "entropy",
        "lr",
        "similarity",
        "max_abs_score",
        "softmax_jacobian",
        "future_reliance",
        "grad_norm",
    ]
    loss = col.locator("[data-curve=loss] polyline")
    assert [loss.nth(i).get_attribute("data-label") for i in range(loss.count())] == ["train", "held out"]
    assert col.locator("[data-curve=induction] polyline").count() == 2

    # the scrubber back to step 0: the heads redrawn from the first snapshot, and it stays there as more come
    scrub = col.locator("[data-testid=train-scrub-a]")
    scrub.fill("0")
    page.wait_for_function("(sel) => document.querySelector(sel).dataset.step === '0'", arg=COL_A)
    assert col.locator("[data-testid=train-heads-a]").get_attribute("data-step") == "0"
    assert heads.first.get_attribute("aria-label") == "Layer 0 head 0: its weights on the probe at step 0"
    before = snapshots(page)
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel).dataset.snapshots) > n", arg=[COL_A, before]
    )
    assert col.get_attribute("data-step") == "0"

    # cancelled: the run ends with its snapshots kept, and its step opens in Explore as a model of the page
    assert page.locator("[data-testid=train-open-a]").is_disabled()
    page.locator("[data-testid=train-cancel-a]").click()
    page.wait_for_function("(sel) => document.querySelector(sel).dataset.status === 'cancelled'", arg=COL_A)
    # the kept runs list it first, with its export link; a new name is kept by the server
    page.wait_for_function(
        "() => document.querySelector('[data-testid=train-runs] li')?.textContent.includes('cancelled')"
    )
    kept = page.locator("[data-testid=train-runs] li").first
    run_id = str(kept.get_attribute("data-run"))
    assert kept.locator("a").get_attribute("href") == f"/api/train/{run_id}/export"
    kept.locator("input").fill("unscaled copy")
    handle = kept.element_handle()
    kept.get_by_role("button", name="Rename").click()
    page.wait_for_function("(li) => !li.isConnected", arg=handle)  # the list drawn again from the server's
    again = page.locator(f"[data-testid=train-runs] li[data-run='{run_id}']")
    assert again.locator("input").input_value() == "unscaled copy"
    scrub.fill("1")
    page.wait_for_function("(sel) => document.querySelector(sel).dataset.step === '50'", arg=COL_A)
    page.locator("[data-testid=train-open-a]").click()
    page.wait_for_function("() => !document.querySelector('[data-workspace=explore]').hidden")
    model = f"train:{run_id}@50"
    page.wait_for_function("(m) => document.querySelector('#model-select').value === m", arg=model)
    # its run drawn: the link names it, the layer menu offers its 2 layers and the heads grid draws a layer's 2 heads
    page.wait_for_function("(m) => new URLSearchParams(location.search).get('m') === m", arg=model)
    wait_idle(page)
    assert page.locator("#model-select").input_value() == model
    assert page.locator("#layer-select option[value='1']").count() == 1
    assert page.locator("[data-workspace=explore] [data-testid=head-heatmap]").count() == 2
    assert page.locator("[data-testid=error-banner]").is_hidden()
    # the link opens that step again: the page's models gain the snapshot the link names
    page.reload()
    wait_idle(page)
    assert page.locator("#model-select").input_value() == model
    assert page.locator("[data-workspace=explore] [data-testid=head-heatmap]").count() == 2

    # back in Train, the run deleted: gone from the list
    page.locator("[data-testid=ws-tab-train]").click()
    page.locator(f"[data-testid=train-runs] li[data-run='{run_id}']").get_by_role("button", name="Delete").click()
    page.wait_for_selector(f"[data-testid=train-runs] li[data-run='{run_id}']", state="detached")
    assert errors == []


def first_snapshot(page: Page, side: str) -> str:
    """Wait for column `side`'s run to send its first snapshot; its run's id."""
    col = f"[data-testid=train-col-{side}]"
    page.wait_for_function(
        "(sel) => Number(document.querySelector(sel).dataset.snapshots) >= 1", arg=col, timeout=60_000
    )  # a model of width 128 built and measured at step 0 on a loaded machine
    return str(page.locator(f"[data-testid=train-heads-{side}]").get_attribute("data-run"))


def test_a_training_lesson_reads_its_experiments_runs(
    open_page: Callable[..., Page], page_log: PageLog, live_server: str
) -> None:
    """The no-scale lesson, end to end: it opens the Train workspace with its experiment's button outlined, one click
    starts the experiment, and the answer is checked against the runs' first snapshots (what the claim reads), as
    the server measured them. Each run is cancelled once its first snapshot is in, so that the next one starts."""
    page = open_page("?lesson=train-no-scale", wait=False)
    page.wait_for_function("() => !document.querySelector('[data-workspace=train]').hidden")
    expect(page.get_by_test_id("lesson-prompt")).to_contain_text("Click the outlined experiment below")
    button = page.get_by_test_id("train-exp-no-scale")
    expect(button).to_have_attribute("data-asked", "")
    assert page.locator("[data-experiment][data-asked]").count() == 1
    # the experiments' own notes tell how it turns out: hidden while the lesson is unanswered
    expect(button.locator("xpath=..").locator("p")).to_be_hidden()
    page.get_by_test_id("lesson-answer").select_option("lower")
    assert "click the outlined experiment" in page_check(page)

    button.click()
    expect(page.get_by_test_id("train-lookat")).to_be_hidden()
    runs = []
    for side in ("a", "b"):
        runs.append(first_snapshot(page, side))
        cancelled = httpx.post(f"{live_server}/api/train/{runs[-1]}/cancel", json={}, timeout=30)
        assert cancelled.status_code == 202, cancelled.text  # the next run takes its slot
    for side in ("a", "b"):
        page.wait_for_function(
            "([sel, ended]) => ended.includes(document.querySelector(sel).dataset.status)",
            arg=[f"[data-testid=train-col-{side}]", list(ENDED)],
        )
    claim = page.get_by_test_id("train-claim")
    page.wait_for_function("() => document.querySelector('[data-testid=train-claim]').dataset.held !== ''")
    expect(claim).to_be_hidden()  # the verdict and its figure, until the answer is checked

    # the right answer, from the server's own measures of the runs' first snapshots, as the claim check reads them
    first = [httpx.get(f"{live_server}/api/train/{r}", timeout=30).json()["snapshots"][0]["measures"] for r in runs]
    scaled, unscaled = (mean(m, "entropy") for m in first)
    ratio = unscaled / scaled
    right = "under-half" if ratio < 0.5 else "lower" if ratio < 1 else "not-lower"
    check = httpx.get(f"{live_server}/api/train/experiments/no-scale/check", params={"runs": ",".join(runs)}).json()
    assert (
        check["figure"] == pytest.approx(ratio)
        and check["held"] == BY_ID["no-scale"].check([[first[0]], [first[1]]])[0]
    )
    wrong = next(v for v in ("under-half", "lower", "not-lower") if v != right)
    page.get_by_test_id("lesson-answer").select_option(wrong)
    assert page_check(page).startswith("Not yet: read the Mean entropy curves at step 0")
    expect(claim).to_be_hidden()
    page.get_by_test_id("lesson-answer").select_option(right)
    assert page_check(page) == "Correct."
    expect(page.get_by_test_id("lesson-attnlab")).to_contain_text(
        f"mean entropy at step 0: scaled {round(scaled, 3):g}, unscaled {round(unscaled, 3):g} nats"
    )
    expect(claim).to_be_visible()
    expect(claim).to_contain_text("The claim")
    expect(page.get_by_test_id("train-lookat")).to_be_visible()
    # the browser logs the one refusal the second run met while the first held the server's training slot
    assert [e for e in page_log.console_errors if "429" not in e] == [] and not page_log.page_errors


def page_check(page: Page) -> str:
    """Press the lesson's Check: the panel redraws its feedback in the click's own handler."""
    page.get_by_test_id("lesson-check").click()
    return page.get_by_test_id("lesson-feedback").inner_text()
