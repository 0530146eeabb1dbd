"""The forms a result goes out in, chosen by the request's Accept: JSON (orjson), a NumPy .npz archive, and the
arrays form (a JSON header and the raw little-endian arrays, the page's transport; its layout, writer and reader
are in wire/arrays.py). server/serialize.py shapes the result; this module only writes it."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson
from fastapi.responses import JSONResponse, Response

from engine import progress
from wire.arrays import MEDIA_TYPE, STREAM_MEDIA_TYPE, plain_list, write_arrays


class ORJSONResponse(JSONResponse):
    """JSON written by orjson. A JSONResponse, so OpenAPI documents a route's 200 with its response_model's schema
    (FastAPI writes {"type": "string"} for any other response class)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:  # an integer past 64 bits (a cost estimate for absurd shapes), which orjson cannot write
            return orjson.dumps(_wide_ints_exact(content), option=orjson.OPT_SERIALIZE_NUMPY)


def _wide_ints_exact(node: Any) -> Any:
    """Integers past 64 bits written as their exact digits, as JSON allows: still integers, as the answer's schema
    says (a float would round them: 1e+26)."""
    if isinstance(node, bool):
        return node
    if isinstance(node, int) and not -(2**63) <= node < 2**64:
        return orjson.Fragment(str(node).encode())
    if isinstance(node, dict):
        return {k: _wide_ints_exact(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_wide_ints_exact(v) for v in node]
    return node


NPZ_MEDIA_TYPE = "application/x-npz"


class NPZResponse(Response):
    """The same result as a NumPy .npz archive: every matrix as a float32/bool array, the rest in meta.json."""

    media_type = NPZ_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        arrays: dict[str, np.ndarray] = {}
        meta = _split_arrays(content, "", arrays)
        arrays["meta.json"] = np.frombuffer(orjson.dumps(meta, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **arrays)
        return buf.getvalue()


ARRAYS_MEDIA_TYPE = MEDIA_TYPE
# OpenAPI's 200 of a route that answers in more forms than JSON (its response_model): each form's media type
FORM_MEDIA = {
    "npz": (NPZ_MEDIA_TYPE, ".npz with Accept: application/x-npz"),
    "arrays": (MEDIA_TYPE, "the arrays form (a JSON header, then raw little-endian arrays) with Accept: " + MEDIA_TYPE),
    "stream": (
        STREAM_MEDIA_TYPE,
        "the arrays form a layer at a time, as they are computed, with Accept: " + STREAM_MEDIA_TYPE,
    ),
}


def other_forms(forms: tuple[str, ...]) -> dict[str, Any]:
    """OpenAPI's 200 for an analysis answering in `forms`."""
    named = [FORM_MEDIA[f] for f in forms if f in FORM_MEDIA]
    return {
        "content": {media: {} for media, _ in named},
        "description": "; ".join(["JSON", *(say for _, say in named)]),
    }


class ArraysResponse(Response):
    """The same result as one JSON header followed by the raw arrays, for readers that want typed arrays without
    parsing numbers (the page: a Float16Array or Float32Array straight over the bytes). The layout is written down
    once, in wire/arrays.py beside its reader."""

    media_type = ARRAYS_MEDIA_TYPE

    def render(self, content: Any) -> bytes | memoryview:
        return write_arrays(content)  # a memoryview, no copy of the whole answer: Starlette sends it as it is


def accepted(accept: str | None) -> list[str]:
    """The media types an Accept header names, in its order, without their parameters (q=...)."""
    return [part.split(";")[0].strip().lower() for part in (accept or "").split(",") if part.strip()]


def form_of(accept: str | None, forms: tuple[str, ...] = ("json", "arrays", "npz", "stream")) -> str:
    """The form an answer goes out in for this Accept header, among `forms`: the streamed arrays form, the arrays
    form or .npz when the header names its media type, else JSON (for any other header, as for none)."""
    named = accepted(accept)
    for form, media in (("stream", STREAM_MEDIA_TYPE), ("arrays", ARRAYS_MEDIA_TYPE), ("npz", NPZ_MEDIA_TYPE)):
        if form in forms and media in named:
            return form
    return "json"


FORM_MEDIA_TYPES = {
    "json": "application/json",
    "arrays": ARRAYS_MEDIA_TYPE,
    "npz": NPZ_MEDIA_TYPE,
    "stream": STREAM_MEDIA_TYPE,
}


def chosen_accept(accept: str | None, forms: tuple[str, ...]) -> str:
    """The Accept header as the answer will honour it: the media type of the one form, among `forms`, that the
    answer goes out in. Everything downstream (the bound on the answer's bytes, the writer) reads this, so the form
    whose size is checked is the form sent (a form the analysis lacks is answered, and bounded, as JSON)."""
    return FORM_MEDIA_TYPES[form_of(accept, forms)]


def answer(body: dict[str, Any], accept: str | None) -> Response:
    """The result in the form the client asked for: JSON, .npz (scripts), or the arrays form (the page). A whole
    answer has no streamed form (server/stream.py sends one of its own)."""
    progress.report("writing")
    form = form_of(accept, ("json", "arrays", "npz"))
    if form == "arrays":
        return ArraysResponse(body)
    if form == "npz":
        return NPZResponse(body)
    return ORJSONResponse(body)


def _split_arrays(node: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """Move every ndarray into `arrays` under a dotted path (layers.0.heads.3.weights); return what is left."""
    if isinstance(node, np.ndarray):
        arrays[path] = node
        return {"$array": path}
    if isinstance(node, dict):
        return {k: _split_arrays(v, f"{path}.{k}" if path else str(k), arrays) for k, v in node.items()}
    if isinstance(node, list):
        return node if plain_list(node) else [_split_arrays(v, f"{path}.{i}", arrays) for i, v in enumerate(node)]
    return node
