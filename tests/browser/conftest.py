"""Browser tests: the Debian chromium package driven by pytest-playwright against a real `attnlab serve`.

They fail (never skip) when chromium is missing or cannot start: the page is only tested if it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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


@dataclass(frozen=True)
class Device:
    """A screen the page is tested on. Its size is the tab's (a tab can be resized); touch, a mobile viewport and the
    device pixels a px are its browser context's, so each such kind of screen has a warm context of its own."""

    width: int
    height: int
    touch: bool = False  # a touch screen with a mobile viewport (a phone)
    scale: int = 1  # device pixels a px

    @property
    def viewport(self) -> ViewportSize:
        return {"width": self.width, "height": self.height}


DESKTOP = Device(1400, 900)
PHONE = Device(390, 844, touch=True, scale=2)  # a phone: touch, a mobile viewport, two device pixels a px
# The screens a page is walked on (tests/browser/inview.py `walk`), named as the tests' ids show them.
SIZES = {"1440x900": Device(1440, 900), "390x844-touch": Device(390, 844, touch=True)}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": DESKTOP.viewport, "accept_downloads": True}


# The servers these tests open (live_server, trained_server and the rest) are declared in tests/fixtures.py.


@pytest.fixture(scope="session")
def warm_context(browser: Browser, browser_context_args: dict[str, Any]) -> Iterator[BrowserContext]:
    """One browser context for the session's pages, so that a test opens the page as a returning visitor does: the
    page's modules and Plotly come from the HTTP cache instead of 4.8 MB fetched and compiled again for each test."""
    ctx = browser.new_context(**browser_context_args)
    yield ctx
    ctx.close()


class _Tab:
    """A warm context's one tab. Each test navigates it afresh (a new document: nothing of the last test's page is
    left), and the tab's renderer process stays up between tests: a new tab starts one, about 1.2 s of every browser
    test (1.65 s a test in a new tab against 0.47 s in the same tab, measured here). What a test adds to the tab that
    a navigation keeps (event handlers) is taken off when it ends; a tab a test changed beyond that (an init script)
    is replaced. What the test left in the context (local storage, cookies, permissions, other tabs) is cleared for
    every origin it visited."""

    def __init__(self, ctx: BrowserContext, device: Device) -> None:
        self.ctx = ctx
        self.device = device
        self.held = False
        self.origins: set[str] = set()
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

    @contextmanager
    def lent(self) -> Iterator[Page]:
        """The tab for one test, at its device's size; reset, and what the test stored forgotten, when it ends."""
        assert not self.held, "this test holds the warm tab for this device already"
        self.held = True
        pg = self.page
        pg.set_viewport_size(self.device.viewport)
        pg.on("framenavigated", lambda frame: self.origins.add(_origin(frame.url)))
        try:
            yield pg
            self.reset()
            self.forget()
        finally:
            self.origins.clear()
            self.held = False

    def forget(self) -> None:
        """Clear what the pages visited stored in the context (local storage, cookies, permissions), as a fresh
        context has none."""
        if not self.page.is_closed():
            cdp = self.ctx.new_cdp_session(self.page)
            for origin in self.origins - {""}:
                cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage,indexeddb"})
            cdp.detach()
        self.ctx.clear_cookies()
        self.ctx.clear_permissions()

    def reset(self) -> None:
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
        page.set_viewport_size(self.device.viewport)
        page.mouse.move(0, 0)
        page.goto("about:blank")


class _Tabs:
    """The session's warm tabs: one per kind of screen (touch, mobile and scale), each in a warm context of its own,
    made the first time a test asks for that kind."""

    def __init__(self, browser: Browser, desktop: BrowserContext, args: dict[str, Any]) -> None:
        self.browser = browser
        self.args = args
        self.tabs = {_kind(DESKTOP): _Tab(desktop, DESKTOP)}
        self.contexts: list[BrowserContext] = []

    def of(self, device: Device) -> _Tab:
        """The warm tab of `device`'s kind, at `device`'s size."""
        tab = self.tabs.get(_kind(device))
        if tab is None:
            ctx = self.browser.new_context(
                **{**self.args, "viewport": device.viewport},
                has_touch=device.touch,
                is_mobile=device.touch,
                device_scale_factor=device.scale,
            )
            self.contexts.append(ctx)
            tab = self.tabs[_kind(device)] = _Tab(ctx, device)
        tab.device = device
        return tab


