"""Browser tests: the Debian chromium package driven by pytest-playwright against a real `attnlab serve`.

They fail (never skip) when chromium is missing or cannot start: the page is only tested if it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Request, ViewportSize

from tests.helpers import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install the Debian chromium package (.ci/run does)")
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "headless": True, "args": CHROMIUM_ARGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1400, "height": 900}, "accept_downloads": True}


# The servers these tests open (live_server, trained_server and the rest) are declared in tests/fixtures.py.


@pytest.fixture(scope="session")
def warm_context(browser: Browser, browser_context_args: dict[str, Any]) -> Iterator[BrowserContext]:
    """One browser context for the session's pages, so that a test opens the page as a returning visitor does: the
    page's modules and Plotly come from the HTTP cache instead of 4.8 MB fetched and compiled again for each test."""
    ctx = browser.new_context(**browser_context_args)
    yield ctx
    ctx.close()


class _Tab:
    """The session's one tab in the warm context. Each test navigates it afresh (a new document: nothing of the last
    test's page is left), and the tab's renderer process stays up between tests: a new tab starts one, about 1.2 s of
    every browser test (1.65 s a test in a new tab against 0.47 s in the same tab, measured here). What a test adds to
    the tab that a navigation keeps (event handlers) is taken off when it ends; a tab a test changed beyond that (an
    init script) is replaced."""

    def __init__(self, ctx: BrowserContext) -> None:
        self.ctx = ctx
        self.page = self._new()

    def _new(self) -> Page:
        page = self.ctx.new_page()
        self.listeners: list[tuple[str, Callable[..., Any]]] = []
        self.changed = False
        on, init_script = page.on, page.add_init_script

        def on_(event: str, handler: Callable[..., Any]) -> None:
            self.listeners.append((event, handler))
            on(event, handler)  # type: ignore[call-overload]

        def init_script_(*args: Any, **kwargs: Any) -> None:
            self.changed = True
            init_script(*args, **kwargs)

        page.on = on_  # type: ignore[method-assign]
        page.add_init_script = init_script_  # type: ignore[method-assign]
        return page

    def reset(self, viewport: ViewportSize) -> None:
        page = self.page
        for extra in self.ctx.pages:
            if extra is not page:
                extra.close()
        if page.is_closed() or self.changed:
            if not page.is_closed():
                page.close()
            self.page = self._new()
            return
        for event, handler in self.listeners:
            page.remove_listener(event, handler)  # type: ignore[call-overload]
        self.listeners.clear()
        page.unroute_all(behavior="ignoreErrors")
        page.emulate_media(
            media="null", color_scheme="null", reduced_motion="null", forced_colors="null", contrast="null"
        )
        page.set_viewport_size(viewport)
        page.mouse.move(0, 0)
        page.goto("about:blank")


@pytest.fixture(scope="session")
def warm_tab(warm_context: BrowserContext) -> _Tab:
    return _Tab(warm_context)


@pytest.fixture
def page(
    request: pytest.FixtureRequest,
    warm_context: BrowserContext,
    warm_tab: _Tab,
    browser_context_args: dict[str, Any],
) -> Iterator[Page]:
    """The page a test drives: the session's tab, navigated afresh by the test, unless the test (or a fixture it
    uses) asks for `context` itself, to route, go offline or open pages of its own, or is marked `cold` (about a
    first visit: nothing cached); those get a new tab in a fresh context. When the test ends, what it left in the
    warm context (local storage, cookies, permissions, other tabs) is cleared for every origin it visited."""
    if "context" in request.fixturenames or request.node.get_closest_marker("cold"):
        ctx: BrowserContext = request.getfixturevalue("context")
        yield ctx.new_page()
        return
    pg = warm_tab.page
    origins: set[str] = set()
    track = lambda frame: origins.add(_origin(frame.url))  # noqa: E731
    pg.on("framenavigated", track)
    yield pg
    warm_tab.reset(browser_context_args["viewport"])
    if not warm_tab.page.is_closed():
        cdp = warm_context.new_cdp_session(warm_tab.page)
        for origin in origins - {""}:
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage,indexeddb"})
        cdp.detach()
    warm_context.clear_cookies()
    warm_context.clear_permissions()


def _origin(url: str) -> str:
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") else ""


@dataclass
class PageLog:
    """What a page did: every request URL, console errors, uncaught exceptions, dialogs."""

    requests: list[str] = field(default_factory=list)
    api_bodies: list[dict[str, Any]] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def external(self) -> list[str]:
        return [
            u
            for u in self.requests
            if urlparse(u).scheme not in ("data", "blob") and urlparse(u).hostname != "127.0.0.1"
        ]

    def attention_requests(self) -> list[dict[str, Any]]:
        return [b for b in self.api_bodies if b.get("include")]


