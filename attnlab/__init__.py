"""attnlab for scripts and notebooks.

- `attnlab.Client(url)`: the REST API of a running `attnlab serve`, one method per endpoint, NumPy arrays out
  (needs only httpx and NumPy).
- `attnlab.run(model, text, masks=..., layer=...)`: the same result in this process, no server (needs the engine:
  torch and the server's schemas). `model` is a name, a checkpoint directory, or a transformers model object with
  `tokenizer=`.
- `attnlab.load(directory)`: a checkpoint directory (config.json, safetensors weights, tokenizer.json) loaded and
  checked against transformers, registered here under its name for run and show.
- `attnlab.show(model, text, masks=..., layer=..., view=...)`: that run's standalone view, shown inline by a
  notebook (Jupyter, JupyterLab, VS Code) with no server and no internet; `attnlab.export_html(..., path=...)`: the
  same page as one HTML file, as POST /api/export answers it.
- Every analysis in this process, as attnlab.Client names its method, made from the server's declarations
  (attnlab/analyses.py): `attnlab.heads`, `attnlab.top_heads`, `attnlab.perturb`, `attnlab.intervene`,
  `attnlab.patch`, `attnlab.patch_run`, `attnlab.compare`, `attnlab.decode` (with `generate=`),
  `attnlab.qk_attribution`, `attnlab.runs` (with `attnlab.tile` and `attnlab.row` for a long run's parts),
  `attnlab.cost`, `attnlab.scale_sweep`, `attnlab.attention` and `attnlab.export`: `model` as for run, the API's
  fields by name, the answer Client gives (NumPy arrays where it gets the arrays form, dicts of the JSON otherwise).
- `attnlab.ApiError`: what they all raise for a request the API refuses: status, code, field, message, details.

Client, run, load, show, export_html and the analyses are imported on first use, so each works with only its own
dependencies installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from attnlab.errors import ApiError

if TYPE_CHECKING:
    from attnlab.client import Client
    from attnlab.local import load, run
    from attnlab.notebook import export_html, show

__all__ = ["ApiError", "Client", "export_html", "load", "run", "show"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from attnlab.client import Client

        return Client
    if name in ("run", "load"):
        from attnlab import local

        return getattr(local, name)
    if name in ("show", "export_html"):
        from attnlab import notebook

        return getattr(notebook, name)
    if not name.startswith("_"):
        analysis = _analysis(name)
        if analysis is not None:
            return analysis
    raise AttributeError(f"module 'attnlab' has no attribute {name!r}")


def _analysis(name: str) -> Any:
    """A declared analysis's in-process function (or tile, row), or None; None too without the engine installed."""
    try:
        analyses = importlib.import_module("attnlab.analyses")
    except ModuleNotFoundError:  # a client-only install: no engine in this process
        return None
    return analyses.functions().get(name) or {"tile": analyses.tile, "row": analyses.row}.get(name)


def __dir__() -> list[str]:
    try:
        analyses = importlib.import_module("attnlab.analyses")
    except ModuleNotFoundError:
        return sorted({*globals(), *__all__})
    return sorted({*globals(), *__all__, *analyses.names()})
