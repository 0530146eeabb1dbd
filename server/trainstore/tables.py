"""The run store's tables: one row a training run, one row a snapshot kept of it.

A run's spec is the TrainSpec it was started with (engine/trainlab/spec.py) as JSON; a snapshot's measures are the
measures the engine wrote at that step (engine/trainlab/snapshot.py), and its tensors lie in `directory`, a path
relative to the data directory (ATTNLAB_DATA_DIR), never absolute: the data directory can move.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# what a run can be: queued (waiting for its compute slot), running, and the four ends
STATUSES = ("queued", "running", "finished", "cancelled", "failed", "interrupted")
UNFINISHED = ("queued", "running")


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "train_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the server that trains it (ATTNLAB_INSTANCE): at start-up a server marks only its own unfinished runs
    # interrupted, so replicas sharing one database leave each other's runs alone
    owner: Mapped[str] = mapped_column(String(200))
    # a cancel asked of a replica that does not train the run: its own replica reads it at the next snapshot
    stop_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    snapshots: Mapped[list[SnapshotRow]] = relationship(
        back_populates="run", cascade="all, delete-orphan", passive_deletes=True, order_by="SnapshotRow.step"
    )


class SnapshotRow(Base):
    __tablename__ = "train_snapshots"

    run_id: Mapped[str] = mapped_column(ForeignKey("train_runs.id", ondelete="CASCADE"), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    measures: Mapped[dict[str, Any]] = mapped_column(JSON)
    directory: Mapped[str] = mapped_column(String(400))  # relative to the data directory
    run: Mapped[RunRow] = relationship(back_populates="snapshots")
