"""Hostile images are refused by engine/vision/images.py decode_image, before any pixel is decoded where the header
already says no: each refusal is an InputError naming the field and the limit (the web layer's 4xx), never a
crash, a hang or an allocation the size of what a file merely declares."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

import engine.vision.images as images
from engine.errors import InputError
from engine.vision.images import ImageLimits, decode_image
from server.config import Settings
from tests.helpers import assert_error

SMALL = ImageLimits(max_bytes=64 * 1024, max_pixels=1_000_000)


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, idat: bytes | None = None) -> bytes:
    """A grey 8-bit PNG built by hand: IHDR declaring width x height, then `idat` (by default, zero rows of it
    compressed, for images small enough to build)."""
    if idat is None:
        idat = zlib.compress(b"\x00" * ((width + 1) * height), 9)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return images.PNG_MAGIC + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def encoded(kind: str, size: tuple[int, int] = (32, 24), mode: str = "RGB", **options: Any) -> bytes:
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (size[1], size[0], len(mode)), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels.squeeze(-1) if mode == "L" else pixels, mode).save(out, kind, **options)
    return out.getvalue()


def bomb() -> bytes:
    """A 5 kB PNG that decodes to 4,000,000 grey pixels (4 MB): a bomb against a 1,000,000-pixel limit."""
    return png(2000, 2000)


def jpeg_of_height(height: int) -> bytes:
    """A real JPEG with its frame header's height rewritten."""
    data = bytearray(encoded("JPEG"))
    at = data.index(b"\xff\xc0")
    data[at + 5 : at + 7] = height.to_bytes(2, "big")
    return bytes(data)


def jpeg_of_scans(markers: int) -> bytes:
    """A real JPEG with a comment segment holding `markers` start-of-scan marker bytes after its frame header."""
    data = encoded("JPEG")
    comment = b"\xff\xda" * markers
    return data[:-2] + b"\xff\xfe" + struct.pack(">H", len(comment) + 2) + comment + data[-2:]


SVG = b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000"></svg>'

# (id, the file, limits, words of the message); every refusal names the field `image`
HOSTILE: list[tuple[str, Callable[[], bytes], ImageLimits, tuple[str, ...]]] = [
    ("bomb-png", bomb, SMALL, ("2,000 x 2,000 = 4,000,000 pixels", "limit of 1,000,000", "ATTNLAB_MAX_IMAGE_PIXELS")),
    (
        "png-declaring-1e10-pixels",
        lambda: png(100_000, 100_000, idat=zlib.compress(b"\x00" * 1000)),
        ImageLimits(),
        ("100,000 x 100,000 = 10,000,000,000 pixels", "limit of 16,777,216", "before decoding"),
    ),
    (
        "png-past-the-default-limit",
        lambda: png(5000, 5000, idat=zlib.compress(b"\x00" * 5001)),
        ImageLimits(),
        ("5,000 x 5,000 = 25,000,000 pixels", "ATTNLAB_MAX_IMAGE_PIXELS"),
    ),
    ("jpeg-declaring-too-many", lambda: jpeg_of_height(60000), SMALL, ("32 x 60,000", "limit of 1,000,000")),
    ("png-zero-width", lambda: png(0, 10, idat=b""), SMALL, ("0 x 10 pixels", "at least 1")),
    ("jpeg-zero-height", lambda: jpeg_of_height(0), SMALL, ("32 x 0 pixels", "at least 1")),
    ("truncated-jpeg", lambda: encoded("JPEG")[:400], SMALL, ("JPEG could not be decoded", "whole, undamaged")),
    ("truncated-png", lambda: encoded("PNG")[:600], SMALL, ("PNG could not be decoded", "whole, undamaged")),
    ("png-damaged-data", lambda: png(16, 16, idat=b"not zlib at all"), SMALL, ("PNG could not be decoded",)),
    ("png-without-header", lambda: images.PNG_MAGIC + b"\x00" * 8, SMALL, ("no IHDR header",)),
    ("jpeg-without-frame", lambda: b"\xff\xd8\xff\xd9" + b"\x00" * 40, SMALL, ("no frame header", "truncated")),
    ("jpeg-of-many-scans", lambda: jpeg_of_scans(300), SMALL, ("301 scans", "limit of 256")),  # its own 1 and 300
    (
        "jpeg-of-many-segments",
        lambda: b"\xff\xd8" + b"\xff\xfe\x00\x02" * 2000 + encoded("JPEG")[2:],
        SMALL,
        ("more than 1,024 segments",),
    ),
    ("gif", lambda: encoded("GIF", mode="L"), SMALL, ("a GIF", "PNG or JPEG only")),
    ("svg", lambda: SVG, SMALL, ("an SVG", "PNG or JPEG only")),
    ("webp", lambda: b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 40, SMALL, ("a WebP", "PNG or JPEG only")),
    ("bmp", lambda: encoded("BMP"), SMALL, ("a BMP", "PNG or JPEG only")),
    ("text", lambda: b"hello", SMALL, ("not an image attnlab reads",)),
    ("empty", lambda: b"", SMALL, ("0 bytes",)),
    ("too-many-bytes", lambda: b"\x89PNG" + b"\x00" * 70_000, SMALL, ("70,004 bytes", "limit of 65,536", "BYTES")),
]


