"""The training lab's run store: runs and snapshots in a database (server/trainstore/tables.py), migrated by Alembic
at start-up (server/trainstore/migrations), their tensors in files under the data directory."""

from server.trainstore.store import RunNotFound, RunRecord, SnapshotRecord, TrainStore, finite
from server.trainstore.tables import STATUSES, UNFINISHED

__all__ = ["STATUSES", "UNFINISHED", "RunNotFound", "RunRecord", "SnapshotRecord", "TrainStore", "finite"]
