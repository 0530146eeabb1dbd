"""Debian's PostgreSQL for the run store's tests: a throwaway cluster in a temporary directory, on a unix socket only.

initdb and postgres refuse to run as root, so as root they run as the `postgres` user the package creates (the
directory handed to it). Missing is a failure, not a skip: `make test` installs the package as root.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.helpers import until


def postgres_bin() -> Path:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run 'sudo apt-get install postgresql' (make test does it)")
    return Path(found[-1]).parent


def as_owner() -> dict[str, str]:
    """Popen's keywords that run a command as the postgres user when this process is root (initdb and postgres
    refuse root); the process started is the command itself, so a signal sent to it reaches postgres."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@contextmanager
def postgres() -> Iterator[Callable[[], str]]:
    """A fresh PostgreSQL cluster; yields a function that creates an empty database in it and returns its
    SQLAlchemy URL (psycopg 3)."""
    bindir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="attnlab-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, log = root / "data", root / "server.log"
    try:
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            cwd=root,
            **as_owner(),
        )
        options = ["-c", "listen_addresses=", "-c", f"unix_socket_directories={root}", "-c", "fsync=off"]
        with open(log, "wb") as out:
            cmd = [str(bindir / "postgres"), "-D", str(data), *options]
            proc = subprocess.Popen(cmd, stdout=out, stderr=out, cwd=root, **as_owner())
        try:
            dsn = f"host={root} user=postgres dbname=postgres"

            def ready() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"postgres exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
                try:
                    psycopg.connect(dsn).close()
                except psycopg.OperationalError:
                    return False
                return True

            until(ready, f"postgres accepts connections on {root} (its log: {log})", 60)
            numbers = itertools.count()

            def database() -> str:
                name = f"attnlab{next(numbers)}"
                with psycopg.connect(dsn, autocommit=True) as connection:
                    connection.execute(f"CREATE DATABASE {name}")
                return f"postgresql+psycopg://postgres@/{name}?host={root}"

            yield database
        finally:
            proc.send_signal(signal.SIGINT)  # a fast shutdown: clients still connected are cut off
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    finally:
        shutil.rmtree(root, ignore_errors=True)
