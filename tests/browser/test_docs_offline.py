"""/docs and /redoc draw the API reference with every request answered by attnlab itself (no CDN, no fonts), under
a Content-Security-Policy that allows no inline script, with no console error."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Route

from tests.browser.conftest import PageLog

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(("path", "drawn"), [("/docs", ".opblock-tag"), ("/redoc", "[role=search], .api-content")])
def test_api_docs_draw_with_the_network_off(
    page: Page, page_log: PageLog, live_server: str, path: str, drawn: str
) -> None:
    blocked: list[str] = []

    def only_local(route: Route) -> None:
        if route.request.url.startswith(live_server):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    page.goto(f"{live_server}{path}")
    page.wait_for_selector(drawn, timeout=30_000)
    if path == "/docs":
        tags = page.locator(".opblock-tag").all_inner_texts()
        assert any("analysis" in t for t in tags) and any("mechanics" in t for t in tags), tags
    # nothing asked for the network (ReDoc's logo from its CDN is rewritten away as the bundle is served), and
    # nothing broke the page's strict Content-Security-Policy (no inline script: Swagger UI starts from a file)
    assert blocked == []
    assert page_log.external() == []
    assert page_log.console_errors == []
    assert page_log.page_errors == []


def test_the_guide_draws_and_searches_with_the_network_off(page: Page, page_log: PageLog, live_server: str) -> None:
    """The guide at /guide (built by `make docs`): Material's pages, styles and search from attnlab alone, no web
    font, and its inline scripts inside the guide's Content-Security-Policy."""
    blocked: list[str] = []

    def only_local(route: Route) -> None:
        if route.request.url.startswith(live_server):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    page.goto(f"{live_server}/guide")
    page.wait_for_selector(".md-content h1", timeout=30_000)
    assert page.locator(".md-content h1").first.inner_text().startswith("attnlab")
    assert blocked == [], blocked  # no web font, no script from elsewhere
    assert page_log.console_errors == []  # an inline script the policy refused would be told here
    page.locator(".md-nav__link", has_text="The REST API").first.click()
    page.wait_for_selector("h1:has-text('The REST API')", timeout=30_000)
    # the search index is fetched and read in the guide's own worker
    page.locator("input.md-search__input").click()
    # a query typed while the worker still builds the index is not searched again: wait for it to be ready
    page.wait_for_selector(".md-search-result__meta:has-text('Type to start searching')", timeout=30_000)
    page.locator("input.md-search__input").press_sequentially("ATTNLAB_MAX_TOKENS")  # the search reads keys
    page.wait_for_selector(".md-search-result__item", timeout=30_000)
    assert blocked == []
    assert page_log.external() == []
    assert page_log.console_errors == []
    assert page_log.page_errors == []
