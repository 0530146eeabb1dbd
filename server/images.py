"""A request's image: `image` (a PNG or JPEG as base64) or `sample` (a shipped image's name) made the pixels an
image model reads, or refused with a 4xx naming the field.

    image --base64--> bytes --decode_image--> (H, W, 3) uint8 --preprocess--> (C, height, width) float32
    sample --load_sample--> (H, W) or (H, W, 3) uint8 -----------^

Every check comes before the work it guards: which fields go with which model, the base64's length against
ATTNLAB_MAX_IMAGE_BYTES before it is decoded, then decode_image's own checks (engine/vision/images.py) before a
pixel is decoded. Resizing and normalising are the model's preprocessor_config.json's.
"""

from __future__ import annotations

import base64
import binascii
import re

import torch

from engine.errors import InputError
from engine.models import AttentionModel
from engine.models.declare import reading
from engine.vision.images import ACCEPTED, Preprocessing, PreprocessingError, decode_image, preprocess
from engine.vision.samples import load_sample
from server.config import Settings
from server.errors import ApiError
from server.schemas import AttentionRequest

IMAGE_FIELDS = ("image", "sample")
TEXT_FIELDS = ("text", "tokens", "texts", "x", "source")
DATA_URL = re.compile(r"data:[\w.+/-]*(;[\w=.+-]+)*;base64,")


def check_image_fields(req: AttentionRequest, model: AttentionModel) -> None:
    """`image` or `sample` to a model that reads pixels, and only to one; never both, never beside text."""
    given = [f for f in IMAGE_FIELDS if getattr(req, f) is not None]
    reads_pixels = "pixels" in model.reads
    if len(given) == 2:
        raise ApiError(422, "invalid_request", "give image or sample, not both", "sample")
    if given and not reads_pixels:
        fields = [f for f in ("text", "tokens", "x", "scores", "pattern") if f in model.reads]
        reads = " or ".join([", ".join(fields[:-1]), fields[-1]] if len(fields) > 1 else fields) or "no image"
        raise ApiError(
            422,
            "invalid_request",
            f"{model.info.name} reads {reads}, not an image: send text, or choose a model that reads images "
            f"({reading('pixels')})",
            given[0],
        )
    if not reads_pixels:
        return
    wrong = next((f for f in TEXT_FIELDS if getattr(req, f) is not None), None)
    if wrong is not None:
        raise ApiError(
            422,
            "invalid_request",
            f"{model.info.name} reads an image's pixels, not {wrong}: send image (a {ACCEPTED} file as base64) or "
            "sample (a shipped image's name, such as digit-12)",
            wrong,
        )
    if not given:
        raise ApiError(
            422,
            "invalid_request",
            f"{model.info.name} reads an image: give image (a {ACCEPTED} file as base64) or sample (a shipped "
            "image's name, such as digit-12)",
            "image",
        )


def image_bytes(text: str, settings: Settings) -> bytes:
    """The file `image` spells in base64, its length checked against the server's limit before it is decoded."""
    found = DATA_URL.match(text)
    body = text[found.end() :] if found else text
    if len(body) > 4 * -(-settings.max_image_bytes // 3) + 4096:  # room for line breaks
        raise ApiError(
            413,
            "too_large",
            f"got {len(body):,} base64 characters, more than a file of {settings.max_image_bytes:,} bytes takes "
            "(ATTNLAB_MAX_IMAGE_BYTES on this server): send a smaller file",
            "image",
        )
    body = "".join(body.split())
    try:
        return base64.b64decode(body.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as err:
        raise ApiError(
            422,
            "invalid_request",
            f"not valid base64 ({str(err)[:120]}): send the {ACCEPTED} file's bytes in standard base64 "
            "(A-Z, a-z, 0-9, + and /, padded with =)",
            "image",
        ) from err


def request_pixels(req: AttentionRequest, model: AttentionModel, settings: Settings) -> torch.Tensor | None:
    """The request's image as the model's input, (C, height, width) float32; None when it gives none."""
    if req.image is not None:
        pixels = decode_image(image_bytes(req.image, settings), settings.image_limits(), "image")
    elif req.sample is not None:
        pixels = load_sample(req.sample).pixels
    else:
        return None
    channels = getattr(getattr(model, "embedding", None), "channels", 3)
    try:
        how = Preprocessing.from_config(getattr(model, "preprocessor", {}), channels)
    except PreprocessingError as err:
        raise ApiError(422, "invalid_request", f"{model.info.name} cannot read images: {err}", "model") from err
    try:
        return preprocess(pixels, how)
    except ValueError as err:  # an image Pillow cannot resize: never a server fault
        raise InputError(IMAGE_FIELDS[req.image is None], f"could not be preprocessed ({str(err)[:120]})") from err