def _record(page: Page, log: PageLog) -> None:
    def on_request(req: Request) -> None:
        log.requests.append(req.url)
        if req.url.endswith("/api/attention") and req.method == "POST":
            log.api_bodies.append(req.post_data_json)

    page.on("request", on_request)
    page.on("console", lambda m: log.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log.page_errors.append(str(e)))

    def on_dialog(d: Any) -> None:
        log.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)


@pytest.fixture
def page_log(page: Page) -> PageLog:
    log = PageLog()
    _record(page, log)
    return log


@pytest.fixture
def open_page(page: Page, page_log: PageLog, live_server: str) -> Callable[..., Page]:
    """Open attnlab at `query` (a query string, or "" for the defaults) and wait for the heads to draw."""

    def open_(query: str = "", wait: bool = True) -> Page:
        page.goto(f"{live_server}/{query}")
        if wait:
            wait_idle(page)
        return page

    return open_


@pytest.fixture
def js(page: Page, live_server: str) -> Callable[[str], Any]:
    """Evaluate an async JS body that may `await mod("state.js")` to load one of the page's modules."""
    page.goto(f"{live_server}/api/health")

    def run(body: str) -> Any:
        return page.evaluate(f"async () => {{ const mod = (n) => import('/static/js/' + n); {body} }}")

    return run


@pytest.fixture
def open_trained(page: Page, page_log: PageLog, trained_server: str) -> Callable[..., Page]:
    """Open attnlab on the server with the trained models at `query` and wait for the heads to draw."""

    def open_(query: str = "") -> Page:
        page.goto(f"{trained_server}/{query}")
        wait_idle(page)
        return page

    return open_


def wait_idle(page: Page) -> None:
    """Wait until at least one head is drawn and no computation is in flight.

    Predicates for wait_for_function are written as functions ("() => ..."): Playwright evaluates a bare expression
    with eval when it has to poll, which a Content-Security-Policy without 'unsafe-eval' refuses.
    """
    page.wait_for_function(DRAWN_JS, timeout=20_000)
    page.wait_for_function(
        "() => document.getElementById('views').getAttribute('aria-busy') === 'false'", timeout=20_000
    )


# A run is drawn: a head card where the workspace shown holds the heads, else the page's first "attnlab:drawn" mark
# (every view of the workspace shown is drawn; the other workspaces' views draw when they are opened).
DRAWN_JS = """() => {
  const heads = document.querySelector('[data-workspace="explore"]');
  if (heads && !heads.hidden) return !!document.querySelector('[data-testid=head-heatmap]');
  return performance.getEntriesByName('attnlab:drawn').length > 0;
}"""


def open_workspace(page: Page, name: str) -> None:
    """Open workspace `name` by its tab, as a person does, and wait until its views are drawn."""
    page.locator(f"[data-testid=ws-tab-{name}]").click()
    page.wait_for_function(
        "(name) => !document.querySelector(`[data-workspace=${name}]`).hidden"
        " && document.getElementById('views').getAttribute('aria-busy') === 'false'",
        arg=name,
        timeout=20_000,
    )


# The large head's values as drawn: its matrix with None on the masked cells (focus.js keeps what its image shows
# on the element as `drawn`: the matrix, the mask and the scale).
FOCUS_Z_JS = """() => {
  const d = document.getElementById('focus-plot').drawn;
  return d.matrix.map((row, q) => Array.from(row, (v, k) => (d.eligible[q][k] ? v : null)));
}"""


def focus_z(page: Page) -> list[list[float | None]]:
    return page.evaluate(FOCUS_Z_JS)  # type: ignore[no-any-return]


def masked_cells(page: Page, index: int = 0) -> set[tuple[int, int]]:
    raw = page.locator("[data-testid=head-heatmap]").nth(index).get_attribute("data-masked-cells") or ""
    return {(int(q), int(k)) for q, k in (c.split("-") for c in raw.split(",") if c)}


@pytest.fixture
def run_and_wait(page: Page) -> Iterator[Callable[[Callable[[], None]], dict[str, Any]]]:
    """Do an action that triggers a computation; return the POST body it sent once the page has redrawn."""

    def go(action: Callable[[], None]) -> dict[str, Any]:
        with page.expect_response(lambda r: r.url.endswith("/api/attention")) as resp:
            action()
        body = resp.value.request.post_data_json
        wait_idle(page)
        return body  # type: ignore[no-any-return]

    yield go


PHONE: ViewportSize = {"width": 390, "height": 844}


@pytest.fixture
def phone_at(browser: Browser) -> Iterator[Callable[[str, str], Page]]:
    """A 390 px touch screen (a phone: touch, a mobile viewport, two device pixels a px). `open(base, query)` opens
    attnlab there at `query` and waits for the heads; the page must raise no uncaught error."""
    ctx = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True, device_scale_factor=2)
    page = ctx.new_page()
    log = PageLog()
    _record(page, log)

    def open_(base: str, query: str) -> Page:
        page.goto(f"{base}/{query}")
        wait_idle(page)
        return page

    yield open_
    ctx.close()
    assert not log.page_errors, log.page_errors
