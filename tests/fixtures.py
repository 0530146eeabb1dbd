"""The servers and apps the suite runs, each configuration named once (as datasette's tests/fixtures.py does).

A real `attnlab serve` takes seconds to start, so the configurations that several modules use are started once per
session and shared. Sharing a server is safe for tests that read it, or that compare what they read before and
after their own requests; a test that fills a cache, counts metrics from zero, holds the compute slots or pins a
limit of its own starts its own server or app instead (`serve`, `uvicorn_here`, `make_client`).

An app in this process costs tens of milliseconds to build (every route's declared answers), more than most tests
that use one: a module's tests that check only the answers to their own requests share one per distinct settings
(`shared_client`, or a module-scoped `client`).

`STARTED` counts the server processes and apps the session started (every pytest-xdist worker's, summed); the terminal
summary prints it.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from tests.checkpoints import make_checkpoint
from tests.helpers import STARTED, serve

FAST_MODELS = "textbook,random,custom"
TRAINED_MODELS = "textbook,random,custom,minilm,induction"
# The limits the page's messages and fallbacks are tested against, pinned so that a change of the defaults does not
# quietly turn those tests into ones that never reach a limit.
LIMITS = {"ATTNLAB_MAX_TOKENS": "256", "ATTNLAB_MAX_RESULT_VALUES": "4000000"}


@dataclass(frozen=True)
class Config:
    """One way to run `attnlab serve`: its --models (with `{name}` for a checkpoint directory made for the session)
    and its ATTNLAB_* settings."""

    models: str
    env: dict[str, str] = field(default_factory=dict)
    about: str = ""


SERVERS: dict[str, Config] = {
    "live": Config(FAST_MODELS, LIMITS, "the fast models under the page's tested limits"),
    "trained": Config(TRAINED_MODELS, LIMITS, "the trained models too (minilm, induction), same limits"),
    "full_length": Config(
        TRAINED_MODELS,
        {"ATTNLAB_MAX_TOKENS": "512"},
        "the fast and trained models at MiniLM's full 512 positions with the default result limit: a long run holds "
        "every layer (under the pinned limits the page falls back to one layer); 512 is the default, so the guide's "
        "examples run here as against a server started with no settings",
    ),
    "checkpoint": Config(
        "textbook,mine={llama},oss={gpt_oss}",
        {},
        "textbook beside two tiny random checkpoints: a llama served as `mine`, and a gpt_oss served as `oss` (every "
        "head of its layers has a learned sink)",
    ),
    "unloadable": Config(
        "textbook,bad={bad},gone={gone},t5={t5}",
        {},
        "textbook beside three checkpoints it must refuse at start: weights only as a pickle, a directory that is not "
        "there, a family it does not read",
    ),
    "typed_pycode": Config(
        "textbook,given,pycode,digits",
        LIMITS,
        "the model that reads typed-in matrices, the trained code model and the trained image model digits (the "
        "Vision workspace)",
    ),
}


def start(name: str, **paths: Path) -> AbstractContextManager[str]:
    """`attnlab serve` in the configuration `name` (its `{...}` filled from `paths`); the context yields its URL."""
    config = SERVERS[name]
    return serve(config.models.format(**paths), **config.env)


@pytest.fixture(scope="session")
def live_server() -> Iterator[str]:
    with start("live") as base:
        yield base


@pytest.fixture(scope="session")
def trained_server() -> Iterator[str]:
    with start("trained") as base:
        yield base


@pytest.fixture(scope="session")
def full_length_server() -> Iterator[str]:
    with start("full_length") as base:
        yield base


@pytest.fixture(scope="session")
def llama_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random llama checkpoint (byte-level BPE, <s> before every text); tests copy it before changing it."""
    return make_checkpoint("llama", tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def checkpoint_server(llama_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    gpt_oss = make_checkpoint("gpt_oss", tmp_path_factory.mktemp("gpt_oss"))
    with start("checkpoint", llama=llama_checkpoint, gpt_oss=gpt_oss) as base:
        yield base


@dataclass(frozen=True)
class Unloadable:
    base: str  # the server's URL
    opened: Path  # the file the pickle's weights would create if anything unpickled them
    bad: Path  # the checkpoint whose weights are only a pickle


@pytest.fixture(scope="session")
def unloadable_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unloadable]:
    where = tmp_path_factory.mktemp("unloadable")
    bad = make_checkpoint("gpt2", where / "bad")
    (bad / "model.safetensors").unlink()  # weights only as a pickle, as older checkpoints ship them
    opened = where / "unpickled"
    (bad / "pytorch_model.bin").write_bytes(pickle.dumps(Trap(opened)))
    t5 = where / "t5"
    t5.mkdir()
    (t5 / "config.json").write_text('{"model_type": "t5"}')
    with start("unloadable", bad=bad, gone=where / "nowhere", t5=t5) as base:
        yield Unloadable(base, opened, bad)


class Trap:
    """Unpickled, it creates the file `opened`."""

    def __init__(self, opened: Path) -> None:
        self.opened = opened

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.opened,))


