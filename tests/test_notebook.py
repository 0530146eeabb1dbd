"""attnlab in a real notebook: a notebook built with nbformat, executed headless by nbclient on an ipykernel running
this environment's Python (a kernel spec of its own, so no kernel installed elsewhere is used), its outputs read
back: the view is an iframe sandboxed to scripts, its page holds the run's tokens and weights; and in the same
kernel a tiny checkpoint loaded and studied as in TransformerLens (head types, an ablation, patching, decoding),
its answers checked, and every declared analysis run in process on its first example, each answer equal to this
process's (which tests/test_inprocess_analyses.py holds equal to the API's)."""

from __future__ import annotations

import html
import json
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

import attnlab
from attnlab.arrays import read_arrays
from server.analyses import declared
from tests.answers import comparable, example_answer, same
from tests.helpers import ROOT
from wire.standalone import read_embedded

pytestmark = pytest.mark.slow

TEXT = "The animal didn't cross the street because it was too tired"
CHECKPOINT = ROOT / "engine" / "checkpoints" / "pycode"  # the tiny code model attnlab ships, as a directory
CODE, BUG = "def add(a, b): return a + b", "def add(a, c): return a + b"  # one token apart
# the induction head its card names, (layer, head)
INDUCTION = tuple(
    int(i) for i in json.loads((CHECKPOINT / "attnlab.json").read_text())["heads"]["induction"]["head"].split(".")
)
# a session on that checkpoint `m`, as a researcher from TransformerLens runs one: name -> (function, fields)
SESSION: dict[str, tuple[str, dict[str, Any]]] = {
    "kinds": ("heads", {"text": CODE, "probe": {"segment_lengths": [8]}}),
    "ablated": (
        "intervene",
        {
            "text": CODE,
            "ablate": [{"layer": INDUCTION[0], "head": INDUCTION[1], "mode": "zero"}],
            "include": ["weights"],
        },
    ),
    "patched": (
        "patch",
        {
            "clean": {"text": CODE},
            "corrupted": {"text": BUG},
            "hook": "z",
            "metric": {"kind": "logit_diff", "position": 10, "correct": " b", "wrong": " c"},
        },
    ),
    "decoded": ("decode", {"text": "def add(a, b):", "generate": {"tokens": 4}}),
}
# every declared analysis on its first example, then the session; both pickled for the test to read back
IN_PROCESS = """import pickle
from server.analyses import declared
m = attnlab.load({directory!r})
examples = {{a.client: getattr(attnlab, a.client)(**next(iter(a.examples.values()))["value"]) for a in declared()}}
session = {{name: getattr(attnlab, f)(m, **fields) for name, (f, fields) in {session!r}.items()}}
with open("answers.pkl", "wb") as f:
    pickle.dump({{"examples": examples, "session": session}}, f)
print(len(examples), "analyses")"""


def kernel(tmp: Path) -> KernelManager:
    """An ipykernel on sys.executable, from a kernel spec written here."""
    spec = tmp / "kernels" / "attnlab-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    # this checkout's attnlab, wherever the environment installed it from; a checkpoint loads without the check
    # against transformers, as the guide's examples run (tests/test_docs_examples.py)
    env = {"PYTHONPATH": str(ROOT), "ATTNLAB_REFERENCE": "0"}
    kernel_json = {"argv": argv, "display_name": "attnlab test", "language": "python", "env": env}
    (spec / "kernel.json").write_text(json.dumps(kernel_json))
    return KernelManager(
        kernel_name="attnlab-test", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)])
    )


def run_notebook(tmp: Path, *cells: str) -> list[list[dict[str, Any]]]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    client = NotebookClient(nb, km=kernel(tmp), timeout=240, resources={"metadata": {"path": str(tmp)}})
    client.execute()
    nbformat.validate(nb)
    return [cell.outputs for cell in nb.cells]


def page_in(output: dict[str, Any]) -> str:
    shown = output["data"]["text/html"]
    m = re.fullmatch(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts" title="attnlab" style="[^"]*"></iframe>', shown)
    assert m is not None, shown[:300]
    return html.unescape(m.group(1))


def test_show_in_a_headless_notebook(tmp_path: Path) -> None:
    outputs = run_notebook(
        tmp_path,
        f'import attnlab\nattnlab.show("minilm", {TEXT!r}, layer=2)',
        f'view = attnlab.show("minilm", {TEXT!r}, layer=2, view="head", head=5, query=4)\nprint(repr(view))',
        "from IPython.display import display\n"
        'display(attnlab.show("random", "the cat sat", options={"heads": 2}))\n'
        'attnlab.export_html("random", "the cat sat", path="saved.html")\n'
        "print('written')",
        'try:\n    attnlab.show("minilm", "a b", view="grid")\nexcept attnlab.ApiError as e:\n    print(e.field)',
        IN_PROCESS.format(directory=str(CHECKPOINT), session=SESSION),
    )
    first, plain, shown, refused, analysed = outputs
    assert [o["output_type"] for o in first] == ["execute_result"]
    page = page_in(first[0])
    got = read_arrays(read_embedded(page))
    want = attnlab.run("minilm", TEXT, layer=2, include=["weights"])
    assert got["tokens"] == want["tokens"]
    assert [layer["index"] for layer in got["layers"]] == [2]
    np.testing.assert_allclose(
        got["layers"][0]["heads"][5]["weights"], want["layers"][0]["heads"][5]["weights"], atol=1e-3
    )
    assert '"view": "layer"' in page and '"layer": 2' in page

    text = "".join(o.get("text", "") for o in plain)
    assert "<attnlab view: minilm, head view, layer 2" in text and "attnlab-minilm-head-L2-H5.html" in text

    kinds = [o["output_type"] for o in shown]
    assert kinds[0] == "display_data" and "written" in shown[-1]["text"]
    assert read_arrays(read_embedded(page_in(shown[0])))["tokens"] == ["the", "cat", "sat"]
    saved = (tmp_path / "saved.html").read_text()
    assert read_arrays(read_embedded(saved))["tokens"] == ["the", "cat", "sat"]

    assert refused[0]["text"].strip() == "view"

    assert analysed[-1]["text"].strip() == f"{len(declared())} analyses"
    with open(tmp_path / "answers.pkl", "rb") as f:
        kernel = pickle.load(f)  # written by the notebook this test built
    assert sorted(kernel["examples"]) == sorted(a.client for a in declared())
    for a in declared():
        same(comparable(kernel["examples"][a.client]), comparable(example_answer(a.name)), a.name)
    kinds, ablated, patched = (kernel["session"][name] for name in ("kinds", "ablated", "patched"))
    induction = max(kinds["heads"], key=lambda h: h["induction"] or 0)
    assert (induction["layer"], induction["head"]) == INDUCTION and induction["induction"] > 0.5
    assert isinstance(ablated["after"]["layers"][INDUCTION[0]]["heads"][INDUCTION[1]]["weights"], np.ndarray)
    assert ablated["loss_after"] != ablated["loss_before"]  # the induction head ablated changes the prediction
    # one head's output patched back recovers more than half of the clean logit difference (L5H4's 0.57 today)
    assert max(v for row in patched["recovered"] for v in row if v is not None) > 0.5
    assert patched["forwards"] == patched["rows"] * patched["columns"] + 2
    assert [g["token"] for g in kernel["session"]["decoded"]["generated"]][:1] == [
        "\n   "
    ]  # greedy: a new line, indented
