"""/api/attention, every head's matrices for a sequence, and /api/export, the same run as one HTML file."""

from __future__ import annotations

from typing import Any

from fastapi.responses import HTMLResponse, Response

from server.declare import Analysis, Context, Limit
from server.export import build_export
from server.prepare import attention_body
from server.schemas import AttentionRequest, AttentionResult, ExportRequest


def compute_attention(req: AttentionRequest, ctx: Context) -> dict[str, Any]:
    """JSON by default; `Accept: application/x-npz` for a NumPy archive, `Accept: application/vnd.attnlab.arrays`
    for the arrays form the page reads (a JSON header, then the raw arrays); `precision: "float16"` halves either.

    `texts` runs a batch (matrices gain a leading batch axis), `source` cross-attention (S x S_k matrices),
    `demo_bug` one of the chapter's classic bugs on purpose (marked wrong in `demo_bug`), and `include: ["audit"]`
    adds the audit record (measured peak memory and throughput, the engine against torch's SDPA, and the
    perturbation verdicts of the masks in force)."""
    return attention_body(req, ctx.settings, ctx.models, ctx.runtime, ctx.accept)


def export_html(req: ExportRequest, ctx: Context) -> Response:
    """The /api/attention body, computed under the same limits, as one HTML file to save and open anywhere: the
    page's own heatmaps, overview and retrieval inlined, every head's weights embedded at float32 up to 65,536 weights
    in all (a small run's numbers stay exact), at float16 above (deflated, base64: about 2.2 bytes per weight at 512
    tokens), no request to any host. It opens on `view` (the heads of a
    layer, all layers, or one head with the retrieval of `query`) and switches views, layers, heads and queries
    without a server. `layer` embeds that layer only; without it every layer is embedded."""
    page, name = build_export(req, lambda attention: attention_body(attention, ctx.settings, ctx.models, ctx.runtime))
    return HTMLResponse(page, headers={"Content-Disposition": f'attachment; filename="{name}"'})


ATTENTION = Analysis(
    name="attention",
    request=AttentionRequest,
    answer=AttentionResult,
    run=compute_attention,
    summary="Every head's scores and weights for a sequence, with masks",
    forms=("json", "arrays", "npz"),
    tags=("attention",),
    limits=(
        Limit(
            "max_flow_work",
            50_000_000,
            "(pair, edge) steps of max-flow one /api/attention with include attention_flow may take, counted after "
            "the forward and before any flow (38,937,600 steps took 3.6 s on 2 CPU cores)",
        ),
    ),
)
EXPORT = Analysis(
    name="export",
    request=ExportRequest,
    answer=None,
    run=export_html,
    summary="One self-contained HTML file of a view, interactive with no server",
    forms=("html",),
    tags=("attention",),
)
ANALYSES = (ATTENTION, EXPORT)
