"""The run store's schema brought up to date at start-up, by Alembic, from the migrations shipped in this package:
no alembic.ini, no command to run."""

from __future__ import annotations

import contextlib
import fcntl
import threading
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, text

MIGRATIONS = Path(__file__).with_name("migrations")


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


IN_PROCESS = threading.Lock()
# PostgreSQL's advisory lock that the servers sharing one database take while they migrate it (any fixed number)
MIGRATION_LOCK = 0x617474_6E6C6162  # "attnlab"


def upgrade(engine: Engine) -> None:
    """Every migration not yet applied to `engine`'s database, in one transaction (from empty: the whole schema).

    Replicas that start together migrate one at a time: the others wait, then find the schema up to date (without
    the lock, two would each find no table and the second's CREATE TABLE would fail its start-up)."""
    cfg = config()
    # alembic's `context` and `op` are module-wide: one migration at a time in this process, too
    with IN_PROCESS, one_at_a_time(engine), engine.begin() as connection:
        lock(connection)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


@contextlib.contextmanager
def one_at_a_time(engine: Engine) -> Iterator[None]:
    """For a SQLite file: a lock on a file beside it, held while the schema is migrated (SQLite's own lock is
    taken only at the first write, after each has read the schema's revision)."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.migrate-lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def lock(connection: Connection) -> None:
    """For PostgreSQL: the advisory lock, held until this transaction ends."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})


def revision(engine: Engine) -> str | None:
    """The schema's revision in `engine`'s database (None before the first migration)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