@pytest.fixture(scope="session")
def typed_pycode_server() -> Iterator[str]:
    with start("typed_pycode") as base:
        yield base


# ---- apps in this process ----------------------------------------------------------------------------------------


def settings_for(**overrides: Any) -> Settings:
    """Settings for a test app: CPU, the fast models, any setting overridden by keyword."""
    # TestClient sends Host: testserver, which a real deployment's allow-list would not hold
    values: dict[str, Any] = {"device": "cpu", "models": FAST_MODELS, "allowed_hosts": "testserver", **overrides}
    return Settings(**values)


@contextmanager
def make_app_client(settings: Settings | None = None, **overrides: Any) -> Iterator[TestClient]:
    """A real app with its lifespan run, for `settings` or else `settings_for(**overrides)`. Module fixtures call it
    directly; tests take the `make_client` fixture."""
    STARTED["apps"] += 1
    with TestClient(create_app(settings or settings_for(**overrides))) as client:
        yield client


MakeClient = Callable[..., AbstractContextManager[TestClient]]


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    return settings_for


@pytest.fixture
def make_client() -> MakeClient:
    return make_app_client


@pytest.fixture
def client() -> Iterator[TestClient]:
    with make_app_client() as c:
        yield c


@pytest.fixture(scope="module")
def shared_client() -> Iterator[Callable[..., TestClient]]:
    """`shared_client(**overrides)`: an app for `settings_for(**overrides)`, built the first time a test of the module
    asks for those settings and shared by the module's tests that ask for the same. For tests that check only the
    answers to their own requests, which read no state of the app (no metric, cache or slot count): a fresh app for
    each would check nothing more, and building one costs more than most such tests."""
    with ExitStack() as stack:
        made: dict[str, TestClient] = {}

        def get(**overrides: Any) -> TestClient:
            key = repr(sorted(overrides.items()))
            if key not in made:
                made[key] = stack.enter_context(make_app_client(**overrides))
            return made[key]

        yield get


class Through(httpx.BaseTransport):
    """attnlab.Client's requests answered by a TestClient's app (its path and query, body and headers)."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = request.url.raw_path.decode("ascii")
        content = request.read()  # a multipart body (an image sent as a file) is a stream until read
        got = self.client.request(request.method, target, content=content, headers=request.headers)
        return httpx.Response(got.status_code, headers=got.headers, content=got.content)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: its counts go to the controller, which prints the sum
        workeroutput["attnlab_started"] = dict(STARTED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    STARTED.update(getattr(node, "workeroutput", {}).get("attnlab_started", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counts: Counter[str] = STARTED
    terminalreporter.write_line(
        f"attnlab test servers: {counts['processes']} processes, {counts['threads']} in-process, {counts['apps']} apps"
    )
