"""The compose topology on loopback: attnlab replicas as processes, and Debian's nginx in front of them with
the shipped deploy/nginx.conf, rewritten only in its upstream server address and its listen address.

Used by tests/test_topology.py and bench/load.py. nginx runs as a child process in the foreground, with its
prefix, temporary files, pid file and logs in a directory of the caller's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import ROOT, free_port, wait_healthy

NGINX_CONF = ROOT / "deploy" / "nginx.conf"
UPSTREAM_SERVER = re.compile(r"^(\s*)server attnlab:8000( [^;]*)?;$", re.MULTILINE)
LISTEN = re.compile(r"^(\s*)listen 80;$", re.MULTILINE)


def nginx_binary() -> str | None:
    """Debian installs nginx in /usr/sbin, which is not on every user's PATH."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/sbin"])
    return shutil.which("nginx", path=path)


def loopback_config(upstream_ports: list[int], listen_port: int, text: str | None = None) -> str:
    """The shipped config with each upstream's one server line repeated per loopback replica (same parameters)
    and its listen address on loopback. Anything else in the file is used as shipped."""
    text = NGINX_CONF.read_text() if text is None else text
    upstreams = re.findall(r"^\s*upstream \w+ \{", text, re.MULTILINE)
    servers = UPSTREAM_SERVER.findall(text)
    assert servers and len(servers) == len(upstreams), (
        f"deploy/nginx.conf must have one 'server attnlab:8000 ...;' line per upstream, found {servers}"
    )

    def lines(m: re.Match[str]) -> str:
        indent, params = m.group(1), m.group(2) or ""
        return "\n".join(f"{indent}server 127.0.0.1:{port}{params};" for port in upstream_ports)

    text = UPSTREAM_SERVER.sub(lines, text)
    assert len(LISTEN.findall(text)) == 1, "deploy/nginx.conf must have one 'listen 80;' line"
    return LISTEN.sub(lambda m: f"{m.group(1)}listen 127.0.0.1:{listen_port};", text)


class Replica:
    """`attnlab serve` on a fixed loopback port, as its own process, that can be killed and started again on the
    same port (nginx's upstream names the port). Output goes to a log file (a pipe nobody reads would fill)."""

    def __init__(self, log: Path, models: str = "random", env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.models = models
        self.env = {**os.environ, "ATTNLAB_DEVICE": "cpu", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "server", "serve", "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*cmd, "--models", self.models], cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )

    def wait_healthy(self, timeout: float = 120) -> None:
        assert self.proc is not None
        wait_healthy(self.proc, self.base, self.tail, timeout)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown, connections reset, as when a container dies."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)  # in case it was stopped
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def requests_served(self, route: str = "/api/attention") -> float:
        """attnlab_requests_total for one route, from this replica's own /metrics."""
        text = httpx.get(f"{self.base}/metrics", timeout=5).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "attnlab_requests"
            for sample in family.samples
            if sample.name == "attnlab_requests_total" and sample.labels.get("route") == route
        )

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


@contextmanager
def replicas(workdir: Path, count: int, models: str = "random", **env: str) -> Iterator[list[Replica]]:
    """`count` attnlab processes on loopback, started together, each healthy before this yields."""
    started = [Replica(workdir / f"attnlab-{i}.log", models, env) for i in range(count)]
    try:
        for r in started:
            r.start()
        for r in started:
            r.wait_healthy()
        yield started
    finally:
        for r in started:
            r.stop()


class Nginx:
    """Paths and URL of a running loopback nginx."""

    def __init__(self, workdir: Path, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.workdir = workdir
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.proc = proc
        self.access_log = workdir / "access.log"  # the config logs to /dev/stdout, which is this file
        self.error_log = workdir / "error.log"  # and errors to stderr, which is this one

    def tail(self) -> str:
        return self.error_log.read_text(errors="replace")[-4000:] if self.error_log.exists() else ""


@contextmanager
def nginx(workdir: Path, upstream_ports: list[int]) -> Iterator[Nginx]:
    """Debian's nginx with the shipped config in front of the given loopback ports, in the foreground, as a
    child of this process; yields once it answers. Raises when nginx is not installed."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed: run 'sudo apt-get install nginx' (make test does it as root)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = workdir / "nginx.conf"
    conf.write_text(loopback_config(upstream_ports, port))
    # Workers run as this process's user (as root, nginx would switch them to nobody, who cannot enter a 0700
    # tmp dir); daemon off keeps nginx a child that dies with the test; the pid file stays in workdir too.
    directives = f"daemon off; pid {workdir / 'nginx.pid'};"
    if os.geteuid() == 0:
        directives += " user root;"
    cmd = [binary, "-p", f"{workdir}/", "-c", str(conf), "-e", str(workdir / "error.log"), "-g", directives]
    test = subprocess.run([*cmd, "-t"], capture_output=True, text=True, timeout=30)
    assert test.returncode == 0, f"nginx -t refused the loopback config:\n{test.stderr}"
    with (workdir / "access.log").open("ab") as out, (workdir / "error.log").open("ab") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
    running = Nginx(workdir, port, proc)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {proc.returncode}:\n{running.tail()}")
            try:
                httpx.get(f"{running.base}/api/health", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not answer within 30 s:\n{running.tail()}") from None
                time.sleep(0.05)
        yield running
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful: finish the requests in flight, then exit
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
