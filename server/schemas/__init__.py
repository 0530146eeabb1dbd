"""The schemas every analysis shares (the /api/attention body and answer), /api/export's body, and those of
/api/health and /api/progress; every name is importable from here. An analysis's own request and answer
types live in its declaration (server/analyses/); /api/models's in server/schemas/models.py."""

from __future__ import annotations

from server.schemas.attention import (
    MAX_ITEMS,
    AttentionRequest,
    AttentionResult,
    BugOut,
    FiniteFloat,
    HeadResult,
    HeadStatsOut,
    HealthResponse,
    Include,
    LayerResult,
    Masks,
    Matrices,
    Matrix,
    Matrix2,
    ModelOptions,
    ProgressResponse,
    SourceRequest,
    Strict,
    Text,
    Weights,
)
from server.schemas.export import ExportRequest, ExportView
from server.schemas.models import ModelEntry, ModelReference, ModelsResponse, UnavailableModel

__all__ = [
    "MAX_ITEMS",
    "AttentionRequest",
    "AttentionResult",
    "BugOut",
    "ExportRequest",
    "ExportView",
    "FiniteFloat",
    "HeadResult",
    "HeadStatsOut",
    "HealthResponse",
    "Include",
    "LayerResult",
    "Masks",
    "Matrices",
    "Matrix",
    "Matrix2",
    "ModelEntry",
    "ModelOptions",
    "ModelReference",
    "ModelsResponse",
    "ProgressResponse",
    "SourceRequest",
    "Strict",
    "Text",
    "UnavailableModel",
    "Weights",
]
