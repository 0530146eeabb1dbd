"""The images attnlab ships: scikit-learn's handwritten digits and its two sample photographs, by name.

They lie in one file beside this module, samples.safetensors (written once by engine/vision/export_samples.py),
read with safetensors and numpy only:

    digit-N    N = 0 ... 1796: the data set's N-th digit, (8, 8) uint8 grey, 0 the paper and 255 the most ink
    china      (149, 224, 3) uint8 RGB: the photograph of a temple in China
    flower     (149, 224, 3) uint8 RGB: the photograph of a flower

A sample's pixels are what an uploaded image decodes to (engine/vision/images.py decode_image), so both go through
the same preprocessing.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from engine.errors import InputError

SAMPLES_FILE = Path(__file__).resolve().parent / "samples.safetensors"
DIGIT = re.compile(r"digit-(0|[1-9][0-9]{0,3})")  # digit-0 ... digit-9999; the range is checked against the file
PHOTOS = ("china", "flower")


@dataclass(frozen=True)
class Sample:
    name: str
    pixels: np.ndarray  # (H, W) uint8 grey or (H, W, 3) uint8 RGB, read-only
    label: int | None  # the digit a digit-N shows; None for a photograph


@functools.cache
def _arrays() -> dict[str, np.ndarray]:
    """Every array of the samples file, read once, read-only."""
    arrays = load_file(str(SAMPLES_FILE))
    for array in arrays.values():
        array.flags.writeable = False
    return arrays


def digits() -> tuple[np.ndarray, np.ndarray]:
    """All the digits: images (N, 8, 8) uint8 and labels (N,) uint8, read-only."""
    arrays = _arrays()
    return arrays["digits.images"], arrays["digits.labels"]


def sample_names() -> list[str]:
    """Every sample's name: digit-0 ... digit-1796, then the photographs."""
    count = len(digits()[1])
    return [f"digit-{i}" for i in range(count)] + list(PHOTOS)


def load_sample(name: str) -> Sample:
    """One sample by name; an unknown name is an InputError naming `sample` and the names there are."""
    images, labels = digits()
    match = DIGIT.fullmatch(name) if isinstance(name, str) else None
    if match is not None and int(match.group(1)) < len(labels):
        index = int(match.group(1))
        return Sample(name, images[index], int(labels[index]))
    if name in PHOTOS:
        return Sample(name, _arrays()[f"photo.{name}"], None)
    shown = name[:40] + "..." if isinstance(name, str) and len(name) > 40 else name
    raise InputError(
        "sample",
        f"no sample named {shown!r}: the samples are digit-0 ... digit-{len(labels) - 1} (scikit-learn's "
        f"handwritten digits) and {', '.join(PHOTOS)}",
    )
