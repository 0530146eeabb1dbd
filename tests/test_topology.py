"""The deployment topology without Docker: docker-compose.yml checked as data, and its nginx config run for real.

Debian's nginx runs the shipped deploy/nginx.conf (rewritten only in its upstream and listen addresses, see
tests/topology.py) in front of two `attnlab serve` processes on loopback. Requests must spread over both; a
replica killed while requests are inside it must cost no failed request (nginx retries them on the other); and
the replica, started again, must get traffic again. nginx missing is a failure, not a skip: `make test` installs
it as root.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.load import Request, check
from server.config import Settings
from tests.helpers import ROOT, assert_error, free_port, read_events, until
from tests.topology import (
    NGINX_CONF,
    UPSTREAM_SERVER,
    Nginx,
    Replica,
    loopback_config,
    nginx,
    nginx_binary,
    replicas,
)

COMPOSE = ROOT / "docker-compose.yml"
pytestmark = pytest.mark.timeout(120)


def body(i: int) -> dict[str, Any]:
    """A small random-model request whose first token names it, so an answer can be matched to its request."""
    return {"model": "random", "text": f"w{i} the cat sat", "options": {"d_model": 16, "heads": 2}}


def check_answer(resp: httpx.Response, i: int) -> None:
    assert resp.status_code == 200, (resp.status_code, resp.text[:300])
    result = resp.json()
    assert result["tokens"] == [f"w{i}", "the", "cat", "sat"]
    heads = result["layers"][0]["heads"]
    assert len(heads) == 2 and all(len(h["weights"]) == 4 and len(h["weights"][0]) == 4 for h in heads)


def interpolate(value: Any) -> str:
    """Compose's ${VAR:-default} with nothing set: the defaults."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))


# --- the compose file and the config, as data ---


