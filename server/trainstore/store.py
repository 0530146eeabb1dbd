"""TrainStore: the training runs kept, in a database (SQLAlchemy 2; SQLite by default, PostgreSQL by URL), with each
snapshot's files (the checkpoint directory the engine writes) under the data directory.

    data_dir/
      attnlab.db                      the default database (ATTNLAB_DATABASE_URL names another)
      runs/RUN/step-000025/           one snapshot's checkpoint directory (engine/trainlab/snapshot.py Snapshot.write)

Every method is one short transaction, safe to call from any thread: the training threads add snapshots while
the routes read.
"""

from __future__ import annotations

import builtins
import math
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, selectinload, sessionmaker

from server.trainstore.migrate import upgrade
from server.trainstore.tables import STATUSES, UNFINISHED, RunRow, SnapshotRow

RUNS = "runs"  # the runs' files, under the data directory


class RunNotFound(LookupError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no training run {run_id!r} is kept here")
        self.run_id = run_id


@dataclass(frozen=True)
class SnapshotRecord:
    step: int
    measures: dict[str, Any]
    directory: Path  # absolute: under the store's data directory


@dataclass(frozen=True)
class RunRecord:
    id: str
    name: str
    spec: dict[str, Any]
    status: str
    created: datetime
    updated: datetime
    error: str | None
    owner: str
    stop_requested: bool
    snapshots: tuple[SnapshotRecord, ...] = ()  # with their measures: from get() only
    steps: tuple[int, ...] = ()  # its snapshots' steps, in order: from list() and get()

    @property
    def finished(self) -> bool:
        return self.status not in UNFINISHED

    def snapshot(self, step: int) -> SnapshotRecord | None:
        return next((s for s in self.snapshots if s.step == step), None)


def finite(value: Any) -> Any:
    """`value` with every float that is not finite (a diverged loss) as None: JSON has no NaN, and PostgreSQL's json
    type refuses one."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def now() -> datetime:
    return datetime.now(UTC)


def utc(stamp: datetime) -> datetime:
    """A stored time as UTC with its offset: SQLite gives back a naive value for a timezone-aware column, and an
    answer's `created` and `updated` are RFC 3339 date-times, which carry an offset."""
    return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)


