"""Every example in the guide (docs/*.md) and in README.md runs against a live `attnlab serve`, so a wrong example
fails here.

What runs, by the block's fence:
- ```bash: curl commands (and comment lines), run as written by bash in a scratch folder, against one server on
  loopback for the whole module: `localhost:8000` and `127.0.0.1:8000` in the text become its address. Each curl
  must answer 2xx, and an answer that says it is JSON must parse. A comment line `# answers 422` (any status)
  right before a curl command says that this command shows a refusal: it must answer that status.
- ```python: run as a script (one fresh interpreter runs every block in turn, each in its own namespace) with this
  checkout's code, the same address replaced, and `/path/to/checkpoint` replaced by the checkpoint attnlab ships
  (engine/checkpoints/pycode); it must run to its end without an exception.
What does not run: commands that cannot run in a test (make, docker, a shell line with your own files) go in ```sh
or ```console blocks, and excerpts of code that do not run on their own in ```py or ```js blocks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow

SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
ANSWERS = re.compile(r"^#.*\banswers (\d{3})\b")
CHECKPOINT = ROOT / "engine" / "checkpoints" / "pycode"


@dataclass(frozen=True)
class Example:
    where: str  # file:line, the test's id
    lang: str
    code: str


def examples(lang: str) -> list[Example]:
    found = []
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m["lang"] == lang:
                body = "\n".join(line.removeprefix(m["indent"]) for line in m["body"].splitlines())
                line = text.count("\n", 0, m.start()) + 1
                found.append(Example(f"{source.relative_to(ROOT)}:{line}", lang, body))
    return found


def expected_statuses(code: str) -> list[int | None]:
    """One entry per curl command, in order: the status a `# answers NNN` comment before it names, else None (2xx)."""
    statuses: list[int | None] = []
    pending = None
    for line in code.splitlines():
        stripped = line.strip()
        if m := ANSWERS.match(stripped):
            pending = int(m[1])
        elif stripped.startswith("curl "):
            statuses.append(pending)
            pending = None
    return statuses


def on_server(code: str, base: str) -> str:
    address = base.removeprefix("http://")
    return code.replace("localhost:8000", address).replace("127.0.0.1:8000", address)


# Each curl call logs its answer's head and keeps a copy of its body; a counter file numbers the calls in order
# (a call in a pipeline runs in a subshell, where a shell variable would not count).
PRELUDE = """set -euo pipefail
echo 0 > "$LOG/count"
curl() {
  local n
  n=$(( $(cat "$LOG/count") + 1 ))
  echo "$n" > "$LOG/count"
  command curl --silent --show-error --dump-header "$LOG/$n.head" "$@" | tee -p "$LOG/$n.body"
}
"""


@pytest.fixture(scope="module")
def docs_server(full_length_server: str) -> str:
    """The session's server with every model the examples name, at the default limits (tests/fixtures.py's
    full_length: MiniLM's 512 positions are the default token limit)."""
    return full_length_server


def test_the_docs_have_examples_to_run() -> None:
    # a fence the pattern stopped finding would let every example go untested
    shell = examples("bash")
    assert len(shell) >= 6 and sum(len(expected_statuses(e.code)) for e in shell) >= 30
    assert len(examples("python")) >= 4
    for e in shell:
        first = next(line for line in e.code.splitlines() if line.strip() and not line.startswith("#"))
        assert first.startswith("curl "), f"{e.where}: a bash block holds curl commands; use ```sh for others"


@pytest.mark.parametrize("example", examples("bash"), ids=lambda e: e.where)
def test_curl_example(example: Example, docs_server: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    run = subprocess.run(
        ["bash", "-c", PRELUDE + on_server(example.code, docs_server)],
        cwd=tmp_path,
        env={**os.environ, "LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, f"{example.where}: exit {run.returncode}\n{run.stderr[-2000:]}"
    wanted = expected_statuses(example.code)
    calls = int((log / "count").read_text())
    assert calls == len(wanted), f"{example.where}: {calls} curl calls ran, the block has {len(wanted)}"
    for n, want in enumerate(wanted, start=1):
        head = (log / f"{n}.head").read_text(encoding="latin-1")
        status = int(re.findall(r"^HTTP/[\d.]+ (\d{3})", head, re.M)[-1])
        body = (log / f"{n}.body").read_bytes()
        if want is None:
            assert 200 <= status < 300, f"{example.where}, curl {n}: {status}\n{body[:1000]!r}"
        else:
            assert status == want, f"{example.where}, curl {n}: {status}, the example says {want}\n{body[:1000]!r}"
        if re.search(r"^content-type: application/json", head, re.M | re.I) and body:
            json.loads(body)


# The python examples run one after another in one fresh interpreter (each in its own namespace, as a script's
# __main__), so the imports and the models they load are paid once; each example's traceback comes back by its name.
RUNNER = """
import json, sys, traceback
failures = {}
for where, code in json.load(open(sys.argv[1])):
    try:
        exec(compile(code, where, "exec"), {"__name__": "__main__"})
    except BaseException:
        failures[where] = traceback.format_exc()
json.dump(failures, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def python_failures(docs_server: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each python example's traceback by its file:line, run against the module's server; absent when it ran."""
    work = tmp_path_factory.mktemp("python-examples")
    blocks = [
        (e.where, on_server(e.code, docs_server).replace("/path/to/checkpoint", str(CHECKPOINT)))
        for e in examples("python")
    ]
    (work / "examples.json").write_text(json.dumps(blocks))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTNLAB_DEVICE": "cpu", "ATTNLAB_REFERENCE": "0"}
    run = subprocess.run(
        [sys.executable, "-c", RUNNER, "examples.json", "failures.json"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    failures: dict[str, str] = json.loads((work / "failures.json").read_text())
    return failures


@pytest.mark.parametrize("example", examples("python"), ids=lambda e: e.where)
def test_python_example(example: Example, python_failures: dict[str, str]) -> None:
    assert example.where not in python_failures, f"{example.where}:\n{python_failures[example.where][-3000:]}"