def test_compose_runs_replicas_of_the_dockerfile_image_behind_the_shipped_nginx_config() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) == {"attnlab", "nginx", "postgres"}, set(services)

    app = services["attnlab"]
    build = app["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == ROOT / "Dockerfile"
    assert int(interpolate(app["deploy"]["replicas"])) >= 2
    assert "ports" not in app, "replicas publish no host port (they would clash); nginx is the way in"
    assert "container_name" not in app, "a fixed container name stops the service from scaling"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ATTNLAB_PORT=8000" in dockerfile and "EXPOSE 8000" in dockerfile
    assert [str(p) for p in app["expose"]] == ["8000"]
    assert "HEALTHCHECK" in dockerfile and "healthcheck" not in app, "the replicas use the image's healthcheck"

    # the training lab's runs: one PostgreSQL every replica shares, and one volume for the snapshots' files
    database = services["postgres"]
    env = {k: interpolate(v) for k, v in app["environment"].items()}
    url = env["ATTNLAB_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url, url
    name, user = database["environment"]["POSTGRES_DB"], database["environment"]["POSTGRES_USER"]
    assert url.endswith(f"/{name}") and f"//{user}:" in url, (url, database["environment"])
    password = interpolate(database["environment"]["POSTGRES_PASSWORD"])
    assert f":{password}@" in url, "the replicas log in with the database's own password"
    assert app["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "pg_isready" in database["healthcheck"]["test"]
    assert "ports" not in database, "the database is reached by the replicas only"
    data_dir = env["ATTNLAB_DATA_DIR"]
    assert any(v.split(":")[1] == data_dir for v in app["volumes"]), (data_dir, app["volumes"])
    assert set(compose["volumes"]) >= {v.split(":")[0] for v in app["volumes"] + database["volumes"]}
    assert f"install -d -o attnlab -g attnlab {data_dir}" in dockerfile, "the image's user owns the data directory"

    proxy = services["nginx"]
    mounts = [v.split(":") for v in proxy["volumes"]]
    assert ["./deploy/nginx.conf", "/etc/nginx/nginx.conf", "ro"] in mounts
    assert (ROOT / "deploy" / "nginx.conf").is_file()
    published = [interpolate(p).rsplit(":", 1) for p in proxy["ports"]]
    assert [container for _, container in published] == ["80"], published
    assert "listen 80;" in NGINX_CONF.read_text()
    assert proxy["depends_on"]["attnlab"]["condition"] == "service_healthy"
    assert proxy["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    command = proxy["command"]
    assert command[:3] == ["nginx", "-p", "/var/cache/nginx/"] and "daemon off;" in command


def test_starting_a_training_run_is_never_sent_twice() -> None:
    """Every POST but one is a pure computation that nginx may send to a second replica after the first took it;
    POST /api/train writes a run, so its location lets nginx try another replica only before one received it."""
    text = NGINX_CONF.read_text()
    block = re.search(r"location = /api/train \{(.*?)\n        \}", text, re.S)
    assert block, "a location of its own for POST /api/train"
    retries = re.search(r"proxy_next_upstream ([^;]*);", block.group(1))
    assert retries and "non_idempotent" not in retries.group(1), retries
    assert "non_idempotent" in text, "the other POSTs are still retried on another replica"


def test_nginx_body_limit_is_attnlabs() -> None:
    text = NGINX_CONF.read_text()
    size = re.search(r"client_max_body_size (\d+)m;", text)
    assert size, "client_max_body_size in megabytes"
    limit = Settings().max_body_bytes
    assert int(size.group(1)) * 1024 * 1024 == limit
    assert f"larger than {limit} bytes" in text


def test_loopback_config_differs_from_the_shipped_one_only_in_addresses() -> None:
    shipped = NGINX_CONF.read_text().splitlines()
    rendered = loopback_config([1111, 2222], 3333).splitlines()
    removed = [line.strip() for line in shipped if line not in rendered]
    added = [line.strip() for line in rendered if line not in shipped]
    (_, params), *_ = UPSTREAM_SERVER.findall(NGINX_CONF.read_text())
    assert "max_fails" in params, "the shipped server line's parameters are kept"
    upstreams = 2  # attnlab (least_conn) and attnlab_runs (by the run's name)
    assert removed == [f"server attnlab:8000{params};"] * upstreams + ["listen 80;"]
    added_servers = [f"server 127.0.0.1:{p}{params};" for p in (1111, 2222)] * upstreams
    assert added == [*added_servers, "listen 127.0.0.1:3333;"]
    with pytest.raises(AssertionError, match="one 'server attnlab:8000"):
        loopback_config([1111], 3333, text="upstream attnlab {\n    server other:8000;\n}")


# --- the topology, run ---


def require_nginx() -> None:
    """A missing nginx fails the topology tests: skipped, they would pass on any machine without it."""
    if nginx_binary() is None:
        pytest.fail("nginx is not installed: run 'sudo apt-get install nginx' (make test installs it as root)")


def test_no_replica_answering_is_a_503_in_attnlabs_shape(tmp_path: Path) -> None:
    require_nginx()
    with nginx(tmp_path / "nginx", [free_port(), free_port()]) as proxy:  # nothing listens on either
        resp = httpx.post(
            f"{proxy.base}/api/attention", json=body(0), headers={"X-Request-ID": "nobody-home"}, timeout=30
        )
    assert_error(resp, 503, None, "no attnlab replica answered")
    assert resp.headers["retry-after"] == "5"
    assert resp.headers["x-request-id"] == "nobody-home"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Replica], Nginx]]:
    require_nginx()
    workdir = tmp_path_factory.mktemp("topology")
    with replicas(workdir, 2, models="random") as pair, nginx(workdir / "nginx", [r.port for r in pair]) as proxy:
        yield pair, proxy


def access_log(proxy: Nginx) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proxy.access_log.read_text().splitlines() if line.strip()]


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_requests_spread_over_both_replicas(topology: tuple[list[Replica], Nginx]) -> None:
    pair, proxy = topology
    before = [r.requests_served() for r in pair]
    with httpx.Client(base_url=proxy.base, timeout=30) as client:
        for i in range(20):
            check_answer(client.post("/api/attention", json=body(i)), i)
    served = [r.requests_served() - b for r, b in zip(pair, before, strict=True)]
    assert sum(served) == 20, served
    assert min(served) >= 5, f"20 requests one at a time should spread over both replicas: {served}"


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_a_training_run_is_followed_alike_through_either_replica(topology: tuple[list[Replica], Nginx]) -> None:
    """Replicas sharing one run store: a run started through nginx trains on one replica; the other follows it
    from the store and ends with it."""
    pair, proxy = topology
    spec = {"task": "copy", "layers": 1, "heads": 2, "width": 16, "positions": 8, "steps": 4, "snapshot_every": 2}
    started = httpx.post(f"{proxy.base}/api/train", json={**spec, "batch": 2}, timeout=30)
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    for replica in pair:
        url = f"http://127.0.0.1:{replica.port}/api/train/{run_id}/events"
        with httpx.stream("GET", url, timeout=60) as resp:
            events = read_events(resp.iter_lines())
        assert events[-1] == ("end", {"status": "finished", "error": None}), (replica.port, events[-1])
        assert [d["step"] for k, d in events if k == "snapshot"] == [0, 2, 4], replica.port
    answered = httpx.post(f"{proxy.base}/api/attention", json={"model": f"train:{run_id}@4", "text": "the cat"})
    assert answered.status_code == 200, answered.text


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_request_id_passes_through_and_json_is_gzipped(topology: tuple[list[Replica], Nginx]) -> None:
    pair, proxy = topology
    with httpx.Client(base_url=proxy.base, timeout=30) as client:
        given = client.post("/api/attention", json=body(1), headers={"X-Request-ID": "topology-given-1"})
        check_answer(given, 1)
        assert given.headers["x-request-id"] == "topology-given-1"
        assert given.headers["content-encoding"] == "gzip"
        made = client.post("/api/attention", json=body(2))
        check_answer(made, 2)
        unkept = client.post("/api/attention", json=body(3), headers={"X-Request-ID": "not a token"})
        check_answer(unkept, 3)
    # without one, nginx makes the id, attnlab answers with it, and both log it
    rid = made.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid), rid
    assert re.fullmatch(r"[0-9a-f]{32}", unkept.headers["x-request-id"]), "an id attnlab would not keep is nginx's"
    # both log a request after answering it, so the lines may come a moment after the answers
    until(
        lambda: (
            {"topology-given-1", rid, unkept.headers["x-request-id"]} <= {e["request_id"] for e in access_log(proxy)}
        ),
        "nginx logs both request ids",
        10,
    )
    until(lambda: any(rid in r.log.read_text() for r in pair), "the replica that answered logs nginx's id", 10)


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_nginx_answers_its_own_errors_in_attnlabs_shape(topology: tuple[list[Replica], Nginx]) -> None:
    _, proxy = topology
    limit = Settings().max_body_bytes
    with httpx.Client(base_url=proxy.base, timeout=30) as client:
        headers = {"content-type": "application/json"}
        too_large = client.post("/api/attention", content=b" " * (limit + 1), headers=headers)
        assert_error(too_large, 413, "body", str(limit))
        # at the limit nginx lets it through, and attnlab judges it (here: not JSON)
        assert_error(client.post("/api/attention", content=b"{" * limit, headers=headers), 422, "body")
        assert client.get("/metrics").status_code == 404, "each replica's metrics are scraped from the replica"


