from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response

from server.compute import prepare
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.schemas import AttentionRequest, AttentionResult
from server.serialize import NPZ_MEDIA_TYPE, NPZResponse, ORJSONResponse, serialize_run

router = APIRouter(prefix="/api", tags=["attention"])


@router.post(
    "/attention",
    response_model=AttentionResult,
    response_class=ORJSONResponse,
    summary="Every head's scores and weights for a sequence, with masks",
    responses={200: {"content": {NPZ_MEDIA_TYPE: {}}, "description": "JSON, or .npz with Accept: application/x-npz"}},
)
def compute_attention(
    req: AttentionRequest,
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """JSON by default; send `Accept: application/x-npz` for the compact binary form of large results."""
    run = prepare(req, settings, models, runtime).run(runtime)
    body = serialize_run(
        run,
        layer=req.layer,
        include=req.include,
        scale=req.scale,
        all_masked=req.all_masked,
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        max_values=settings.max_result_values,
    )
    if accept and NPZ_MEDIA_TYPE in accept:
        return NPZResponse(body)
    return ORJSONResponse(body)
