"""A request sent as multipart/form-data: images as files instead of base64 in the JSON.

Every route whose body holds an `image` field (POST /api/attention and each analysis that reads an /api/attention
body, at the top or nested: /api/patch's clean.image and corrupted.image) takes, besides its JSON body, a form of

    request         the JSON body itself, as it would be sent alone
    image           a PNG or JPEG file for the body's `image`
    clean.image     ... or for the `image` of the body under `clean`, named by its dotted path

Every bound is checked while the form is read, before any work: the parts counted, each part's name one the route
takes and given once, a file's bytes against ATTNLAB_MAX_IMAGE_BYTES as they arrive (the part is refused at the
first byte past the limit, never kept whole), the `request` part a JSON object, and an image given either as a file
or in the JSON, not both. A file is then set into the body as base64, so it meets the very checks of an image sent
in the JSON (server/images.py, engine/vision/images.py decode_image): a GIF, an SVG, a bomb or a truncated PNG is
refused in the same words whichever way it came.
"""

from __future__ import annotations

import base64
import typing
from typing import Any

from pydantic import BaseModel
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from server.errors import ApiError
from server.schemas.attention import AttentionRequest

MEDIA_TYPE = "multipart/form-data"
REQUEST_PART = "request"
# the deepest an image field sits in a request body: /api/patch's clean.image
MAX_NESTING = 2


def image_paths(model: type[BaseModel], prefix: str = "", depth: int = 0) -> tuple[str, ...]:
    """The dotted paths of the `image` fields a request type holds: ("image",) for /api/attention, ("clean.image",
    "corrupted.image") for /api/patch, () for a route that takes no image."""
    paths: list[str] = [f"{prefix}image"] if issubclass(model, AttentionRequest) else []
    if depth >= MAX_NESTING:
        return tuple(paths)
    for name, field in model.model_fields.items():
        inner = [a for a in typing.get_args(field.annotation) or (field.annotation,) if a is not type(None)]
        for kind in inner:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                paths += image_paths(kind, f"{prefix}{name}.", depth + 1)
    return tuple(paths)


def is_multipart(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() == MEDIA_TYPE


def refused(status: int, message: str, field: str) -> ApiError:
    return ApiError(status, "too_large" if status == 413 else "invalid_request", message, field)


class FormReader:
    """The parts of one multipart body, read by python-multipart's streaming parser: the `request` part's bytes
    (within the body's own limit, already checked by server.app.BodyLimit) and each file part's, each file checked
    against `max_image_bytes` as its bytes arrive."""

    def __init__(self, paths: tuple[str, ...], max_image_bytes: int) -> None:
        self.paths = paths
        self.max_image_bytes = max_image_bytes
        self.parts: dict[str, list[bytes]] = {}
        self.sizes: dict[str, int] = {}
        self.name: str | None = None
        self.header_name = b""
        self.header_value = b""
        self.disposition = b""

    @property
    def names(self) -> str:
        return ", ".join([REQUEST_PART, *self.paths])

    def on_part_begin(self) -> None:
        if len(self.parts) >= 1 + len(self.paths):
            raise refused(
                422,
                f"more than {1 + len(self.paths)} parts: this route takes one part `request` (the JSON body) and a "
                f"file for each of {', '.join(self.paths)}",
                "body",
            )
        self.name = None
        self.disposition = b""

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.header_value += data[start:end]

    def on_header_end(self) -> None:
        if self.header_name.strip().lower() == b"content-disposition":
            self.disposition = self.header_value
        self.header_name = self.header_value = b""

    def on_headers_finished(self) -> None:
        kind, options = parse_options_header(self.disposition)
        raw = options.get(b"name")
        if kind != b"form-data" or raw is None:
            raise refused(422, "a part has no Content-Disposition: form-data; name=...: name every part", "body")
        name = raw.decode("utf-8", "replace")
        if name != REQUEST_PART and name not in self.paths:
            raise refused(422, f"not a part this route takes: it takes {self.names}", name[:100])
        if name in self.parts:
            raise refused(422, f"given twice: give each part once ({self.names})", name)
        self.name = name
        self.parts[name] = []
        self.sizes[name] = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        assert self.name is not None  # the parser calls on_headers_finished first
        size = self.sizes[self.name] + end - start
        if self.name != REQUEST_PART and size > self.max_image_bytes:
            raise refused(
                413,
                f"a file of more than {self.max_image_bytes:,} bytes, the limit (ATTNLAB_MAX_IMAGE_BYTES on this "
                "server): send a smaller file",
                self.name,
            )
        self.sizes[self.name] = size
        self.parts[self.name].append(data[start:end])

    def on_part_end(self) -> None:
        self.name = None


def read_form(
    body: bytes, content_type: str, paths: tuple[str, ...], max_image_bytes: int
) -> tuple[bytes, dict[str, bytes]]:
    """A multipart `body`'s `request` part (the JSON body, for server.scheduling.parse_body) and its files by the
    path each fills. Every refusal is an ApiError naming the part."""
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise refused(
            422, "multipart/form-data without a boundary=...: send the boundary that parts the body", "content-type"
        )
    reader = FormReader(paths, max_image_bytes)
    callbacks: Any = {name: getattr(reader, name) for name in dir(FormReader) if name.startswith("on_")}
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(body)
        parser.finalize()
    except FormParserError as err:
        raise refused(422, f"not a well-formed multipart/form-data body ({str(err)[:120]})", "body") from err
    if reader.name is not None:  # the body ended inside a part
        raise refused(422, "the multipart/form-data body ends inside a part: send it whole", reader.name)
    if REQUEST_PART not in reader.parts:
        raise refused(
            422, "no part named `request`: send the JSON body as the part `request`, files beside it", REQUEST_PART
        )
    request = b"".join(reader.parts.pop(REQUEST_PART))
    return request, {path: b"".join(chunks) for path, chunks in reader.parts.items()}


def with_files(data: Any, files: dict[str, bytes]) -> dict[str, Any]:
    """The `request` part's JSON with each file set, as base64, at its path."""
    if not isinstance(data, dict):
        raise refused(422, f"a JSON {type(data).__name__}, not an object: the part is the JSON body", REQUEST_PART)
    for path, file in files.items():
        place(data, path, base64.b64encode(file).decode("ascii"))
    return data


def place(data: dict[str, Any], path: str, value: str) -> None:
    """Set `value` at the dotted `path` of the body, whose parents must be objects (an absent one is made) and whose
    own field must be empty: an image comes as a file or in the JSON, not both."""
    *parents, last = path.split(".")
    node = data
    for i, key in enumerate(parents):
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            where = ".".join(parents[: i + 1])
            raise refused(422, f"a file part {path} was sent, but {where} in `request` is not an object", where)
    if node.get(last) is not None:
        raise refused(422, "given both as a file part and in the JSON of `request`: give it once", path)
    node[last] = value
