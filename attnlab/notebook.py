"""attnlab.show and attnlab.export_html: the standalone view of a run in this process, for a notebook or a file.

The run is attnlab.run's (the engine in this process, through the server's own path, no server), its weights in
the arrays form at float32 up to 65,536 weights in all (a small run's numbers stay exact), at float16 above; the
page is the one POST /api/export answers (wire/standalone.py), built by the same code (server/inprocess.py
run_export, which calls server/export.py build_export as the route does), so the same arguments are refused with
the same field named.

attnlab.show returns the live widget (attnlab/widget.py) when anywidget is installed; its output carries this page
too, for where widgets cannot run. In a notebook the page goes in an <iframe srcdoc> sandboxed to scripts only: the
page's script runs in its own document, apart from the notebook's, so JupyterLab, classic Jupyter and VS Code show it
alike, with no internet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnlab.arrays import jsonable
from attnlab.frame import iframe
from attnlab.local import api_errors, model_named, models_for, runtime
from engine.models import model_for
from server import inprocess
from server.config import Settings
from wire.arrays import write_arrays

if TYPE_CHECKING:
    from attnlab.widget import AttentionWidget
    from server.schemas import ExportRequest

# the iframe's height (px) for each view when none is given: the controls, and a grid, the thumbnails or a head
HEIGHTS = {"layer": 760, "all": 620, "head": 800}


class StandaloneView:
    """A standalone attnlab page: a notebook shows it (`_repr_html_`: the page in a sandboxed iframe), a terminal
    prints one line about it, `.html` is the page itself and `.save(path)` writes it."""

    def __init__(self, page: str, name: str, summary: str, height: int) -> None:
        self.html = page
        self.name = name
        self.summary = summary
        self.height = height

    def _repr_html_(self) -> str:
        return iframe(self.html, self.height)

    def __repr__(self) -> str:
        size = len(self.html.encode()) / 1e6
        return f"<attnlab view: {self.summary}; {size:.1f} MB of HTML; .save(path) writes {self.name}>"

    def save(self, path: str | Path) -> Path:
        out = Path(path)
        if out.is_dir():
            out = out / self.name
        out.write_text(self.html, encoding="utf-8")
        return out


@dataclass
class Prepared:
    """A show or export call validated as POST /api/export validates it, and where it runs."""

    body: dict[str, Any]  # the request body, as JSON: what a mask toggled in the widget changes
    req: ExportRequest
    model: str | None
    settings: Settings
    models: Any
    where: Any

    def request(self, masks: dict[str, Any] | None = None) -> ExportRequest:
        if masks is None:
            return self.req
        return inprocess.export_request({**self.body, "masks": masks})

    def summary(self) -> str:
        req = self.req
        what = "every layer" if req.view == "all" or req.layer is None else f"layer {req.layer}"
        return f"{self.model}, {req.view} view, {what}"


def prepare(
    model: Any = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    view: str = "layer",
    head: int | None = None,
    query: int | None = None,
    palette: str = "viridis",
    title: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    tokenizer: Any = None,
    **fields: Any,
) -> Prepared:
    with api_errors():
        model = model_named(model, tokenizer)  # a directory or a model object, registered under its name
    body = jsonable({**fields, "model": model, "text": text, "masks": masks, "layer": layer})
    body = {k: v for k, v in body.items() if v is not None or k in fields}
    shown = {"view": view, "head": head, "query": query, "palette": palette, "title": title}
    body.update({k: v for k, v in shown.items() if v is not None})
    settings = Settings()
    with api_errors():
        req = inprocess.export_request(body)
        name_of_model = model_for(req.model, req.x is not None, req.scores is not None or req.pattern is not None)
        models = models_for(name_of_model)
        where = runtime(device or settings.device, dtype or settings.dtype)
    return Prepared(body, req, name_of_model, settings, models, where)


def view_of(model: Any = None, *args: Any, height: int | None = None, **fields: Any) -> StandaloneView:
    run = prepare(model, *args, **fields)
    with api_errors():
        page, name = inprocess.run_export(run.req, run.settings, run.models, run.where)
    return StandaloneView(page, name, run.summary(), height or HEIGHTS[run.req.view])


def widget_of(model: Any = None, *args: Any, height: int | None = None, **fields: Any) -> AttentionWidget:
    """attnlab.show's live view (attnlab/widget.py), its fallback page built from the same answer."""
    from attnlab.widget import AttentionWidget

    run = prepare(model, *args, **fields)
    last: dict[str, Any] = {}

    def compute(masks: dict[str, Any] | None) -> tuple[dict[str, Any], bytes]:
        with api_errors():
            req = run.request(masks)
            result = inprocess.run_export_body(req, run.settings, run.models, run.where)
        data = bytes(write_arrays(result))
        last.update(req=req, result=result, data=data)
        return result, data

    def page() -> str:
        if "page" not in last:
            last["page"] = inprocess.standalone_page(last["req"], last["result"], last["data"])
        return str(last["page"])

    def recompute(masks: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        last.pop("page", None)
        return compute(masks)

    result, data = compute(None)
    name, title, shown = inprocess.export_view(run.req, result)
    return AttentionWidget(
        recompute,
        page,
        dict(run.body.get("masks") or {}),
        shown,
        result,
        data,
        title=title,
        name=name,
        summary=run.summary(),
        height=height or HEIGHTS[run.req.view],
    )


def live() -> bool:
    """Whether attnlab.show can return the live widget: anywidget is importable."""
    try:
        import anywidget  # noqa: F401
    except ImportError:
        return False
    return True


def show(
    model: Any = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    view: str = "layer",
    height: int | None = None,
    **fields: Any,
) -> AttentionWidget | StandaloneView:
    """Run `model` on `text` in this process and return its view, which a notebook displays inline: the live widget
    (attnlab/widget.py: traits view, layer, head, query, selected, causal, blocked, read and set from Python) when
    anywidget is installed, else the standalone view.

    `model`: a name, a checkpoint directory, a model attnlab.load returned, or a transformers model object with
    `tokenizer=` (its tokenizer), as attnlab.run takes.

    `view`: "layer" (the heads of one layer), "all" (every head of every layer as thumbnails) or "head" (one head
    large, `head=`, with the retrieval of `query=`). `layer` embeds that layer only (all layers when omitted;
    `view="all"` needs them all). `masks`, `palette` ("viridis" | "cividis"), `title`, `positions_from` (1: positions
    printed from 1, as the chapter counts) and every other /api/attention field (options, tokens, scale,
    all_masked, ...) as in attnlab.run; `height`: the iframe's, in px.

    The value shows itself as the last expression of a cell (mid-cell: `display(attnlab.show(...))`); in a terminal
    it prints one line. Where widgets cannot run (nbconvert, a static HTML export, GitHub's viewer) the widget's
    output shows the standalone page in its iframe. Raises attnlab.ApiError as POST /api/export would, naming the
    field."""
    if live():
        return widget_of(model, text, masks, layer, view=view, height=height, **fields)
    return view_of(model, text, masks, layer, view=view, height=height, **fields)


def export_html(
    model: Any = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    view: str = "layer",
    path: str | Path | None = None,
    **fields: Any,
) -> str:
    """The standalone page as POST /api/export answers it, built in this process: the HTML, and written to `path`
    when given (a folder gets the export's own file name). Arguments as attnlab.show."""
    result = view_of(model, text, masks, layer, view=view, **fields)
    if path is not None:
        result.save(path)
    return result.html
