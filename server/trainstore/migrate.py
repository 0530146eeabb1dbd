"""The run store's schema brought up to date at start-up, by Alembic, from the migrations shipped in this package:
no alembic.ini, no command to run."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

MIGRATIONS = Path(__file__).with_name("migrations")


def config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine) -> None:
    """Every migration not yet applied to `engine`'s database, in one transaction (from empty: the whole schema)."""
    cfg = config()
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


def revision(engine: Engine) -> str | None:
    """The schema's revision in `engine`'s database (None before the first migration)."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
