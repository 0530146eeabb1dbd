"""The reader of the arrays form (`Accept: application/vnd.attnlab.arrays`), with NumPy and the standard library only.

The layout (server/forms.py's ArraysResponse writes it), little-endian:

    bytes 0-3      b"ATNA"
    bytes 4-7      uint32: the header's length H
    bytes 8..8+H   UTF-8 JSON: the result, each array replaced by
                   {"$array": {"dtype": "float16" | "float32" | "float64" | "bool", "shape": [...], "offset": o}}
    from 8+H rounded up to a multiple of 8: the arrays, C order, each starting at a multiple of 8 bytes
                   (`offset` counts from there)

A list whose items (dicts) all hold an array of one dtype and shape under the same key (a layer's heads, each with
its weights) comes as one stacked array: {"$items": [the items without that key], "$stacked": {key: spec}}, where
spec's shape has the item count first. Item i gets the stack's slice i back under the key. When what is left of
the items is the same flat fields, they come as columns: {"$columns": {field: [one value per item]}, "$stacked": ...}.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

MEDIA_TYPE = "application/vnd.attnlab.arrays"
MAGIC = b"ATNA"


def read_arrays(data: bytes | bytearray | memoryview) -> Any:
    """The arrays form back into the result, each array a NumPy array: a view over `data` (read-only over bytes,
    writable over a bytearray)."""
    if bytes(data[:4]) != MAGIC:
        raise ValueError(f"not the attnlab arrays form: it starts with {MAGIC!r}, this with {bytes(data[:4])!r}")
    if len(data) < 8:
        raise ValueError(f"the arrays form is at least 8 bytes; got {len(data)}")
    length = int.from_bytes(data[4:8], "little")
    if 8 + length > len(data):
        raise ValueError(f"the header claims {length} bytes but only {len(data) - 8} follow the first 8")
    start = _align8(8 + length)

    def array(spec: dict[str, Any]) -> np.ndarray:
        dtype = np.dtype(spec["dtype"]).newbyteorder("<")
        count = int(np.prod(spec["shape"], dtype=np.int64))
        flat = np.frombuffer(data, dtype=dtype, count=count, offset=start + spec["offset"])
        return flat.reshape(spec["shape"])

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            spec = node.get("$array")
            if len(node) == 1 and isinstance(spec, dict):
                return array(spec)
            if "$stacked" in node and ("$items" in node or "$columns" in node):
                columns = node.get("$columns")
                if columns is not None:
                    n = next(iter(node["$stacked"].values()))["shape"][0]
                    items = [{k: values[i] for k, values in columns.items()} for i in range(n)]
                else:
                    items = build(node["$items"])
                for key, stacked in node["$stacked"].items():
                    whole = array(stacked)
                    for i, item in enumerate(items):
                        item[key] = whole[i]
                return items
            return {k: build(v) for k, v in node.items()}
        if isinstance(node, list):
            return [build(v) for v in node]
        return node

    return build(json.loads(bytes(data[8 : 8 + length])))


def _align8(n: int) -> int:
    return (n + 7) // 8 * 8


def jsonable(value: Any) -> Any:
    """A request body with NumPy arrays and scalars in it (x, weights) as plain JSON values."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


MATRIX_KEYS = ("scores", "weights", "contexts", "q", "k", "v")


def attention_arrays(result: dict[str, Any]) -> dict[str, Any]:
    """An /api/attention result read from JSON, with its matrices as NumPy arrays, as the arrays form has them:
    `eligible` and `reasons` bool, the heads' matrices, `output` and `head_similarity` float32 (float64 when the
    server computes in float64). Changes `result` in place and returns it."""
    config = result.get("config") or {}
    dtype = np.float64 if config.get("dtype") == "float64" else np.float32
    if result.get("eligible") is not None:
        result["eligible"] = np.asarray(result["eligible"], dtype=bool)
    if isinstance(result.get("reasons"), dict):
        result["reasons"] = {k: np.asarray(g, dtype=bool) for k, g in result["reasons"].items()}
    for layer in result.get("layers") or []:
        for head in layer.get("heads") or []:
            for key in MATRIX_KEYS:
                if head.get(key) is not None:
                    head[key] = np.asarray(head[key], dtype=dtype)
        if layer.get("output") is not None:
            layer["output"] = np.asarray(layer["output"], dtype=dtype)
        if layer.get("head_similarity") is not None:
            layer["head_similarity"] = np.asarray(layer["head_similarity"], dtype=np.float32)
    return result