def _kind(device: Device) -> tuple[bool, int]:
    return device.touch, device.scale


@pytest.fixture(scope="session")
def warm_tabs(browser: Browser, warm_context: BrowserContext, browser_context_args: dict[str, Any]) -> Iterator[_Tabs]:
    tabs = _Tabs(browser, warm_context, browser_context_args)
    yield tabs
    for ctx in tabs.contexts:
        ctx.close()


@pytest.fixture
def page(request: pytest.FixtureRequest, warm_tabs: _Tabs) -> Iterator[Page]:
    """The page a test drives: the session's desktop tab, navigated afresh by the test, unless the test (or a fixture
    it uses) asks for `context` itself, to route, go offline or open pages of its own, or is marked `cold` (about a
    first visit: nothing cached); those get a new tab in a fresh context."""
    if "context" in request.fixturenames or request.node.get_closest_marker("cold"):
        ctx: BrowserContext = request.getfixturevalue("context")
        yield ctx.new_page()
        return
    with warm_tabs.of(DESKTOP).lent() as pg:
        yield pg


@pytest.fixture
def tab_on(warm_tabs: _Tabs) -> Iterator[Callable[[Device], Page]]:
    """`tab_on(device)`: the warm tab of that kind of screen at that size, for a test whose screen is not the
    desktop's (a phone, or another width). Asked again in the same test, it is the same tab, with what the pages
    before stored forgotten (as a fresh context would be); reset as `page` is when the test ends."""
    with ExitStack() as stack:
        held: dict[tuple[bool, int], Page] = {}

        def lend(device: Device) -> Page:
            tab = warm_tabs.of(device)
            pg = held.get(_kind(device))
            if pg is None:
                pg = held[_kind(device)] = stack.enter_context(tab.lent())
            else:
                tab.forget()
                pg.set_viewport_size(device.viewport)
            return pg

        yield lend


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

    def on_console(m: Any) -> None:
        if m.type == "error":  # "Failed to load resource" names no resource in its text: its location does
            where = (m.location or {}).get("url")
            log.console_errors.append(f"{m.text} ({where})" if where else m.text)

    page.on("console", on_console)
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


@pytest.fixture
def phone_at(tab_on: Callable[[Device], Page]) -> Iterator[Callable[[str, str], Page]]:
    """A 390 px touch screen (a phone: touch, a mobile viewport, two device pixels a px). `open(base, query)` opens
    attnlab there at `query` and waits for the heads; the page must raise no uncaught error."""
    page = tab_on(PHONE)
    log = PageLog()
    _record(page, log)

    def open_(base: str, query: str) -> Page:
        page.goto(f"{base}/{query}")
        wait_idle(page)
        return page

    yield open_
    assert not log.page_errors, log.page_errors


@pytest.fixture(params=list(SIZES))
def sized(request: pytest.FixtureRequest, tab_on: Callable[[Device], Page]) -> Callable[[str, str], Page]:
    """Each of SIZES in turn: `sized(base, query)` opens attnlab at `query` on the server at `base`, at that size, and
    waits for the heads; `page.errors` holds the uncaught errors of every page it opened."""
    device = SIZES[request.param]
    errors: list[str] = []
    heard: list[Page] = []

    def open_(base: str, query: str) -> Page:
        page = tab_on(device)  # the same tab each time, what the page before stored forgotten
        if page not in heard:
            page.on("pageerror", lambda e: errors.append(str(e)))
            heard.append(page)
        page.goto(f"{base}/{query}")
        wait_idle(page)
        page.errors = errors  # type: ignore[attr-defined]
        return page

    return open_
