"""GET /api/samples/{name}: a shipped image (engine/vision/samples.py) as a PNG, so that the page draws the very
pixels a request naming `sample` runs on. A sample is at most the photographs' 149 x 224 RGB (a few tens of KB as a
PNG); an unknown name is a 404 naming `sample` and the names there are."""

from __future__ import annotations

import functools
import io

from fastapi import APIRouter, Response
from PIL import Image

from engine.errors import InputError
from engine.vision.samples import load_sample
from server.errors import ApiError
from server.schemas.errors import ANY_ROUTE, errors

router = APIRouter(prefix="/api", tags=["models"], responses=errors(*ANY_ROUTE, 404))


@functools.lru_cache(maxsize=64)
def sample_png(name: str) -> bytes:
    """The sample's pixels as they are (grey or RGB, its own size) written as a PNG."""
    out = io.BytesIO()
    Image.fromarray(load_sample(name).pixels).save(out, "PNG")
    return out.getvalue()


@router.get(
    "/samples/{name}",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}, "description": "the sample's pixels as a PNG"}},
)
async def sample_image(name: str) -> Response:
    """A shipped image by name (digit-0 ... digit-1796, china, flower) as a PNG of its own pixels."""
    try:
        png = sample_png(name)
    except InputError as err:
        raise ApiError(404, "not_found", err.message, "sample") from None
    return Response(png, media_type="image/png", headers={"Cache-Control": "public, max-age=86400"})
