"""POST /api/export: one self-contained HTML file of a view, for a browser with no server and no network."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.export import build_export
from server.prepare import attention_body
from server.scheduling import ComputeRoute
from server.schemas import ExportRequest
from server.schemas.errors import ANY_ROUTE, BODY, errors

# its own answer is HTML; its errors are JSON, as everywhere under /api
router = APIRouter(
    prefix="/api", tags=["attention"], route_class=ComputeRoute, responses=errors(*ANY_ROUTE, *BODY, ref=True)
)


@router.post(
    "/export",
    response_class=HTMLResponse,
    summary="One self-contained HTML file of a view, interactive with no server",
    responses={200: {"content": {"text/html": {}}, "description": "an HTML file, as an attachment"}},
)
def export_html(req: ExportRequest, settings: SettingsDep, models: ModelsDep, runtime: RuntimeDep) -> Response:
    """The /api/attention body, computed under the same limits, as one HTML file to save and open anywhere: the
    page's own heatmaps, overview and retrieval inlined, every head's weights embedded at float16 (deflated,
    base64: about 2.2 bytes per weight at 512 tokens), no request to any host. It opens on `view` (the heads of a
    layer, all layers, or one head with the retrieval of `query`) and switches views, layers, heads and queries
    without a server. `layer` embeds that layer only; without it every layer is embedded."""
    page, name = build_export(req, lambda attention: attention_body(attention, settings, models, runtime))
    return HTMLResponse(page, headers={"Content-Disposition": f'attachment; filename="{name}"'})
