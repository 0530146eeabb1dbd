"""attnlab.show in a real notebook: a notebook built with nbformat, executed headless by nbclient on an ipykernel
running this environment's Python (a kernel spec of its own, so no kernel installed elsewhere is used), its
outputs read back: the view is an iframe sandboxed to scripts, its page holds the run's tokens and weights."""

from __future__ import annotations

import html
import json
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
from wire.standalone import read_embedded

pytestmark = pytest.mark.slow

TEXT = "The animal didn't cross the street because it was too tired"


def kernel(tmp: Path) -> KernelManager:
    """An ipykernel on sys.executable, from a kernel spec written here."""
    spec = tmp / "kernels" / "attnlab-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "attnlab test", "language": "python"}))
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
    )
    first, plain, shown, refused = outputs
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
