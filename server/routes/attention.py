from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from server.compute import execute, prepare
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.schemas import AttentionRequest, AttentionResult
from server.serialize import ORJSONResponse, serialize_run

router = APIRouter(prefix="/api", tags=["attention"])


@router.post(
    "/attention",
    response_model=AttentionResult,
    response_class=ORJSONResponse,
    summary="Every head's scores and weights for a sequence, with masks",
)
def compute_attention(req: AttentionRequest, settings: SettingsDep, models: ModelsDep, runtime: RuntimeDep) -> Response:
    model, inp = prepare(req, settings, models, runtime)
    run = execute(model, inp, runtime)
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
    return ORJSONResponse(body)
