"""The client's side of the arrays form: its reader (wire/arrays.py, which holds the format and its writer too),
re-exported here as attnlab.arrays.read_arrays, and the client's two conversions to and from NumPy: a request body
with NumPy values in it as JSON (`jsonable`), and an /api/attention JSON answer with its matrices as NumPy arrays
(`attention_arrays`). NumPy and the standard library only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wire.arrays import MAGIC, MEDIA_TYPE, read_arrays

__all__ = ["MAGIC", "MEDIA_TYPE", "attention_arrays", "jsonable", "read_arrays"]


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
        if layer.get("eligible") is not None:
            layer["eligible"] = np.asarray(layer["eligible"], dtype=bool)
        if layer.get("head_similarity") is not None:
            layer["head_similarity"] = np.asarray(layer["head_similarity"], dtype=np.float32)
    return result