def open_engine(url: str) -> Engine:
    """An engine for `url`; SQLite with foreign keys on (its deletes cascade as PostgreSQL's do) and a wait for the
    file's lock rather than an error when two threads write at once."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def foreign_keys(connection: Any, _record: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


class TrainStore:
    """The runs and their snapshots. `owner` names this server (ATTNLAB_INSTANCE) in the runs it starts."""

    def __init__(self, url: str, data_dir: Path, owner: str) -> None:
        self.data_dir = data_dir
        self.owner = owner
        data_dir.mkdir(parents=True, exist_ok=True)
        self.engine = open_engine(url)
        upgrade(self.engine)  # the schema from the migrations shipped in server/trainstore/migrations
        self._session = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    # ---- files ----

    def run_dir(self, run_id: str) -> Path:
        return self.data_dir / RUNS / run_id

    def snapshot_dir(self, run_id: str, step: int) -> Path:
        return self.run_dir(run_id) / f"step-{step:06d}"

    # ---- runs ----

    def create(self, name: str, spec: dict[str, Any]) -> RunRecord:
        """A new run, queued, under a fresh id (never one a deleted run had)."""
        stamp = now()
        row = RunRow(
            id=secrets.token_hex(6),
            name=name,
            spec=finite(spec),
            status="queued",
            created=stamp,
            updated=stamp,
            error=None,
            owner=self.owner,
            stop_requested=False,
        )
        with self._session.begin() as session:
            session.add(row)
        return self.get(row.id)

    def set_status(self, run_id: str, status: str, error: str | None = None) -> None:
        assert status in STATUSES, status
        with self._session.begin() as session:
            row = self._row(session, run_id)
            row.status = status
            row.error = error
            row.updated = now()

    def finish(self, run_id: str, status: str, error: str | None = None) -> None:
        """The run's end: finished, cancelled, failed (with `error`) or interrupted."""
        assert status not in UNFINISHED, status
        self.set_status(run_id, status, error)

    def add_snapshot(self, run_id: str, step: int, measures: dict[str, Any], directory: Path) -> SnapshotRecord:
        """A snapshot whose files the engine has written in `directory` (under the data directory)."""
        relative = directory.resolve().relative_to(self.data_dir.resolve())
        with self._session.begin() as session:
            row = self._row(session, run_id)
            row.updated = now()
            session.add(SnapshotRow(run_id=run_id, step=step, measures=finite(measures), directory=str(relative)))
        return SnapshotRecord(step, finite(measures), self.data_dir / relative)

    def list(self) -> list[RunRecord]:
        """Every run, newest first, with its snapshots' steps (not their measures)."""
        with self._session() as session:
            rows = session.scalars(select(RunRow).order_by(RunRow.created.desc(), RunRow.id)).all()
            steps: dict[str, builtins.list[int]] = {}
            for run_id, step in session.execute(
                select(SnapshotRow.run_id, SnapshotRow.step).order_by(SnapshotRow.step)
            ):
                steps.setdefault(run_id, []).append(step)
            return [self._record(row, with_snapshots=False, steps=steps.get(row.id, [])) for row in rows]

    def get(self, run_id: str) -> RunRecord:
        """The run with its snapshots so far, in step order; RunNotFound when there is none."""
        with self._session() as session:
            query = select(RunRow).where(RunRow.id == run_id).options(selectinload(RunRow.snapshots))
            row = session.scalars(query).one_or_none()
            if row is None:
                raise RunNotFound(run_id)
            return self._record(row, with_snapshots=True)

    def rename(self, run_id: str, name: str) -> RunRecord:
        with self._session.begin() as session:
            row = self._row(session, run_id)
            row.name = name
            row.updated = now()
        return self.get(run_id)

    def request_stop(self, run_id: str) -> None:
        with self._session.begin() as session:
            self._row(session, run_id).stop_requested = True

    def stop_requested(self, run_id: str) -> bool:
        """Whether a cancel was asked of the run through another replica (request_stop)."""
        with self._session() as session:
            flag = session.scalar(select(RunRow.stop_requested).where(RunRow.id == run_id))
            return bool(flag)

    def delete(self, run_id: str) -> None:
        """The run, its snapshots' rows and its files."""
        with self._session.begin() as session:
            session.delete(self._row(session, run_id))
        shutil.rmtree(self.run_dir(run_id), ignore_errors=True)

    def interrupt_unfinished(self) -> builtins.list[str]:
        """Every run of this server's still queued or running (its server stopped under it) marked interrupted,
        its snapshots kept; the ids marked. Called once at start-up, before this server starts any run."""
        with self._session.begin() as session:
            query = select(RunRow.id).where(RunRow.status.in_(UNFINISHED), RunRow.owner == self.owner)
            ids = list(session.scalars(query).all())
            if ids:
                message = "the server stopped while this run was unfinished; its snapshots so far are kept"
                session.execute(
                    update(RunRow).where(RunRow.id.in_(ids)).values(status="interrupted", error=message, updated=now())
                )
        return ids

    # ---- helpers ----

    def _row(self, session: Session, run_id: str) -> RunRow:
        row = session.get(RunRow, run_id)
        if row is None:
            raise RunNotFound(run_id)
        return row

    def _record(self, row: RunRow, *, with_snapshots: bool, steps: Iterable[int] = ()) -> RunRecord:
        snapshots = (
            tuple(SnapshotRecord(s.step, s.measures, self.data_dir / s.directory) for s in row.snapshots)
            if with_snapshots
            else ()
        )
        return RunRecord(
            id=row.id,
            name=row.name,
            spec=row.spec,
            status=row.status,
            created=utc(row.created),
            updated=utc(row.updated),
            error=row.error,
            owner=row.owner,
            stop_requested=row.stop_requested,
            snapshots=snapshots,
            steps=tuple(s.step for s in snapshots) if with_snapshots else tuple(steps),
        )
