"""Images in: a client's bytes decoded safely to RGB pixels, then made a checkpoint's pixel_values.

    bytes --decode_image--> (H, W, 3) uint8 RGB --preprocess--> (C, height, width) float32

decode_image checks, in this order, before any pixel is decoded:

    1. the byte count: at most ImageLimits.max_bytes (ATTNLAB_MAX_IMAGE_BYTES), and not zero;
    2. the kind, from the file's first bytes (its magic number), never from a name or a content type: PNG or JPEG,
       anything else (GIF, WebP, SVG, BMP, TIFF, ...) is refused naming the kinds accepted;
    3. the width and height the header declares (a PNG's IHDR chunk; a JPEG's frame header, SOFn), read here from
       the bytes: neither may be zero, and width x height at most ImageLimits.max_pixels (ATTNLAB_MAX_IMAGE_PIXELS).
       A decompression bomb (a small file that declares a huge image) stops here; so does a JPEG of more than
       MAX_JPEG_SEGMENTS segments before its frame header, or of more than MAX_JPEG_SCANS scans (a progressive
       JPEG's decoding costs a pass over the image per scan).

Only then does Pillow open the file (Image.open reads the header again; its size must agree) with that one format
allowed and PIL.Image.MAX_IMAGE_PIXELS set to the same limit, and decode it. A file Pillow cannot decode whole (a
truncated or damaged one) is refused: truncated images are never completed with grey. Every refusal is an
InputError naming the field and the limit, for the web layer's 4xx. The decoded image becomes RGB: a grey image's
level in each channel, a 16-bit one's top 8 bits, a palette's colours, and transparent pixels laid over white (as a
viewer shows them).

preprocess does what transformers' ViTImageProcessor (its PIL backend) does with a checkpoint's
preprocessor_config.json, to the same float32 values:

    do_resize      resize to size {height, width} with Pillow's filter `resample` (2 bilinear, 3 bicubic, ...)
    do_rescale     x * rescale_factor, in float64, then float32 (1/255 maps 0-255 to 0-1)
    do_normalize   (x - image_mean[c]) / image_std[c] per channel c, in float32

with the channels made the model's num_channels first: RGB to 1 channel is Pillow's luma (L), and a grey image
(an (H, W) array, such as a shipped digit) becomes 3 equal channels.
"""

from __future__ import annotations

