"""The standalone export: the JS bundler (wire/jsbundle.py) on toy and real modules, and POST /api/export.

The exported page's numbers are checked against /api/attention's answer to the same body; its drawing and its
offline promise are checked in Chromium by tests/browser/test_export.py.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.fixtures import make_app_client
from tests.helpers import assert_error, node
from wire.arrays import read_arrays
from wire.jsbundle import BundleError, bundle, module_order
from wire.standalone import FORBID, read_embedded, script_safe, standalone_html, static_dir, viewer_script


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app for the module: each test that takes it checks only the answers to its own requests, which read no
    state of the app (no metric, cache or slot count), so a fresh app for each test would check nothing more; a test
    that changes the app or pins a setting builds its own (make_client)."""
    with make_app_client() as c:
        yield c


def test_the_viewer_bundle_holds_standalone_and_never_the_page_store() -> None:
    js = static_dir() / "js"
    assert {p.name for p in js.glob("*.js")} >= FORBID  # each name refused is one of the page's modules
    # what standalone.js imports, followed with nothing refused: none of the page's store and fetching is among it
    names = [m.name for m in module_order("standalone.js", js)]
    assert names[-1] == "standalone.js"
    assert {"heatmap.js", "colors.js", "arrays.js", "overview.js"} <= set(names)
    assert not set(names) & FORBID, set(names) & FORBID
    assert [m.name for m in module_order("standalone.js", js, FORBID)] == names
    script = viewer_script()
    assert script.rstrip().endswith("__attnlab_standalone.boot();\n})();".rstrip())


def test_the_viewer_bundle_refuses_a_module_that_reaches_the_page_store() -> None:
    """The negative control: standalone.js importing a module that imports store.js is refused, naming the import."""
    sources = {p.name: p.read_text(encoding="utf-8") for p in (static_dir() / "js").glob("*.js")}
    sources["legend.js"] = 'import { reducer } from "./store.js";\nexport const legend = reducer;\n'
    sources["standalone.js"] = 'import { legend } from "./legend.js";\n' + sources["standalone.js"]
    assert "store.js" in {m.name for m in module_order("standalone.js", sources)}
    with pytest.raises(BundleError, match=r"legend\.js imports store\.js, which a standalone page must not include"):
        module_order("standalone.js", sources, FORBID)