@dataclass
class Stream:
    """Requests through nginx from a few threads, each answer checked, until stopped."""

    url: str
    threads: int = 4
    limit: int = 2000  # a bound on the traffic whatever happens
    done: list[tuple[int, str]] = field(default_factory=list)  # (request number, "ok" or what went wrong)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0
    going: threading.Event = field(default_factory=threading.Event)  # cleared: threads wait before their next request
    parked: int = 0  # threads waiting on `going`, none of their requests in flight

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self.stop.is_set():
                if not self.going.is_set():
                    with self.lock:
                        self.parked += 1
                    self.going.wait()
                    with self.lock:
                        self.parked -= 1
                with self.lock:
                    if self.counter >= self.limit:
                        return
                    i = self.counter = self.counter + 1
                try:
                    check_answer(client.post("/api/attention", json=body(i)), i)
                    outcome = "ok"
                except (AssertionError, httpx.HTTPError, ValueError) as err:
                    outcome = f"{type(err).__name__}: {err}"[:300]
                with self.lock:
                    self.done.append((i, outcome))
                self.stop.wait(0.05)  # pace each thread: the machine is shared, the traffic bounded

    def __enter__(self) -> Stream:
        self.going.set()
        self.workers = [threading.Thread(target=self.run, daemon=True) for _ in range(self.threads)]
        for w in self.workers:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.going.set()
        for w in self.workers:
            w.join(timeout=90)

    def wait_for(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.done) < count:
            assert time.monotonic() < deadline, f"only {len(self.done)} of {count} requests answered in {timeout} s"
            time.sleep(0.02)

    def park(self, timeout: float = 30) -> None:
        """Every thread's request answered and none sent until `resume`: the replicas hold no request of ours."""
        self.going.clear()
        until(lambda: self.parked == self.threads, f"all {self.threads} threads waiting, nothing in flight", timeout)

    def resume(self) -> None:
        self.going.set()

    def failures(self) -> list[tuple[int, str]]:
        with self.lock:
            return [d for d in self.done if d[1] != "ok"]


