from __future__ import annotations

from typing import Annotated

import torch
from fastapi import APIRouter, Header
from fastapi.responses import Response

from engine.analysis.audit import audit
from engine.interventions import Interventions
from server.compute import prepare, run_body
from server.computing import ComputeRoute
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.schemas import AttentionRequest, AttentionResult
from server.serialize import NPZ_MEDIA_TYPE, NPZResponse, ORJSONResponse

router = APIRouter(prefix="/api", tags=["attention"], route_class=ComputeRoute)


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
    """JSON by default; send `Accept: application/x-npz` for the compact binary form of large results.

    `texts` runs a batch (matrices gain a leading batch axis), `source` cross-attention (S x S_k matrices),
    `demo_bug` one of the chapter's classic bugs on purpose (marked wrong in `demo_bug`), and `include: ["audit"]`
    adds the audit record (measured peak memory and throughput, the engine against torch's SDPA, and the
    perturbation verdicts of the masks in force)."""
    prepared = prepare(req, settings, models, runtime)
    run = prepared.run(runtime, Interventions(bug=req.demo_bug))
    body = run_body(run, req, settings, runtime)
    if "audit" in req.include:
        with torch.inference_mode():
            body["audit"] = audit(prepared.model, prepared.inp, prepared.encoded, run, runtime.device, runtime.dtype)
    if accept and NPZ_MEDIA_TYPE in accept:
        return NPZResponse(body)
    return ORJSONResponse(body)
