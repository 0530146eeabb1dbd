"""attnlab.show's widget in Python, no browser: an anywidget whose traits Python reads and sets, whose weights go as
ONE binary buffer in the arrays form (at most 2.1 bytes a weight at float16, float32 for a small run), whose masks
set from Python run the model again, and whose output carries the standalone page for where widgets cannot run.
Its front end is driven in JupyterLab by tests/browser/test_widget.py."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import anywidget
import numpy as np
import pytest
import traitlets
from ipywidgets.widgets.widget import _remove_buffers

import attnlab
from attnlab.notebook import StandaloneView
from wire.arrays import read_arrays
from wire.standalone import read_embedded

if TYPE_CHECKING:
    from attnlab.widget import AttentionWidget

# 200 positions x 16 heads: 640,000 weights, above the export's float32 limit (65,536), so at float16
LONG = " ".join(f"w{i % 50}" for i in range(200))
TEXT = "red ball king river red ball king river"


@pytest.fixture(scope="module")
def large() -> AttentionWidget:
    return attnlab.show("random", LONG, options={"heads": 16})


def weights(result: dict) -> list[np.ndarray]:
    return [np.asarray(h["weights"]) for layer in result["layers"] for h in layer["heads"]]


def test_the_weights_go_as_one_binary_buffer_of_at_most_2_1_bytes_a_weight(large: AttentionWidget) -> None:
    assert isinstance(large, anywidget.AnyWidget)
    state, paths, buffers = _remove_buffers(large.get_state())
    assert paths == [["_data"]]  # the weights are the one buffer; the JSON state holds no matrix
    assert len(json.dumps(state)) < 2 * len(large._shell) + len(large._esm) + 10_000
    count = sum(w.size for w in weights(large.result))
    assert count == 640_000
    assert large.result["config"]["precision"] == "float16"
    assert len(buffers[0]) == large.nbytes and large.nbytes / count <= 2.1, large.nbytes / count
    sent = read_arrays(bytes(buffers[0]))
    want = attnlab.run("random", LONG, options={"heads": 16}, include=["weights"])
    assert sent["tokens"] == want["tokens"]
    for got, ref in zip(weights(sent), weights(want), strict=True):
        assert got.dtype == np.float16
        np.testing.assert_allclose(got, ref, atol=1e-3)


def test_traits_are_read_and_set_and_refuse_what_is_out_of_range() -> None:
    w = attnlab.show("induction", TEXT, layer=1, view="head", head=3, query=5)
    assert (w.view, w.layer, w.head, w.query, w.selected) == ("head", 1, 3, 5, None)
    assert w.result["config"]["precision"] == "float32"  # a small run: its weights exact
    n_heads = len(w.result["layers"][0]["heads"])
    w.head = 2
    assert w.head == 2
    with pytest.raises(traitlets.TraitError, match=f"head: got {n_heads}; this model has heads 0-{n_heads - 1}"):
        w.head = n_heads
    with pytest.raises(traitlets.TraitError, match="layer: got 0; this view holds layers \\[1\\]"):
        w.layer = 0
    with pytest.raises(traitlets.TraitError, match="query: got 8; the sequence has positions 0-7"):
        w.query = 8
    with pytest.raises(traitlets.TraitError, match="blocked: got \\[0, 9\\]"):
        w.blocked = [[0, 9]]
    with pytest.raises(traitlets.TraitError, match="view: 'all' shows every layer"):
        w.view = "all"
    assert "<attnlab view: induction, head view, layer 1; live widget on layer 1 head 2" in repr(w)


def test_masks_set_from_python_run_the_model_again() -> None:
    w = attnlab.show("induction", TEXT, layer=1)
    assert w.causal is True and w.blocked == []  # the model's default: causal
    before = w.nbytes, w._data
    masked = read_arrays(w._data)["layers"][0]["heads"][0]["weights"]
    assert masked[0, 7] == 0
    w.causal = False
    assert w.result["masks"]["causal"] is False and w.error == ""
    sent = read_arrays(w._data)
    assert w._data != before[1] and sent["layers"][0]["heads"][0]["weights"][0, 7] > 0
    w.blocked = [[0, 7]]
    sent = read_arrays(w._data)
    assert w.result["masks"]["blocked"] == [[0, 7]]
    assert all(h["weights"][0, 7] == 0 for h in sent["layers"][0]["heads"])
    assert not sent["eligible"][0][7]


def test_the_output_carries_the_standalone_page_and_show_falls_back_without_anywidget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w = attnlab.show("induction", TEXT, layer=1)
    data, _ = w._repr_mimebundle_()
    assert set(data) == {"text/plain", "application/vnd.jupyter.widget-view+json", "text/html"}
    assert data["text/html"].startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in data["text/html"]
    assert read_arrays(read_embedded(w.html))["tokens"] == w.result["tokens"]
    w.causal = False  # the page follows the weights drawn now
    assert read_arrays(read_embedded(w.html))["layers"][0]["heads"][0]["weights"][0, 7] != 0
    monkeypatch.setitem(sys.modules, "anywidget", None)  # anywidget not installed: `import anywidget` fails
    view = attnlab.show("induction", TEXT, layer=1)
    assert isinstance(view, StandaloneView)
    assert read_arrays(read_embedded(view.html))["tokens"] == w.result["tokens"]


def test_a_refused_or_hostile_mask_leaves_the_weights_and_names_what_is_wrong() -> None:
    w = attnlab.show("induction", TEXT, layer=1)
    drawn = w._data
    w.blocked = [[0, 0]]  # under the causal mask query 0 sees key 0 only: blocked, its row has no key left
    assert "masks: query rows 0 have no eligible key after masking" in w.error
    assert w._data == drawn and w.blocked == [] and w.causal is True  # the masks in force, as drawn
    # what a front end could send in its state: each refused by name, nothing recomputed
    for state, field in (
        ({"blocked": [[0, -1]]}, "blocked"),
        ({"blocked": [[0, 1]] * 65}, "blocked"),
        ({"causal": "yes"}, "causal"),
        ({"head": "2"}, "head"),
        ({"query": 1e9}, "query"),
        ({"view": "<script>"}, "view"),
    ):
        with pytest.raises(traitlets.TraitError, match=field):
            w.set_state(state)
    assert w._data == drawn and w.blocked == [] and w.causal is True
    w.blocked = [[1, 0]]  # a good mask after the refusal: the error clears
    assert w.error == "" and w.result["masks"]["blocked"] == [[1, 0]]
