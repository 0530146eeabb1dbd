"""What can be tested of the image without a Docker daemon: its entry command and healthcheck, run directly.

The Dockerfile is linted by hadolint in `make test`; here its CMD starts with the ENV it declares (port
moved to a free one), and its HEALTHCHECK command must then succeed against it and fail without it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import httpx

from tests.helpers import ROOT, free_port
from tests.test_layers import imported_packages

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instruction(name: str) -> str:
    """The text of one instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    found = [line[len(name) + 1 :].strip() for line in joined.splitlines() if line.startswith(name + " ")]
    assert found, f"no {name} in the Dockerfile"
    return found[-1]


def image_env() -> dict[str, str]:
    env = {}
    for line in re.sub(r"\\\n\s*", " ", DOCKERFILE).splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return env


def healthcheck_command() -> list[str]:
    cmd = instruction("HEALTHCHECK")
    exec_form = cmd[cmd.index("CMD ") + 4 :]
    argv: list[str] = json.loads(exec_form)
    return argv


def test_image_runs_as_a_non_root_user_and_declares_a_healthcheck() -> None:
    user = instruction("USER")
    assert user not in ("root", "0")
    assert "--interval" in instruction("HEALTHCHECK")
    assert json.loads(instruction("CMD")) == ["attnlab", "serve"]


def served_packages() -> set[str]:
    """The first-party packages the server runs on: server/ and what its sources import, transitively."""
    found, todo = set(), ["server"]
    while todo:
        package = todo.pop()
        found.add(package)
        for path in (ROOT / package).rglob("*.py"):
            todo += sorted(imported_packages(path.read_text(encoding="utf-8")) - found - set(todo))
    return found


def test_image_copies_every_package_the_server_imports() -> None:
    """The image installs what it COPYs: a package the server imports but the image lacks fails at start-up."""
    copied = {m.group(1) for m in re.finditer(r"^COPY (\w+) \./\1$", DOCKERFILE, flags=re.MULTILINE)}
    assert served_packages() == {"server", "engine", "wire"}
    assert served_packages() <= copied, sorted(served_packages() - copied)


def test_entry_command_serves_and_the_healthcheck_passes() -> None:
    port = free_port()
    env = {**os.environ, **image_env(), "ATTNLAB_PORT": str(port), "ATTNLAB_MODELS": "textbook"}
    env["ATTNLAB_HOST"] = "127.0.0.1"  # the image binds 0.0.0.0; here only loopback is ours to use
    env["ATTNLAB_DATA_DIR"] = os.environ["ATTNLAB_DATA_DIR"]  # the image's own is a directory inside it
    argv = json.loads(instruction("CMD"))
    exe = shutil.which(argv[0], path=str(ROOT / ".venv" / "bin")) or str(ROOT / ".venv" / "bin" / argv[0])
    health = healthcheck_command()
    health[0] = sys.executable if health[0] == "python" else health[0]

    # no server yet: the healthcheck must fail
    assert subprocess.run(health, env=env, capture_output=True, timeout=30).returncode != 0

    proc = subprocess.Popen([exe, *argv[1:]], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "the entry command did not serve within 60 s"
                time.sleep(0.2)
        result = subprocess.run(health, env=env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)
