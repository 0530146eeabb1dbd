from __future__ import annotations

import os

# every app the suite builds (and every server it starts) checks each JSON answer against its declared type: an
# answer that does not fit is a 500 naming the field (server/declare.py check_answer)
os.environ.setdefault("ATTNLAB_CHECK_ANSWERS", "1")

# the named servers and apps, and the factories for the rest
pytest_plugins = ["tests.fixtures"]
