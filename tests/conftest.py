from __future__ import annotations

import os

# every app the suite builds (and every server it starts) checks each JSON answer against its declared type: an
# answer that does not fit is a 500 naming the field (server/declare.py check_answer)
os.environ.setdefault("ATTNLAB_CHECK_ANSWERS", "1")

# the named servers and apps, and the factories for the rest
pytest_plugins = ["tests.fixtures"]

# the training lab's runs (ATTNLAB_DATA_DIR: its database and snapshots) kept in a directory of the session's own,
# never in the home directory of whoever runs the suite. Each pytest-xdist worker (PYTEST_XDIST_WORKER) makes its own
# although it inherits the directory its controller made: two workers' servers on one database list each other's
# runs in the training lab's kept runs.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if "ATTNLAB_DATA_DIR" not in os.environ or _worker:
    import atexit
    import shutil
    import tempfile

    _data_dir = tempfile.mkdtemp(prefix=f"attnlab-data-{_worker or 'main'}-")
    os.environ["ATTNLAB_DATA_DIR"] = _data_dir
    atexit.register(shutil.rmtree, _data_dir, True)


def pytest_collection_modifyitems(config: object, items: list) -> None:
    """Tests marked `cuda` run only with ATTNLAB_TEST_CUDA set (on a machine with a GPU, where they must pass);
    elsewhere they are deselected: not run, and not reported as skipped or passed."""
    if os.environ.get("ATTNLAB_TEST_CUDA"):
        return
    kept = [item for item in items if item.get_closest_marker("cuda") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])  # type: ignore[attr-defined]
        items[:] = kept
