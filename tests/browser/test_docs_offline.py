"""/docs and /redoc draw the API reference with every request answered by attnlab itself (no CDN, no fonts)."""

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
    # nothing reached the network: ReDoc's footer asks for its logo from its own CDN, and the page's
    # Content-Security-Policy (img-src 'self' data:) refuses that before any connection is made
    assert blocked == []
    assert [u for u in page_log.external() if "cdn.redoc.ly/redoc/logo" not in u] == []
    assert page_log.page_errors == []
