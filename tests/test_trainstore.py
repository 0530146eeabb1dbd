"""The training lab's run store (server/trainstore/) against SQLite and a real PostgreSQL (Debian's, started by this
module as tests/test_topology.py starts nginx; missing is a failure): the schema migrated from empty, runs and
snapshots kept, renamed, listed and deleted with their files, and a store reopened after its server died mid-run
marking that run interrupted with its snapshots kept."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect

from server.trainstore import RunNotFound, TrainStore
from server.trainstore.migrate import revision
from tests.postgres import postgres

MakeStore = Callable[..., TrainStore]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Callable[[], str]]:
    with postgres() as database:
        yield database


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database's URL, of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    new_database: Callable[[], str] = request.getfixturevalue("cluster")
    return new_database()


@pytest.fixture
def make_store(database: str, tmp_path: Path) -> Iterator[MakeStore]:
    opened: list[TrainStore] = []

    def make(owner: str = "here") -> TrainStore:
        store = TrainStore(database, tmp_path / "data", owner)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def write_snapshot(store: TrainStore, run_id: str, step: int, loss: float) -> Path:
    """A snapshot's directory as the engine writes one (a file in it), and its row."""
    directory = store.snapshot_dir(run_id, step)
    directory.mkdir(parents=True)
    (directory / "measures.json").write_text(json.dumps({"step": step, "loss": loss}))
    store.add_snapshot(run_id, step, {"step": step, "loss": loss, "entropy": [[1.5, 0.25]]}, directory)
    return directory


def test_the_schema_is_migrated_from_empty(make_store: MakeStore) -> None:
    store = make_store()
    assert revision(store.engine) == "0001"
    tables = set(inspect(store.engine).get_table_names())
    assert {"train_runs", "train_snapshots", "alembic_version"} <= tables
    again = make_store()  # opening an up-to-date database migrates nothing and keeps what it holds
    assert revision(again.engine) == "0001"


def test_servers_starting_together_migrate_one_at_a_time(database: str, tmp_path: Path) -> None:
    """Replicas that start at once on an empty database: each opens it, none fails on a table another made."""
    gate = threading.Barrier(4)
    outcomes: list[BaseException | None] = []

    def open_store() -> None:
        gate.wait()
        try:
            TrainStore(database, tmp_path / "data", "replica").close()
            outcomes.append(None)
        except BaseException as err:
            outcomes.append(err)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes == [None] * 4, outcomes


def test_a_run_keeps_its_spec_status_and_snapshots(make_store: MakeStore) -> None:
    store = make_store()
    spec = {"task": "copy", "layers": 1, "lr": 0.001, "causal": False}
    run = store.create("copy, one layer", spec)
    assert run.status == "queued" and run.spec == spec and run.snapshots == ()
    store.set_status(run.id, "running")
    first = write_snapshot(store, run.id, 0, 2.5)
    write_snapshot(store, run.id, 25, 1.25)
    store.add_snapshot(run.id, 50, {"loss": math.nan, "grad_norm": {"embed": math.inf}}, first.parent / "x")
    assert not store.stop_requested(run.id)
    store.request_stop(run.id)  # a cancel asked through another replica, read by the one training it
    assert store.stop_requested(run.id) and make_store("another replica").stop_requested(run.id)
    store.finish(run.id, "finished")
    kept = store.get(run.id)
    assert kept.status == "finished" and kept.error is None
    assert [s.step for s in kept.snapshots] == [0, 25, 50]
    assert kept.snapshots[1].measures == {"step": 25, "loss": 1.25, "entropy": [[1.5, 0.25]]}
    assert kept.snapshots[0].directory == first
    # JSON has no NaN: a diverged loss is kept as null, never refused (PostgreSQL's json refuses NaN)
    assert kept.snapshots[2].measures == {"loss": None, "grad_norm": {"embed": None}}
    assert kept.snapshot(25) is not None and kept.snapshot(30) is None
    # times come back in UTC with their offset from either database (SQLite keeps none): RFC 3339 in every answer
    assert kept.created.utcoffset() == timedelta(0) and kept.updated.utcoffset() == timedelta(0)
    assert kept.created <= kept.updated


def test_runs_are_listed_renamed_and_deleted_with_their_files(make_store: MakeStore) -> None:
    store = make_store()
    a = store.create("a", {"task": "copy"})
    b = store.create("b", {"task": "reverse"})
    directory = write_snapshot(store, b.id, 0, 1.0)
    assert {r.id for r in store.list()} == {a.id, b.id}
    assert store.rename(b.id, "reverse, 2 layers").name == "reverse, 2 layers"
    assert store.get(b.id).name == "reverse, 2 layers"
    store.delete(b.id)
    assert not directory.exists() and not store.run_dir(b.id).exists()
    assert [r.id for r in store.list()] == [a.id]
    with pytest.raises(RunNotFound):
        store.get(b.id)
    for act in (lambda: store.rename(b.id, "x"), lambda: store.delete(b.id), lambda: store.finish(b.id, "failed")):
        with pytest.raises(RunNotFound):
            act()
    # no snapshot row of the deleted run is left behind (the delete cascades)
    with store.engine.connect() as connection:
        rows = connection.exec_driver_sql("SELECT count(*) FROM train_snapshots").scalar()
    assert rows == 0


def test_a_store_reopened_after_a_crash_marks_its_runs_interrupted(make_store: MakeStore) -> None:
    crashed = make_store("replica-a")
    running = crashed.create("mid-run", {"task": "induction"})
    crashed.set_status(running.id, "running")
    write_snapshot(crashed, running.id, 0, 3.0)
    write_snapshot(crashed, running.id, 25, 2.0)
    queued = crashed.create("waiting", {"task": "copy"})
    done = crashed.create("done", {"task": "copy"})
    crashed.finish(done.id, "finished")
    others = make_store("replica-b").create("another replica's", {"task": "copy"})
    # the server died: nothing was closed, no status written. Its replacement opens the same database and files.
    reopened = make_store("replica-a")
    assert sorted(reopened.interrupt_unfinished()) == sorted([running.id, queued.id])
    kept = reopened.get(running.id)
    assert kept.status == "interrupted" and kept.error and "stopped" in kept.error
    assert [s.step for s in kept.snapshots] == [0, 25]
    assert all((s.directory / "measures.json").is_file() for s in kept.snapshots)
    assert reopened.get(queued.id).status == "interrupted"
    assert reopened.get(done.id).status == "finished"
    assert reopened.get(others.id).status == "queued", "another replica's run is left to that replica"
    assert reopened.interrupt_unfinished() == []