import io
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from engine.errors import InputError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
ACCEPTED = "PNG or JPEG"
# other kinds a client may send, by their first bytes, to name them in the refusal
OTHER_KINDS = (
    (b"GIF87a", "a GIF"),
    (b"GIF89a", "a GIF"),
    (b"BM", "a BMP"),
    (b"II*\x00", "a TIFF"),
    (b"MM\x00*", "a TIFF"),
    (b"\x00\x00\x01\x00", "an ICO"),
    (b"8BPS", "a PSD"),
    (b"%PDF", "a PDF"),
)
# a JPEG's frame headers (SOF0-SOF15 less DHT C4, JPG C8 and DAC CC): each carries the height and width
JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM and RST0-7: markers with no length
JPEG_FILL = re.compile(rb"\xff+")
MAX_JPEG_SEGMENTS = 1024  # marker segments before a JPEG's frame header (a camera's file has about 10)
MAX_JPEG_SCANS = 256  # start-of-scan markers of one JPEG (libjpeg's progressive files have about 10)
MAX_SIDE = 4096  # the largest height or width a preprocessor_config.json may resize to
RESAMPLE = {0: "nearest", 1: "Lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "Hamming"}  # Pillow's numbers


@dataclass(frozen=True)
class ImageLimits:
    """The largest image a server decodes (server/config.py sets them from ATTNLAB_MAX_IMAGE_*)."""

    max_bytes: int = 5 * 1024 * 1024  # the file's bytes: 5 MiB, 7 MB as base64 (within ATTNLAB_MAX_BODY_BYTES)
    max_pixels: int = 4096 * 4096  # declared width x height: a 12-megapixel phone photo passes (48 MB as RGB)


def decode_image(data: bytes, limits: ImageLimits, field: str = "image") -> np.ndarray:
    """A PNG or JPEG file's bytes as (H, W, 3) uint8 RGB, checked as the module says; InputError(field) if not."""
    if len(data) > limits.max_bytes:
        raise InputError(
            field,
            f"got {len(data):,} bytes, more than the limit of {limits.max_bytes:,} (ATTNLAB_MAX_IMAGE_BYTES): "
            "send a smaller file",
        )
    if not data:
        raise InputError(field, f"got 0 bytes: send a {ACCEPTED} file")
    kind = sniff(data, field)
    width, height = png_size(data, field) if kind == "PNG" else jpeg_size(data, field)
    check_pixels(width, height, limits, field)
    if kind == "JPEG" and (scans := data.count(b"\xff\xda")) > MAX_JPEG_SCANS:
        raise InputError(
            field,
            f"the JPEG has {scans:,} scans, more than the limit of {MAX_JPEG_SCANS}: each costs a pass over the image",
        )
    Image.MAX_IMAGE_PIXELS = limits.max_pixels  # Pillow's own bomb check agrees with the one above
    try:
        with Image.open(io.BytesIO(data), formats=[kind]) as image:
            if image.size != (width, height):
                raise ValueError(f"Pillow reads {image.size[0]} x {image.size[1]} from a header of {width} x {height}")
            image.load()
            return to_rgb(image)
    except Exception as err:  # whatever the decoder raises on these bytes is a damaged file, not a server fault
        reason = re.sub(r"\s*<[^>]*>", "", str(err))[:200] or type(err).__name__  # no object's repr
        raise InputError(
            field, f"the {kind} could not be decoded ({reason}): send a whole, undamaged {ACCEPTED} file"
        ) from err


def sniff(data: bytes, field: str) -> str:
    """The file's kind from its first bytes: "PNG" or "JPEG"; any other kind is refused, named when known."""
    if data.startswith(PNG_MAGIC):
        return "PNG"
    if data.startswith(JPEG_MAGIC):
        return "JPEG"
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        named = "a WebP"
    elif head.startswith((b"<svg", b"<?xml", b"<!doctype svg")) or b"<svg" in head:
        named = "an SVG"
    else:
        named = next((name for magic, name in OTHER_KINDS if data.startswith(magic)), "not an image attnlab reads")
    raise InputError(field, f"this file is {named}: attnlab accepts {ACCEPTED} only (read from the file's first bytes)")


def png_size(data: bytes, field: str) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, which must come first (bytes 8-33)."""
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise InputError(field, f"the PNG has no IHDR header (its width and height): a truncated or damaged {ACCEPTED}")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def jpeg_size(data: bytes, field: str) -> tuple[int, int]:
    """(width, height) from a JPEG's frame header, found by walking its marker segments from the start: at most
    MAX_JPEG_SEGMENTS of them, each marker's run of 0xFF fill bytes skipped in one match, so the walk costs little
    whatever the file holds."""
    at = 2
    for _ in range(MAX_JPEG_SEGMENTS):
        fill = JPEG_FILL.match(data, at)  # a marker: 0xFF (and any fill bytes), then its code
        if fill is None or fill.end() + 3 > len(data):
            break
        marker = data[fill.end()]
        at = fill.end() + 1  # the segment's length, when it has one
        if marker in JPEG_STANDALONE:
            continue
        if marker in (0x00, 0xD9, 0xDA):  # no marker, the end of the image, or a scan, before any frame header
            break
        length = int.from_bytes(data[at : at + 2], "big")
        if marker in JPEG_FRAMES and length >= 7 and at + 7 <= len(data):
            height = int.from_bytes(data[at + 3 : at + 5], "big")
            width = int.from_bytes(data[at + 5 : at + 7], "big")
            return width, height
        if length < 2:
            break
        at += length
    else:
        raise InputError(
            field, f"the JPEG has more than {MAX_JPEG_SEGMENTS:,} segments before its frame header (the limit)"
        )
    raise InputError(
        field, "the JPEG has no frame header (its width and height) before its image data: truncated or damaged"
    )


def check_pixels(width: int, height: int, limits: ImageLimits, field: str) -> None:
    """The declared size: at least one pixel each way, at most limits.max_pixels in all."""
    if width == 0 or height == 0:
        raise InputError(field, f"the image declares {width} x {height} pixels: it needs at least 1 each way")
    if width * height > limits.max_pixels:
        raise InputError(
            field,
            f"the image declares {width:,} x {height:,} = {width * height:,} pixels, more than the limit of "
            f"{limits.max_pixels:,} (ATTNLAB_MAX_IMAGE_PIXELS): send a smaller image (it is refused before decoding)",
        )


def to_rgb(image: Image.Image) -> np.ndarray:
    """A decoded Pillow image as (H, W, 3) uint8 RGB (see the module's docstring)."""
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):  # 16-bit grey (or wider): its top 8 bits
        grey = np.clip(np.asarray(image, dtype=np.float64) / 256, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(grey[:, :, None], 3, axis=2))
    if "A" in image.mode or "transparency" in image.info:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    return np.asarray(image.convert("RGB"), dtype=np.uint8)


class PreprocessingError(ValueError):
    """A preprocessor_config.json attnlab cannot follow: the message names the key and what it reads."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"preprocessor_config.json: {key}: {message}")
        self.key = key


@dataclass(frozen=True)
class Preprocessing:
    """How a checkpoint's images become pixel_values: ViTImageProcessor's keys, with its defaults."""

    num_channels: int = 3  # the model's input channels (config.json num_channels)
    do_resize: bool = True
    height: int = 224  # size {"height", "width"}: the model's input
    width: int = 224
    resample: int = 2  # Pillow's filter number (RESAMPLE): 2 is bilinear
    do_rescale: bool = True
    rescale_factor: float = 1 / 255
    do_normalize: bool = True
    image_mean: tuple[float, ...] = (0.5,)  # one a channel, or one for all (ViTImageProcessor's 0.5 each)
    image_std: tuple[float, ...] = (0.5,)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], num_channels: int = 3) -> Preprocessing:
        """Read a preprocessor_config.json's object; keys it lacks take ViTImageProcessor's defaults, keys it has
        are checked (PreprocessingError names the one that is wrong)."""
        if not isinstance(num_channels, int) or num_channels not in (1, 3):
            raise PreprocessingError("num_channels", f"got {num_channels!r}: attnlab reads images of 1 or 3 channels")
        for key in ("do_center_crop", "do_pad"):
            if config.get(key):
                raise PreprocessingError(key, "attnlab resizes to size {height, width} and does no crop or padding")
        default = cls(num_channels=num_channels)
        size = config.get("size", {"height": default.height, "width": default.width})
        if not isinstance(size, Mapping) or set(size) != {"height", "width"}:
            raise PreprocessingError("size", f'got {size!r}: attnlab reads {{"height": H, "width": W}}')
        height, width = (_whole(size[k], f"size.{k}", 1, MAX_SIDE) for k in ("height", "width"))
        resample = _whole(config.get("resample", default.resample), "resample", 0, max(RESAMPLE))
        rescale_factor = _number(config.get("rescale_factor", default.rescale_factor), "rescale_factor")
        mean = _per_channel(config.get("image_mean", default.image_mean), "image_mean", num_channels)
        std = _per_channel(config.get("image_std", default.image_std), "image_std", num_channels)
        if any(s == 0 for s in std):
            raise PreprocessingError("image_std", f"got {list(std)}: a channel's std of 0 divides by zero")
        return cls(
            num_channels=num_channels,
            do_resize=_flag(config, "do_resize", default.do_resize),
            height=height,
            width=width,
            resample=resample,
            do_rescale=_flag(config, "do_rescale", default.do_rescale),
            rescale_factor=rescale_factor,
            do_normalize=_flag(config, "do_normalize", default.do_normalize),
            image_mean=mean,
            image_std=std,
        )

    def config(self) -> dict[str, Any]:
        """The preprocessor_config.json that reads back as this (ViTImageProcessor's keys)."""
        return {
            "image_processor_type": "ViTImageProcessor",
            "do_resize": self.do_resize,
            "size": {"height": self.height, "width": self.width},
            "resample": self.resample,
            "do_rescale": self.do_rescale,
            "rescale_factor": self.rescale_factor,
            "do_normalize": self.do_normalize,
            "image_mean": list(_spread(self.image_mean, self.num_channels)),
            "image_std": list(_spread(self.image_std, self.num_channels)),
        }


def preprocess(pixels: np.ndarray, how: Preprocessing) -> torch.Tensor:
    """(H, W) grey or (H, W, 3) RGB uint8 pixels as the model's input, (num_channels, height, width) float32."""
    image = Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8))  # mode L or RGB
    image = image.convert("L" if how.num_channels == 1 else "RGB")
    if how.do_resize and image.size != (how.width, how.height):
        image = image.resize((how.width, how.height), Image.Resampling(how.resample))
    x = np.asarray(image).reshape(image.height, image.width, how.num_channels).transpose(2, 0, 1)  # (C, H, W)
    # rescaled in float64, then float32, as transformers' rescale does
    x = (x.astype(np.float64) * how.rescale_factor).astype(np.float32) if how.do_rescale else x.astype(np.float32)
    if how.do_normalize:
        mean = np.array(_spread(how.image_mean, how.num_channels), dtype=np.float32)[:, None, None]
        std = np.array(_spread(how.image_std, how.num_channels), dtype=np.float32)[:, None, None]
        x = (x - mean) / std
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _spread(values: tuple[float, ...], channels: int) -> tuple[float, ...]:
    return values * channels if len(values) == 1 else values


def _flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise PreprocessingError(key, f"got {value!r}: true or false")
    return value


def _whole(value: Any, key: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PreprocessingError(key, f"got {value!r}: a whole number from {low} to {high}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise PreprocessingError(key, f"got {value!r}: a finite number")
    return float(value)


def _per_channel(value: Any, key: str, channels: int) -> tuple[float, ...]:
    values = list(value) if isinstance(value, list | tuple) else [value]
    if len(values) not in (1, channels):
        raise PreprocessingError(key, f"got {len(values)} values for {channels} channels: one, or one a channel")
    return tuple(_number(v, key) for v in values)