class Scripts(HTMLParser):
    """The text of each <script> element, as an HTML parser splits the page into them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.scripts: list[str] = []
        self._open = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._open = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._open = self._open and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._open:
            self.scripts[-1] += data


def test_a_closing_script_tag_in_a_module_stays_inside_the_inline_script(tmp_path: Path) -> None:
    """No module of the page holds `</script` today, so the viewer's own script cannot show that script_safe works: a
    toy module holds it in a string, a template and a comment. Bundled as the viewer is, the script is one element
    to an HTML parser, whole, and node runs it to the strings the module wrote."""
    toy = {
        "main.js": (
            "// a comment that says </script> and </SCRIPT >\n"
            'export function start() {\n  globalThis.out = ["</script>", `</Script>${1}`];\n}\n'
        )
    }
    js = script_safe(bundle("main.js", toy, call="start"))
    parser = Scripts()
    parser.feed(f"<script>{js}</script><p>after</p>")
    assert parser.scripts == [js]
    (tmp_path / "toy.js").write_text(js + "\nconsole.log(JSON.stringify(globalThis.out));\n")
    out = subprocess.run([node(), str(tmp_path / "toy.js")], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == ["</script>", "</Script>1"]
    with pytest.raises(ValueError, match="<!--"):
        script_safe(bundle("main.js", {"main.js": 'export const A = "<!--";\n'}))


def test_the_viewer_bundle_is_valid_javascript(tmp_path: Path) -> None:
    (tmp_path / "viewer.js").write_text(viewer_script())
    subprocess.run([node(), "--check", str(tmp_path / "viewer.js")], check=True, capture_output=True)


# ---- POST /api/export -------------------------------------------------------------------------------------------

RANDOM: dict[str, Any] = {
    "model": "random",
    "text": "the cat sat on the mat again",
    "options": {"d_model": 16, "heads": 4, "seed": 5},
    "masks": {"causal": True, "blocked": [[3, 1]]},
}


def embedded(page: str) -> Any:
    return read_arrays(read_embedded(page))


def test_export_embeds_the_api_numbers(client: TestClient) -> None:
    """A small run is embedded at float32 (tests/test_export_precision.py has the float16 side of the threshold)."""
    resp = client.post("/api/export", json={**RANDOM, "view": "head", "head": 2, "query": 4})
    assert resp.status_code == 200, resp.text[:500]
    assert resp.headers["content-type"].startswith("text/html")
    assert resp.headers["content-disposition"] == 'attachment; filename="attnlab-random-head-H2.html"'
    page = resp.text
    got = embedded(page)
    want = client.post("/api/attention", json={**RANDOM, "include": ["weights"]}).json()
    assert got["tokens"] == want["tokens"]
    assert np.array_equal(got["eligible"], np.array(want["eligible"], dtype=bool))
    assert len(got["layers"]) == len(want["layers"])
    for gl, wl in zip(got["layers"], want["layers"], strict=True):
        for gh, wh in zip(gl["heads"], wl["heads"], strict=True):
            assert gh["weights"].dtype == np.float32
            assert set(gh) == {"index", "kv_group", "weights"}
            np.testing.assert_array_equal(gh["weights"], np.array(wh["weights"], dtype=np.float32))
    shown = re.search(r'<script type="application/json" id="attnlab-view">(.*?)</script>', page)
    assert shown is not None
    assert '"view": "head"' in shown.group(1) and '"head": 2' in shown.group(1) and '"query": 4' in shown.group(1)


@pytest.mark.parametrize(("sent", "want"), [({}, 0), ({"positions_from": 1}, 1), ({"positions_from": 0}, 0)])
def test_export_embeds_the_count_positions_are_printed_in(client: TestClient, sent: dict[str, Any], want: int) -> None:
    page = client.post("/api/export", json={**RANDOM, "view": "head", "query": 4, **sent}).text
    shown = re.search(r'<script type="application/json" id="attnlab-view">(.*?)</script>', page)
    assert shown is not None
    view = json.loads(shown.group(1))
    assert view["positions_from"] == want and view["query"] == 4  # the query stays 0-based


def test_export_page_loads_nothing_from_anywhere(client: TestClient) -> None:
    """The markup names no file (src, href, url()), the script makes no request (fetch, XHR, import(), a worker);
    tests/browser/test_export.py watches the network too."""
    page = client.post("/api/export", json={**RANDOM, "view": "layer"}).text
    markup, _, script = page.rpartition("<script>")
    assert markup.count("<script") == 2  # the view and the data, then the viewer
    markup = re.sub(r'<script type="application/octet-stream"[^>]*>[^<]*</script>', "", markup)
    assert not re.search(r"\b(src|href|action)\s*=|url\(|@import", markup), "the markup names a file or host"
    for call in ("fetch(", "XMLHttpRequest", "import(", "Worker(", "sendBeacon", "WebSocket", "EventSource"):
        assert call not in script, call
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page), "the page names a host"


def test_export_embeds_every_layer_or_the_one_asked(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    body = {"model": "induction", "text": "red ball king river red ball king river"}
    with make_client(models="induction") as c:
        every = embedded(c.post("/api/export", json={**body, "view": "all"}).text)
        one = c.post("/api/export", json={**body, "layer": 1})
        assert one.headers["content-disposition"] == 'attachment; filename="attnlab-induction-layer-L1.html"'
        want = c.post("/api/attention", json={**body, "include": ["weights"]}).json()
    assert [layer["index"] for layer in every["layers"]] == [0, 1]
    layer1 = embedded(one.text)["layers"]
    assert [layer["index"] for layer in layer1] == [1]
    for gh, wh in zip(layer1[0]["heads"], want["layers"][1]["heads"], strict=True):
        np.testing.assert_allclose(gh["weights"], np.array(wh["weights"]), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"view": "heads"}, "view", ["layer", "all", "head"]),
        ({"view": "all", "layer": 0}, "layer", ["every layer"]),
        ({"head": 9}, "head", ["0-3"]),
        ({"query": 70}, "query", ["0-6"]),
        ({"head": -1}, "head", []),
        ({"include": ["weights", "stats"]}, "include", ["float16"]),
        ({"include": ["rollout", "stats"]}, "include", ["rollout", "attention_flow"]),
        ({"rollout": {"heads": "max"}}, "rollout", ["include"]),
        ({"include": ["rollout"], "rollout": {"heads": "sum"}}, "rollout.heads", []),
        ({"precision": "float32"}, "precision", ["float16"]),
        ({"palette": "jet"}, "palette", []),
        ({"positions_from": 2}, "positions_from", []),
        ({"positions_from": "1"}, "positions_from", []),
        ({"positions_from": True}, "positions_from", []),
        ({"texts": ["a b", "c"]}, "texts", []),
        ({"nope": 1}, "nope", []),
        ({"model": "gpt-99"}, "model", ["gpt-99"]),
    ],
)
def test_export_refusals_name_the_field(
    client: TestClient, extra: dict[str, Any], field: str, words: list[str]
) -> None:
    assert_error(client.post("/api/export", json={**RANDOM, **extra}), 422, field, *words)


def test_export_has_the_attention_limits(make_client: Callable[..., AbstractContextManager[TestClient]]) -> None:
    with make_client(max_tokens=4) as c:
        assert_error(c.post("/api/export", json=RANDOM), 422, "text", "ATTNLAB_MAX_TOKENS")
    with make_client(max_result_values=100) as c:
        assert_error(c.post("/api/export", json=RANDOM), 422, "include", "ATTNLAB_MAX_RESULT_VALUES")


def test_standalone_html_escapes_the_title_and_refuses_an_unknown_view(client: TestClient) -> None:
    data = client.post(
        "/api/attention",
        json={**RANDOM, "include": ["weights"], "precision": "float16"},
        headers={"accept": "application/vnd.attnlab.arrays"},
    ).content
    page = standalone_html(data, title="</script><script>alert(1)</script>")
    assert "<script>alert(1)" not in page and "&lt;/script&gt;" in page
    with pytest.raises(ValueError, match="view"):
        standalone_html(data, view="grid")  # type: ignore[arg-type]


def shown_of(page: str) -> Any:
    m = re.search(r'<script type="application/json" id="attnlab-view">(.*?)</script>', page)
    assert m is not None
    return json.loads(m.group(1))


@pytest.mark.parametrize("field", ["rollout", "attention_flow"])
def test_export_embeds_each_layers_rollout_or_flow_as_the_api_answers(
    make_client: Callable[..., AbstractContextManager[TestClient]], field: str
) -> None:
    """include rollout / attention_flow: every embedded layer carries its S x S map (float32 here) beside the weights,
    equal to /api/attention's for the same body and options, and the view JSON names the fuse and residual."""
    body = {"model": "induction", "text": "red ball king river red ball king river"}
    options = {"heads": "max", "residual": False}
    with make_client(models="induction") as c:
        plain = c.post("/api/export", json={**body, "view": "all"})
        resp = c.post("/api/export", json={**body, "view": "all", "include": [field], "rollout": options})
        assert resp.status_code == 200, resp.text[:500]
        one = embedded(c.post("/api/export", json={**body, "layer": 1, "include": [field]}).text)
        want = c.post("/api/attention", json={**body, "include": ["weights", field], "rollout": options}).json()
        want_default = c.post("/api/attention", json={**body, "include": [field]}).json()
    got = embedded(resp.text)
    assert shown_of(resp.text)["rollout"] == options
    assert shown_of(plain.text)["rollout"] is None
    assert all(field not in layer for layer in embedded(plain.text)["layers"])
    other = {"rollout": "attention_flow", "attention_flow": "rollout"}[field]
    for gl, wl in zip(got["layers"], want["layers"], strict=True):
        assert gl[field].dtype == np.float32 and other not in gl
        np.testing.assert_allclose(gl[field], np.array(wl[field]), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(gl["heads"][0]["weights"], np.array(wl["heads"][0]["weights"]), atol=1e-3)
    # one layer: its own map (computed through the layers below it), with the default options
    assert [layer["index"] for layer in one["layers"]] == [1]
    np.testing.assert_allclose(one["layers"][0][field], np.array(want_default["layers"][1][field]), atol=1e-3)


def test_export_runs_the_attention_checks_on_flow_and_rollout(
    make_client: Callable[..., AbstractContextManager[TestClient]],
) -> None:
    """flow past 64 positions, or past the server's max-flow work, and rollout with a source are refused as
    /api/attention refuses them: a 422 naming include."""
    long = " ".join(["alpha", "beta", "gamma", "delta"] * 17)
    with make_client(models="random") as c:
        resp = c.post("/api/export", json={"model": "random", "text": long, "include": ["attention_flow"]})
        assert_error(resp, 422, "include", "64")
        assert c.post("/api/export", json={"model": "random", "text": long, "include": ["rollout"]}).status_code == 200
        source = {"model": "random", "text": "a b c", "source": {"text": "x y z w"}, "include": ["rollout"]}
        assert_error(c.post("/api/export", json=source), 422, "include", "source")
    induction = {"model": "induction", "text": "red ball king river red ball king river", "include": ["attention_flow"]}
    with make_client(models="induction", max_flow_work=10) as c:
        resp = c.post("/api/export", json=induction)
        assert_error(resp, 422, "include", "ATTNLAB_MAX_FLOW_WORK")
