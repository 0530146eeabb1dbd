"""The arrays form (`Accept: application/vnd.attnlab.arrays`): its writer and its reader. The reader needs NumPy and
the standard library only; the writer also orjson. server/forms.py answers with `write_arrays`; the attnlab client
and bench read with `read_arrays`; the page's reader is static/js/arrays.js.

The layout, little-endian:

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

The streamed form (`Accept: application/vnd.attnlab.arrays-stream`, /api/attention) is the same answer in frames, so
that a reader can draw the first layer while the others are computed and sent. Each frame is a uint32 length F
(little-endian) and F bytes: one document of the arrays form above whose JSON has one key,

    {"head": the answer, its `layers` holding the first layer sent}
    {"layer": one more layer, as an item of `layers`}       one per layer still to come, in the order sent
    {"tail": {"config": ..., "timings_ms": ..., ...}}       what only the whole pass knows, over the head's fields
    {"error": {status, code, field, message, details}}      instead of what was still to come: the answer failed

The answer is the head with the tail's fields over it and every layer in `layers` in index order (`assemble`): the
arrays form's answer, equal to it value for value. A stream that ends without its tail was cut short.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

MEDIA_TYPE = "application/vnd.attnlab.arrays"
STREAM_MEDIA_TYPE = "application/vnd.attnlab.arrays-stream"
MAGIC = b"ATNA"
FRAME_KINDS = ("head", "layer", "tail", "error")


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


def write_arrays(content: Any) -> memoryview:
    """`content` (a result whose matrices are NumPy arrays) in the arrays form: one JSON header, then the raw
    arrays. Returns a memoryview over one buffer, no copy of the whole answer."""
    import orjson  # the writer's only: a reader needs NumPy alone

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


def _place(node: Any, placed: dict[str, dict[str, Any]]) -> Any:
    if isinstance(node, dict):
        if set(node) == {"$array"} and isinstance(node["$array"], str):
            return {"$array": placed[node["$array"]]}
        if "$stacked" in node:
            stacked = {k: placed[path] for k, path in node["$stacked"].items()}
            return {**{k: _place(v, placed) for k, v in node.items() if k != "$stacked"}, "$stacked": stacked}
        return {k: _place(v, placed) for k, v in node.items()}
    if isinstance(node, list):
        return node if plain_list(node) else [_place(v, placed) for v in node]
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
        if plain_list(node):  # a head's entropy per query: 512 numbers at 512 tokens, 72 heads a layer
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


def plain_list(node: list[Any]) -> bool:
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


# ---- the streamed form -----------------------------------------------------------------------------------------------


def write_frame(kind: str, body: Any) -> tuple[bytes, memoryview]:
    """One frame of the streamed form: its 4-byte length and its document (two parts, so the document is not
    copied to put the length before it)."""
    if kind not in FRAME_KINDS:
        raise ValueError(f"a frame is one of {FRAME_KINDS}, got {kind!r}")
    document = write_arrays({kind: body})
    return len(document).to_bytes(4, "little"), document


def read_frames(chunks: Iterable[bytes | bytearray | memoryview]) -> Iterator[tuple[str, Any]]:
    """The frames of a streamed answer, (kind, body) each, as the chunks that carry it arrive (any sizes)."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        while len(pending) >= 4:
            size = int.from_bytes(pending[:4], "little")
            if len(pending) < 4 + size:
                break
            document = read_arrays(bytearray(pending[4 : 4 + size]))
            del pending[: 4 + size]
            if not isinstance(document, dict) or len(document) != 1 or next(iter(document)) not in FRAME_KINDS:
                raise ValueError(f"a frame holds one of {FRAME_KINDS}; got {sorted(document)}")
            yield next(iter(document.items()))
    if pending:
        raise ValueError(f"the stream ends inside a frame ({len(pending)} bytes of it)")


class StreamError(Exception):
    """A streamed answer that failed after it started: the error frame's body ({status, code, field, message})."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", "the answer failed"))
        self.error = error


def assemble(frames: Iterable[tuple[str, Any]]) -> Any:
    """The whole answer from its frames: the head, the tail's fields over it, every layer in index order."""
    head: dict[str, Any] | None = None
    layers: list[Any] = []
    for kind, body in frames:
        if kind == "error":
            raise StreamError(body)
        if kind == "head":
            head = body
            layers.extend(body["layers"])
        elif head is None:
            raise ValueError(f"a {kind} frame before the head")
        elif kind == "layer":
            layers.append(body)
        else:
            return {**head, **body, "layers": sorted(layers, key=lambda layer: layer["index"])}
    raise ValueError("the stream ended before its tail: it was cut short")
