from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import Response

from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.forms import OTHER_FORMS, ORJSONResponse, answer
from server.prepare import attention_body
from server.scheduling import ComputeRoute
from server.schemas import AttentionRequest, AttentionResult
from server.schemas.errors import COMPUTE_ERRORS

router = APIRouter(prefix="/api", tags=["attention"], route_class=ComputeRoute, responses=COMPUTE_ERRORS)


@router.post(
    "/attention",
    response_model=AttentionResult,
    response_class=ORJSONResponse,
    summary="Every head's scores and weights for a sequence, with masks",
    responses={200: OTHER_FORMS},
)
def compute_attention(
    req: AttentionRequest,
    settings: SettingsDep,
    models: ModelsDep,
    runtime: RuntimeDep,
    accept: Annotated[str | None, Header()] = None,
) -> Response:
    """JSON by default; `Accept: application/x-npz` for a NumPy archive, `Accept: application/vnd.attnlab.arrays`
    for the arrays form the page reads (a JSON header, then the raw arrays); `precision: "float16"` halves either.

    `texts` runs a batch (matrices gain a leading batch axis), `source` cross-attention (S x S_k matrices),
    `demo_bug` one of the chapter's classic bugs on purpose (marked wrong in `demo_bug`), and `include: ["audit"]`
    adds the audit record (measured peak memory and throughput, the engine against torch's SDPA, and the
    perturbation verdicts of the masks in force)."""
    return answer(attention_body(req, settings, models, runtime, accept), accept)