@pytest.mark.parametrize(("file", "limits", "words"), [row[1:] for row in HOSTILE], ids=[row[0] for row in HOSTILE])
def test_a_hostile_image_is_a_named_refusal(
    file: Callable[[], bytes], limits: ImageLimits, words: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = file()
    refused_before_decoding = not any(w in " ".join(words) for w in ("could not be decoded",))
    opened: list[int] = []
    real_open = Image.open

    def counted_open(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(images.Image, "open", counted_open)
    with pytest.raises(InputError) as caught:
        decode_image(data, limits)
    err = caught.value
    assert err.field == "image" and str(err).startswith("image: ")
    for w in words:
        assert w in err.message, (w, err.message)
    # what the header or the first bytes refuse never reaches Pillow's decoder
    assert opened == ([] if refused_before_decoding else [1])


def test_the_bomb_decodes_when_the_limit_allows_it() -> None:
    """The negative control: the same bomb within a larger limit is an ordinary image, 2,000 x 2,000 of black."""
    pixels = decode_image(bomb(), ImageLimits(max_pixels=4_000_000))
    assert pixels.shape == (2000, 2000, 3) and pixels.dtype == np.uint8 and not pixels.any()


def test_pillows_own_limit_is_set_to_the_servers() -> None:
    decode_image(encoded("PNG"), SMALL)
    assert SMALL.max_pixels == Image.MAX_IMAGE_PIXELS


def test_the_limits_are_settings_with_the_engines_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().image_limits() == ImageLimits()
    monkeypatch.setenv("ATTNLAB_MAX_IMAGE_PIXELS", "1000000")
    monkeypatch.setenv("ATTNLAB_MAX_IMAGE_BYTES", "65536")
    assert Settings().image_limits() == SMALL


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# At the API: (id, body, status, field, words), on a server with SMALL's limits serving textbook and digits
API_HOSTILE: list[tuple[str, dict[str, Any], int, str, tuple[str, ...]]] = [
    ("bad-base64", {"model": "digits", "image": "iVBORw0K*GgoA"}, 422, "image", ("not valid base64",)),
    ("base64-not-ascii", {"model": "digits", "image": "iVBORw0KGgoé"}, 422, "image", ("not valid base64",)),
    ("bomb-png", {"model": "digits", "image": b64(bomb())}, 422, "image", ("4,000,000 pixels", "limit of 1,000,000")),
    (
        "png-declaring-1e10-pixels",
        {"model": "digits", "image": b64(png(100_000, 100_000, idat=zlib.compress(b"\x00" * 1000)))},
        422,
        "image",
        ("100,000 x 100,000", "ATTNLAB_MAX_IMAGE_PIXELS"),
    ),
    ("gif", {"model": "digits", "image": b64(encoded("GIF", mode="L"))}, 422, "image", ("a GIF", "PNG or JPEG only")),
    ("svg", {"model": "digits", "image": b64(SVG)}, 422, "image", ("an SVG", "PNG or JPEG only")),
    (
        "base64-past-the-byte-limit",
        {"model": "digits", "image": "A" * 100_000},
        413,
        "image",
        ("100,000 base64 characters", "65,536 bytes", "ATTNLAB_MAX_IMAGE_BYTES"),
    ),
    ("image-to-a-text-model", {"model": "textbook", "image": b64(encoded("PNG"))}, 422, "image", ("not an image",)),
    ("sample-to-a-text-model", {"model": "textbook", "sample": "china"}, 422, "sample", ("reads text", "digits")),
    ("text-to-digits", {"model": "digits", "text": "a b"}, 422, "text", ("reads an image's pixels, not text",)),
    ("tokens-to-digits", {"model": "digits", "tokens": ["a"]}, 422, "tokens", ("not tokens", "sample")),
    ("nothing-to-digits", {"model": "digits"}, 422, "image", ("give image", "or sample")),
    (
        "image-and-sample",
        {"model": "digits", "image": b64(encoded("PNG")), "sample": "digit-1"},
        422,
        "sample",
        ("not both",),
    ),
    ("unknown-sample", {"model": "digits", "sample": "digit-1797"}, 422, "sample", ("digit-0 ... digit-1796",)),
    ("sample-name-too-long", {"model": "digits", "sample": "x" * 65}, 422, "sample", ("at most 64",)),
]


@pytest.mark.parametrize(
    ("body", "status", "field", "words"), [row[1:] for row in API_HOSTILE], ids=[row[0] for row in API_HOSTILE]
)
def test_a_hostile_image_at_the_api_is_a_named_4xx(
    shared_client: Callable[..., TestClient],
    body: dict[str, Any],
    status: int,
    field: str,
    words: tuple[str, ...],
) -> None:
    client = shared_client(models="textbook,digits", max_image_bytes=SMALL.max_bytes, max_image_pixels=SMALL.max_pixels)
    assert_error(client.post("/api/attention", json=body), status, field, *words)
