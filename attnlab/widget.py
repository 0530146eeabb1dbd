"""attnlab.show's live view in a notebook: an anywidget that draws with the page's own modules and talks back.

The run's answer goes to the front end as ONE binary buffer, the arrays form (wire/arrays.py) the standalone file
embeds, at the export's precision (float32 up to 65,536 weights, float16 above: 2 bytes a weight and a small
header), never a JSON of floats; static/js/widget.js reads it with the page's readArrays and draws it with the
standalone file's views (heads, overview, the large head and retrieval) in a shadow root of the output.

Traits, read and set from Python: `view`, `layer`, `head` and `query` (what is shown: `w.head = 3` redraws, a head
opened in the view sets `w.head`), `selected` (the cell last pressed: {"layer", "head", "query", "key"}), `causal`
and `blocked` (the masks: set from Python or toggled in the view, the kernel runs the model again, attnlab.run's
path, and sends the new buffer; a refused run's message goes to `error`, the last good weights stay and the mask
traits go back to the masks in force). A value out of range (from Python or the front end) is a TraitError that
names the trait and the range.

Where widgets cannot run (nbconvert, a notebook's static HTML, GitHub's viewer) the output's text/html is the
standalone page in a sandboxed <iframe srcdoc>, as StandaloneView shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from attnlab.errors import ApiError
from attnlab.frame import iframe
from wire.standalone import widget_module, widget_shell

VIEWS = ("layer", "all", "head")


class AttentionWidget(anywidget.AnyWidget):
    """The live view of one run (attnlab.show makes it)."""

    # the front end: static/js/widget.js and what it imports, one ES module bundled when the first widget is made
    # (wire/standalone.py caches it), not when this module is imported
    _esm = t.Unicode().tag(sync=True)
    view = t.Unicode("layer").tag(sync=True)
    layer = t.Int(0).tag(sync=True)
    head = t.Int(0).tag(sync=True)
    query = t.Int(None, allow_none=True).tag(sync=True)
    selected = t.Dict(allow_none=True).tag(sync=True)  # None until a cell is pressed
    causal = t.Bool(False).tag(sync=True)
    blocked = t.List(t.List(t.Int(), minlen=2, maxlen=2)).tag(sync=True)
    error = t.Unicode("").tag(sync=True)
    _data = t.Bytes(b"").tag(sync=True)
    _shown = t.Dict().tag(sync=True)
    _shell = t.Unicode("").tag(sync=True)

    def __init__(
        self,
        compute: Callable[[dict[str, Any]], tuple[dict[str, Any], bytes]],
        page: Callable[[], str],
        masks: dict[str, Any],
        shown: dict[str, Any],
        result: dict[str, Any],
        data: bytes,
        *,
        title: str,
        name: str,
        summary: str,
        height: int,
    ) -> None:
        """`compute(masks)`: the embedded answer and its arrays form for `masks`; `page()`: the standalone page of
        the last answer; `result`/`data`: the first answer; `shown`: view, layer, head, query, palette, matrix,
        rollout, positions_from as the export takes them."""
        self._compute = compute
        self._page = page
        self._masks = masks
        self._result = result
        self._reverting = False  # masks being put back after a refused run: nothing to recompute
        self.height = height
        self.name = name  # the file name .save(folder) writes
        self.summary = summary
        layers = [layer["index"] for layer in result["layers"]]
        super().__init__(
            _shell=widget_shell(title),
            _shown=shown,
            _data=data,
            view=shown["view"],
            layer=shown["layer"] if shown["layer"] in layers else layers[0],
            head=shown["head"] or 0,
            query=shown["query"],
            selected=None,
            causal=bool(result["masks"].get("causal")),
            blocked=[list(cell) for cell in result["masks"].get("blocked") or []],
        )
        self.observe(self._recompute, names=["causal", "blocked"])

    @t.default("_esm")
    def _module(self) -> str:
        return widget_module()

    @property
    def result(self) -> dict[str, Any]:
        """The run drawn now, as attnlab.run returns it (NumPy arrays; float16 above 65,536 weights)."""
        return self._result

    @property
    def nbytes(self) -> int:
        """The bytes of the buffer the front end gets (the arrays form)."""
        return len(self._data)

    @t.validate("view")
    def _valid_view(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"]
        if value not in VIEWS:
            raise t.TraitError(f"view: got {value!r}; one of {', '.join(VIEWS)}")
        if value == "all" and len(self._result["layers"]) < 2:
            raise t.TraitError("view: 'all' shows every layer; this view holds one (show it with layer left out)")
        return str(value)

    @t.validate("layer")
    def _valid_layer(self, proposal: dict[str, Any]) -> int:
        layers = [layer["index"] for layer in self._result["layers"]]
        if proposal["value"] not in layers:
            raise t.TraitError(f"layer: got {proposal['value']}; this view holds layers {layers}")
        return int(proposal["value"])

    @t.validate("head")
    def _valid_head(self, proposal: dict[str, Any]) -> int:
        n = len(self._result["layers"][0]["heads"])
        if not 0 <= proposal["value"] < n:
            raise t.TraitError(f"head: got {proposal['value']}; this model has heads 0-{n - 1}")
        return int(proposal["value"])

    @t.validate("query")
    def _valid_query(self, proposal: dict[str, Any]) -> int | None:
        value, n = proposal["value"], len(self._result["tokens"])
        if value is not None and not 0 <= value < n:
            raise t.TraitError(f"query: got {value}; the sequence has positions 0-{n - 1}")
        return value if value is None else int(value)

    @t.validate("blocked")
    def _valid_blocked(self, proposal: dict[str, Any]) -> list[list[int]]:
        n = len(self._result["tokens"])
        if len(proposal["value"]) > n * n:
            raise t.TraitError(f"blocked: got {len(proposal['value'])} cells; the sequence has {n * n}")
        for q, k in proposal["value"]:
            if not (0 <= q < n and 0 <= k < n):
                raise t.TraitError(f"blocked: got [{q}, {k}]; the sequence has positions 0-{n - 1}")
        return [[int(q), int(k)] for q, k in proposal["value"]]

    def _recompute(self, change: dict[str, Any]) -> None:
        """The masks changed (here or in the view): run the model again and send the new buffer. A refused run
        leaves the weights drawn, sets `error`, and puts `causal` and `blocked` back to the masks in force."""
        del change
        if self._reverting:
            return
        masks = {**self._masks, "causal": self.causal, "blocked": self.blocked}
        try:
            result, data = self._compute(masks)
        except ApiError as err:
            self.error = err.message  # the field named in it
            self._reverting = True
            try:
                self.causal = bool(self._result["masks"].get("causal"))
                self.blocked = [list(cell) for cell in self._result["masks"].get("blocked") or []]
            finally:
                self._reverting = False
            return
        self._masks, self._result, self.error = masks, result, ""
        self._data = data

    @property
    def html(self) -> str:
        """The standalone page of the run drawn now (POST /api/export's), as StandaloneView's `.html`."""
        return self._page()

    def save(self, path: str | Path) -> Path:
        """The standalone page written to `path` (a folder gets the export's own file name)."""
        out = Path(path)
        if out.is_dir():
            out = out / self.name
        out.write_text(self.html, encoding="utf-8")
        return out

    def _repr_html_(self) -> str:
        return iframe(self.html, self.height)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget, and the standalone page in an iframe (text/html) for where widgets cannot run."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle or {}, {})
        data = {**data, "text/html": self._repr_html_()}
        return data, metadata

    def __repr__(self) -> str:
        shown = f"layer {self.layer} head {self.head}"
        return f"<attnlab view: {self.summary}; live widget on {shown}; .save(path) writes {self.name}>"
