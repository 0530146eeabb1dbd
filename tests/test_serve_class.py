"""`attnlab serve --host 0.0.0.0` for a class: the students' browsers reach it by the machine's own address.

The server is started for real on a free port and reached through 127.0.0.1 with the Host header a student's browser
sends (this machine's non-loopback address); a name it does not know still gets the refusal, as a page a person can
act on when a browser asks and in the one JSON error shape when an API client does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from fastapi.testclient import TestClient

from server.hosts import answered_hosts, is_loopback, own_addresses, start_line
from tests.helpers import assert_error, serve_on

DEFAULTS = ["localhost", "127.0.0.1", "::1", "[::1]"]
HTML = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.fixture(scope="module")
def class_server() -> Iterator[tuple[str, int, Callable[[], str]]]:
    """A real `attnlab serve --host 0.0.0.0` on a free port: its loopback URL, the port and its log so far."""
    with serve_on("0.0.0.0", "textbook", unset=("ATTNLAB_ALLOWED_HOSTS",)) as served:
        yield served.base, served.port, served.output


def lan_address() -> str | None:
    """This machine's first non-loopback IP address (what a student types), or None on a machine without one."""
    return next((a for a in own_addresses("0.0.0.0") if a[0].isdigit() or a.startswith("[")), None)


def test_serve_class_answers_the_machines_own_address(class_server: tuple[str, int, Callable[[], str]]) -> None:
    base, port, _ = class_server
    ip = lan_address()
    if ip is None:
        pytest.skip("this machine has no non-loopback address: test_own_addresses_* check the list instead")
    page = httpx.get(f"{base}/", headers={**HTML, "host": f"{ip}:{port}"})
    assert page.status_code == 200, page.text[:300]
    assert "attnlab" in page.text
    health = httpx.get(f"{base}/api/health", headers={"host": f"{ip}:{port}"})
    assert health.status_code == 200, health.text[:300]


def test_serve_class_says_at_start_which_addresses_it_answers(class_server: tuple[str, int, Callable[[], str]]) -> None:
    _, port, output = class_server
    lines = [line for line in output().splitlines() if "ATTNLAB_ALLOWED_HOSTS" in line]
    assert len(lines) == 1, output()[-2000:]
    assert f"http://127.0.0.1:{port}" in lines[0]
    ip = lan_address()
    if ip is not None:
        assert f"http://{ip}:{port}" in lines[0], lines[0]


def test_serve_class_refuses_a_browser_with_a_page_that_says_what_to_set(
    class_server: tuple[str, int, Callable[[], str]],
) -> None:
    base, port, _ = class_server
    page = httpx.get(f"{base}/", headers={**HTML, "host": f"attnlab.school.example:{port}"})
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    assert "ATTNLAB_ALLOWED_HOSTS=localhost,127.0.0.1,attnlab.school.example" in page.text
    assert "attnlab.school.example" in page.text and "<h1>" in page.text
    for name in ("content-security-policy", "x-content-type-options", "referrer-policy"):
        assert name in page.headers
    # what the server answers is said only in its log: a rebinding page could read this one
    ip = lan_address()
    if ip is not None:
        assert ip not in page.text
    # an API client (no text/html), and anything under /api, keeps the one JSON error shape
    for path, headers in (("/", {}), ("/api/health", HTML)):
        resp = httpx.get(f"{base}{path}", headers={**headers, "host": "attnlab.school.example"})
        err = assert_error(resp, 400, "host", "ATTNLAB_ALLOWED_HOSTS")
        assert err["code"] == "bad_host"


def test_a_refused_page_escapes_the_name(make_client: Callable[..., AbstractContextManager[TestClient]]) -> None:
    with make_client() as c:
        page = c.get("/", headers={**HTML, "host": "<script>x</script>"})
    assert page.status_code == 400
    assert "<script>x" not in page.text and "&lt;script&gt;" in page.text


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_own_addresses_of_a_loopback_bind_are_the_defaults_alone(bind: str) -> None:
    assert is_loopback(bind)
    assert own_addresses(bind) == []
    assert answered_hosts(DEFAULTS, bind) == DEFAULTS


def test_own_addresses_of_a_wildcard_bind_are_the_machines() -> None:
    found = own_addresses("0.0.0.0")
    assert found, "0.0.0.0: at least the host name"
    assert not any(a in ("127.0.0.1", "::1", "[::1]", "0.0.0.0") for a in found), found
    assert not any(a.startswith("[") for a in found), found  # an IPv4 bind does not answer IPv6 names
    every = answered_hosts(DEFAULTS, "0.0.0.0")
    assert every[: len(DEFAULTS)] == DEFAULTS and set(found) <= set(every)


def test_own_addresses_of_a_specific_bind_include_it() -> None:
    assert own_addresses("192.0.2.77") == ["192.0.2.77"]
    assert own_addresses("fd00::77") == ["[fd00::77]"]


def test_a_server_bound_for_a_class_answers_what_it_lists(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    with make_client(host="0.0.0.0") as c:
        listed = c.app.state.allowed_hosts  # type: ignore[attr-defined]
        for name in own_addresses("0.0.0.0"):
            assert name in listed
            assert c.get("/api/health", headers={"host": f"{name}:8000"}).status_code == 200, name
        assert c.get("/api/health", headers={"host": "evil.test"}).status_code == 400
    line = start_line(listed, "0.0.0.0", 8000)
    assert line.count("ATTNLAB_ALLOWED_HOSTS") == 1
    assert all(f"http://{n}:8000" in line for n in own_addresses("0.0.0.0"))
