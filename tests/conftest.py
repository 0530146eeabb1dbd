from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from tests.helpers import serve

# every app the suite builds (and every server it starts) checks each JSON answer against its declared type: an
# answer that does not fit is a 500 naming the field (server/declare.py check_answer)
os.environ.setdefault("ATTNLAB_CHECK_ANSWERS", "1")
FAST_MODELS = "textbook,random,custom"


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    """Settings for a test app: CPU, the quick models, any limit overridden by keyword."""

    def make(**overrides: Any) -> Settings:
        # TestClient sends Host: testserver, which a real deployment's allow-list would not hold
        values: dict[str, Any] = {"device": "cpu", "models": FAST_MODELS, "allowed_hosts": "testserver", **overrides}
        return Settings(**values)

    return make


@pytest.fixture
def make_client(make_settings: Callable[..., Settings]) -> Callable[..., AbstractContextManager[TestClient]]:
    """A real app with its lifespan run, for settings built from the keywords."""

    @contextmanager
    def make(**overrides: Any) -> Iterator[TestClient]:
        with TestClient(create_app(make_settings(**overrides))) as client:
            yield client

    return make


@pytest.fixture
def client(make_client: Callable[..., AbstractContextManager[TestClient]]) -> Iterator[TestClient]:
    with make_client() as c:
        yield c


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    """`attnlab serve` in its own process on a free loopback port, for the whole session."""
    with serve(FAST_MODELS) as base:
        yield base
