"""The forms a result goes out in, chosen by the request's Accept: JSON (orjson), a NumPy .npz archive, and the
arrays form (a JSON header and the raw little-endian arrays, the page's transport; its layout and reader are in
attnlab/arrays.py). server/serialize.py shapes the result; this module only writes it."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import orjson
from fastapi.responses import JSONResponse, Response

from attnlab.arrays import MAGIC, MEDIA_TYPE  # the arrays form: its reader (read_arrays) ships with the client
from engine import progress


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
# OpenAPI's 200 of a route that answers through `answer`: JSON (its response_model), and these two forms
OTHER_FORMS = {
    "content": {NPZ_MEDIA_TYPE: {}, ARRAYS_MEDIA_TYPE: {}},
    "description": "JSON; .npz with Accept: application/x-npz; the arrays form (a JSON header, then raw "
    "little-endian arrays) with Accept: application/vnd.attnlab.arrays",
}


class ArraysResponse(Response):
    """The same result as one JSON header followed by the raw arrays, for readers that want typed arrays without
    parsing numbers (the page: a Float16Array or Float32Array straight over the bytes). The layout is written down
    once, in attnlab/arrays.py beside its reader."""

    media_type = ARRAYS_MEDIA_TYPE

    def render(self, content: Any) -> bytes | memoryview:
        blocks: dict[str, list[np.ndarray]] = {}
        stacks: set[str] = set()
        header_tree = _split_blocks(content, "", blocks, stacks)
        placed: dict[str, dict[str, Any]] = {}
        offset = 0
        for path, parts in blocks.items():
            first = parts[0]
            shape = [len(parts), *first.shape] if path in stacks else list(first.shape)
            placed[path] = {"dtype": str(first.dtype), "shape": shape, "offset": offset}
            offset += _align8(sum(p.nbytes for p in parts))
        header = orjson.dumps(_place(header_tree, placed))
        start = _align8(8 + len(header))
        # np.empty, not bytearray(n): no pass that zeroes the whole answer first, and NumPy asks for huge pages for
        # a large array (79 MB at 512 tokens: 100-137 ms to make and fill as a bytearray, 22-27 ms this way); the
        # few bytes of padding are zeroed one by one below
        dest = np.empty(start + offset, dtype=np.uint8)
        dest[0:4] = np.frombuffer(MAGIC, dtype=np.uint8)
        dest[4:8] = np.frombuffer(len(header).to_bytes(4, "little"), dtype=np.uint8)
        dest[8 : 8 + len(header)] = np.frombuffer(header, dtype=np.uint8)
        dest[8 + len(header) : start] = 0
        for path, parts in blocks.items():
            at = start + placed[path]["offset"]
            for part in parts:  # a stack's parts one after another: one block, no np.stack copy
                little = np.ascontiguousarray(part).astype(part.dtype.newbyteorder("<"), copy=False)
                dest[at : at + part.nbytes] = little.reshape(-1).view(np.uint8)
                at += part.nbytes
            dest[at : _align8(at)] = 0
        return dest.data  # a memoryview, no copy of the whole answer: Starlette sends it as it is


def _align8(n: int) -> int:
    return (n + 7) // 8 * 8


def _place(node: Any, placed: dict[str, dict[str, Any]]) -> Any:
    if isinstance(node, dict):
        if set(node) == {"$array"} and isinstance(node["$array"], str):
            return {"$array": placed[node["$array"]]}
        if "$stacked" in node:
            stacked = {k: placed[path] for k, path in node["$stacked"].items()}
            return {**{k: _place(v, placed) for k, v in node.items() if k != "$stacked"}, "$stacked": stacked}
        return {k: _place(v, placed) for k, v in node.items()}
    if isinstance(node, list):
        return node if _plain_list(node) else [_place(v, placed) for v in node]
    return node


def answer(body: dict[str, Any], accept: str | None) -> Response:
    """The result in the form the client asked for: JSON, .npz (scripts), or the arrays form (the page)."""
    progress.report("writing")
    if accept and ARRAYS_MEDIA_TYPE in accept:
        return ArraysResponse(body)
    if accept and NPZ_MEDIA_TYPE in accept:
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
        return node if _plain_list(node) else [_split_arrays(v, f"{path}.{i}", arrays) for i, v in enumerate(node)]
    return node


def _split_blocks(node: Any, path: str, blocks: dict[str, list[np.ndarray]], stacks: set[str]) -> Any:
    """The arrays form's split: as _split_arrays, each array a block of one part, except that a list of two or more
    dicts whose items all hold an array of one dtype and shape under the same key (a layer's heads, each with its
    weights) sends those arrays as one stack, a block of one part per item: the list becomes
    {"$items": [the items without the key], "$stacked": {key: path}}, or {"$columns": {field: [one value per
    item]}, "$stacked": ...} when what is left of the items is the same flat fields. The header then names a
    layer's weights once, not once per head (at 16 tokens the per-head entries were a fifth of the bytes), and a
    reader gets one typed array per layer."""
    if isinstance(node, np.ndarray):
        blocks[path] = [node]
        return {"$array": path}
    if isinstance(node, dict):
        return {k: _split_blocks(v, f"{path}.{k}" if path else str(k), blocks, stacks) for k, v in node.items()}
    if isinstance(node, list):
        if _plain_list(node):  # a head's entropy per query: 512 numbers at 512 tokens, 72 heads a layer
            return node
        keys = _stackable_keys(node)
        if not keys:
            return [_split_blocks(v, f"{path}.{i}", blocks, stacks) for i, v in enumerate(node)]
        stacked = {}
        for key in keys:
            stacked[key] = f"{path}.*.{key}"
            blocks[stacked[key]] = [item[key] for item in node]
            stacks.add(stacked[key])
        items = [{k: v for k, v in item.items() if k not in keys} for item in node]
        names = list(items[0])
        if all(list(item) == names and all(_scalar(v) for v in item.values()) for item in items):
            # what is left is flat and alike (a head's index and K/V group): one list per field
            return {"$columns": {k: [item[k] for item in items] for k in names}, "$stacked": stacked}
        return {
            "$items": [_split_blocks(v, f"{path}.{i}", blocks, stacks) for i, v in enumerate(items)],
            "$stacked": stacked,
        }
    return node


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


_PLAIN = frozenset((float, int, bool, str, type(None)))


def _plain_list(node: list[Any]) -> bool:
    """A list of plain values only (no dict, list or array inside), which the walks above return as it is: a
    check by exact type per item, in C (a generator took four times as long), and much faster than recursing into
    each (110,000 numbers at 512 tokens)."""
    return _PLAIN.issuperset(map(type, node))


def _stackable_keys(node: list[Any]) -> list[str]:
    """The keys under which every item of `node` (dicts, two or more) holds an array of one dtype and shape."""
    if len(node) < 2 or not all(isinstance(item, dict) for item in node):
        return []
    keys = []
    for key, first in node[0].items():
        if isinstance(first, np.ndarray) and all(
            isinstance(a := item.get(key), np.ndarray) and a.dtype == first.dtype and a.shape == first.shape
            for item in node
        ):
            keys.append(key)
    return keys
