"""Schema of /api/export: the /api/attention body plus what the saved page opens on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from server.schemas.attention import AttentionRequest, Text
from server.schemas.ints import Index

ExportView = Literal["layer", "all", "head"]


class ExportRequest(AttentionRequest):
    """The /api/attention body (its weights are embedded at float32 up to 65,536 weights and at float16 above, so
    `precision` stays out, and `include` names only the views rollout and attention_flow, embedded and drawn beside
    the weights with the `rollout` options) and the view the file opens on; every view of the file stays a choice
    in it."""

    view: ExportView = Field(
        "layer",
        description="layer: the heads of one layer as heatmaps; all: every head of every layer as thumbnails; "
        "head: one head large, with the retrieval of a query",
    )
    head: Index | None = Field(None, description="the head `view: head` opens (default 0)")
    query: Index | None = Field(None, description="the query whose retrieval it shows (default: the last)")
    palette: Literal["viridis", "cividis"] = Field("viridis", description="the weights' colour scale")
    matrix: Literal["weights", "moved"] = Field(
        "weights",
        description="what the heatmaps draw: the weights (with `sinks`, the view that hides those keys), or moved: "
        "weight x |v W_O| per key (include value_norms, embedded beside the weights)",
    )
    title: Text | None = Field(None, max_length=200, description="the page's title (default: the model and text)")
    positions_from: int = Field(
        0,
        ge=0,
        le=1,
        description="the count the file prints positions in: 0, the API's, or 1, as the chapter counts (the page's "
        "Display · Count positions from 1); `head`, `query` and the data stay 0-based",
    )
