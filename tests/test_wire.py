"""wire/: the arrays form and the standalone export, shared by the server and the attnlab client, with no
dependency on either: the reader needs NumPy alone, the writer NumPy and orjson, the export builder the standard
library and static/."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from server.forms import ArraysResponse
from tests.helpers import ROOT
from wire.arrays import read_arrays, write_arrays


def test_the_server_answers_with_the_writer_of_wire() -> None:
    rng = np.random.default_rng(2)
    body = {"tokens": ["a", "b"], "layers": [{"heads": [{"weights": rng.random((2, 2), dtype=np.float32)}] * 3}]}
    assert bytes(ArraysResponse(body).body) == bytes(write_arrays(body))
    got = read_arrays(write_arrays(body))
    assert np.array_equal(got["layers"][0]["heads"][2]["weights"], body["layers"][0]["heads"][2]["weights"])


def blocked(names: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """`code` run in a fresh process where each of `names` fails to import."""
    script = f"import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n{code}"
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


LAYERS = ("torch", "engine", "server", "attnlab", "fastapi", "starlette", "pydantic", "jinja2")

ROUND_TRIP = """
import numpy as np
from wire.arrays import read_arrays, write_arrays
w = np.arange(6, dtype=np.float16).reshape(2, 3)
got = read_arrays(write_arrays({"heads": [{"i": 0, "w": w}, {"i": 1, "w": w + 1}]}))
assert [h["i"] for h in got["heads"]] == [0, 1]
assert np.array_equal(got["heads"][1]["w"], w + 1) and got["heads"][1]["w"].dtype == np.float16
print("ok")
"""


def test_the_arrays_form_needs_no_server_engine_or_client() -> None:
    done = blocked(LAYERS, ROUND_TRIP)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_reader_needs_numpy_alone() -> None:
    code = (
        "from wire.arrays import MAGIC, read_arrays\n"
        "data = MAGIC + (2).to_bytes(4, 'little') + b'{}' + bytes(6)\n"
        "assert read_arrays(data) == {}\nprint('ok')"
    )
    done = blocked((*LAYERS, "orjson"), code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_export_builder_needs_no_server_engine_or_client() -> None:
    code = """
from wire.standalone import read_embedded, standalone_html
from wire.arrays import MAGIC
data = MAGIC + (2).to_bytes(4, "little") + b"{}" + bytes(6)
page = standalone_html(data, title="t")
assert page.startswith("<!doctype html>") and read_embedded(page) == data
print("ok")
"""
    done = blocked(LAYERS, code)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_blocking_a_package_makes_its_import_fail() -> None:
    """The negative control for the tests above: a package that needs a blocked one does not import."""
    done = blocked(("numpy",), "import wire.arrays")
    assert done.returncode != 0 and "numpy" in done.stderr