def unread_bytes(port: int) -> int:
    """Bytes waiting unread in the receive queues of TCP connections to a local port (Linux /proc/net/tcp)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text().splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            cols = line.split()
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port and cols[3] == "01":  # ESTABLISHED
                total += int(cols[4].split(":")[1], 16)
    return total


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_a_replica_killed_mid_run_costs_no_request_and_recovers(topology: tuple[list[Replica], Nginx]) -> None:
    pair, proxy = topology
    victim, survivor = pair
    log_start = len(access_log(proxy))
    with Stream(proxy.base) as stream:
        stream.wait_for(20)
        # Stop the victim first so that requests are provably inside it when it dies: nginx has sent them, they
        # sit unread in its sockets. SIGKILL then resets those connections, as when a container dies mid-request.
        # It is stopped idle: a request it had already read when stopped would count as busy in nginx's least_conn
        # forever, and with two such the other threads' requests would never tie with it and never be sent to it.
        # Idle, it ties with the other replica at the first request, and one of the first two is sent to it.
        stream.park()
        victim.signal(signal.SIGSTOP)
        stream.resume()
        try:
            until(lambda: unread_bytes(victim.port) > 0, "a request sent to the stopped replica", 20)
        finally:  # killed even when the wait fails: a replica left stopped would hang the module's next tests
            victim.kill()
        stream.wait_for(len(stream.done) + 40)
    sent = len(stream.done)
    failures = stream.failures()
    assert failures == [], f"{len(failures)} of {sent} requests failed: {failures[:5]}"

    # nginx's log: requests the victim had received were retried on the survivor and answered 200
    entries = access_log(proxy)[log_start:]
    victim_addr, survivor_addr = f"127.0.0.1:{victim.port}", f"127.0.0.1:{survivor.port}"
    retried = [e for e in entries if e["upstream"] == f"{victim_addr}, {survivor_addr}"]
    inside = [e for e in retried if int(e["upstream_bytes_sent"].split(",")[0]) > 0]
    assert inside, f"no request sent to the killed replica was retried: {retried[:3]}"
    assert all(e["status"] == 200 for e in retried), retried

    # started again on its port: healthy on its own, and back in nginx's rotation once fail_timeout has passed
    victim.start()
    victim.wait_healthy(timeout=60)
    probes: list[int] = []
    with httpx.Client(base_url=proxy.base, timeout=30) as client:

        def back_in_rotation() -> bool:
            i = 100_000 + len(probes)
            probes.append(i)
            check_answer(client.post("/api/attention", json=body(i)), i)
            return victim.requests_served() > 0

        until(back_in_rotation, "the restarted replica gets requests through nginx", 30)
    print(
        f"\n{sent} requests through nginx while a replica was killed, 0 failed; {len(retried)} retried on the other "
        f"replica, {len(inside)} of them sent to the killed one before it died; back in rotation after "
        f"{len(probes)} more"
    )


def test_load_benchmark_refuses_wrong_answers() -> None:
    """bench/load.py counts an answer only when it is the one its request implies."""
    req = Request("random", body(3), ["w3", "the", "cat", "sat"], heads=2)
    head: dict[str, Any] = {"index": 0, "weights": [[0.25] * 4] * 4}
    layer = {"index": 0, "heads": [head, {**head, "index": 1}]}
    right = {"tokens": req.tokens, "layers": [layer]}
    assert check(req, 200, json.dumps(right).encode()) is None
    wrong = [
        (503, right),
        (200, {**right, "tokens": ["w4", "the", "cat", "sat"]}),
        (200, {**right, "layers": [{"index": 0, "heads": [head]}]}),
        (200, {**right, "layers": [{"index": 0, "heads": [head, {**head, "weights": [[1.0] * 3] * 4}]}]}),
        (200, {**right, "layers": [layer, layer]}),
    ]
    for status, result in wrong:
        assert check(req, status, json.dumps(result).encode()) is not None, (status, result)


@pytest.mark.slow  # the topology fixture starts two servers and nginx
def test_a_long_runs_requests_reach_its_replica_which_killed_costs_one_repost(
    topology: tuple[list[Replica], Nginx],
) -> None:
    """Every request about one run reaches the replica that holds it (nginx hashes the run's name); killed mid-zoom,
    the tiles answer 404 run_expired from the other replica, and the client posts the run again and zooms on."""
    pair, proxy = topology
    for r in pair:
        if r.proc is None or r.proc.poll() is not None:
            r.start()
            r.wait_healthy(timeout=60)
    run = {"model": "random", "text": " ".join(f"w{i}" for i in range(1500)), "options": {"heads": 2, "d_model": 16}}
    names = [f"zoom-run-{i:04d}" for i in range(8)]
    tile = "/api/runs/{}/tiles/0/1/1/0/0"
    with httpx.Client(base_url=proxy.base, timeout=60) as client:
        holders = {}
        for name in names:
            start = len(access_log(proxy))
            assert client.post("/api/runs", json=run, headers={"X-Attnlab-Run": name}).status_code == 200
            for _ in range(3):  # zooming: tiles and a row, by the name in the path
                assert client.get(tile.format(name)).status_code == 200
            assert client.get(f"/api/runs/{name}/rows/0/0/1499").status_code == 200
            logged = start + 5

            def all_logged(logged: int = logged) -> bool:
                return len(access_log(proxy)) >= logged

            until(all_logged, "nginx logged the requests", 10)
            used = {e["upstream"] for e in access_log(proxy)[start:]}
            assert len(used) == 1, f"{name}'s requests went to {used}"
            holders[name] = used.pop()
        by_port = {f"127.0.0.1:{r.port}": r for r in pair}
        assert len(set(holders.values())) == 2, f"eight names should spread over both replicas: {holders}"
        name = names[0]
        victim = by_port[holders[name]]
        before = client.get(tile.format(name)).json()["weights"]
        victim.kill()
        gone = client.get(tile.format(name))
        assert gone.status_code == 404 and gone.json()["error"]["code"] == "run_expired", gone.text[:300]
        assert client.post("/api/runs", json=run, headers={"X-Attnlab-Run": name}).status_code == 200
        again = client.get(tile.format(name))
        assert again.status_code == 200 and again.json()["weights"] == before  # the same run, made again
    victim.start()
    victim.wait_healthy(timeout=60)
