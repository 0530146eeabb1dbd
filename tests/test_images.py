"""Images in: the shipped samples, decoding a PNG or JPEG to RGB, and preprocessing equal to transformers'
ViTImageProcessor (its PIL backend; torchvision's is not installed) on the same image and the same
preprocessor_config.json."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from engine.errors import InputError
from engine.vision.images import ImageLimits, Preprocessing, PreprocessingError, decode_image, preprocess
from engine.vision.samples import SAMPLES_FILE, load_sample, sample_names

IMAGENET = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


def file_of(pixels: np.ndarray, kind: str = "PNG", mode: str | None = None) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels, mode).save(out, kind)
    return out.getvalue()


def test_the_samples_are_the_digits_and_the_two_photographs() -> None:
    names = sample_names()
    assert len(names) == 1797 + 2 and names[:2] == ["digit-0", "digit-1"] and names[-2:] == ["china", "flower"]
    digit = load_sample("digit-1796")
    assert digit.pixels.shape == (8, 8) and digit.pixels.dtype == np.uint8 and digit.label == 8
    assert digit.pixels.max() == 255 and not digit.pixels.flags.writeable  # counts 0-16 scaled to 0-255
    china = load_sample("china")
    assert china.pixels.shape == (149, 224, 3) and china.label is None
    assert {load_sample(f"digit-{i}").label for i in range(10)} == set(range(10))
    assert SAMPLES_FILE.stat().st_size < 400_000  # the file stays small: 1,797 digits and two 224-wide photographs


@pytest.mark.parametrize("name", ["digit-1797", "digit-01", "digit--1", "Digit-3", "china.jpg", "x" * 10_000, ""])
def test_an_unknown_sample_names_the_field_and_the_samples(name: str) -> None:
    with pytest.raises(InputError) as caught:
        load_sample(name)
    assert caught.value.field == "sample" and "digit-0 ... digit-1796" in caught.value.message
    assert len(caught.value.message) < 300


def test_decoding_keeps_every_pixel_of_a_png_and_reads_a_jpeg_as_pillow_does() -> None:
    china = load_sample("china").pixels
    assert np.array_equal(decode_image(file_of(china), ImageLimits()), china)
    jpeg = file_of(china, "JPEG")
    assert np.array_equal(decode_image(jpeg, ImageLimits()), np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB")))


def test_decoding_makes_grey_16_bit_and_transparent_images_rgb() -> None:
    grey = load_sample("digit-3").pixels
    assert np.array_equal(decode_image(file_of(grey), ImageLimits()), np.repeat(grey[:, :, None], 3, axis=2))
    deep = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1000).astype(np.uint16)
    decoded = decode_image(file_of(deep), ImageLimits())
    assert np.array_equal(decoded[:, :, 0], (deep >> 8).astype(np.uint8)) and decoded.shape == (8, 8, 3)
    # a stroke drawn on a transparent page: the page is white, as a viewer shows it, the stroke black
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[2:6, 3, 3] = 255
    decoded = decode_image(file_of(rgba), ImageLimits())
    assert decoded[0, 0].tolist() == [255, 255, 255] and decoded[3, 3].tolist() == [0, 0, 0]


# (id, the image, preprocessor_config.json, the model's channels)
CASES: list[tuple[str, str, dict[str, Any], int]] = [
    ("china-224-bilinear-imagenet", "china", {"size": {"height": 224, "width": 224}, **IMAGENET}, 3),
    ("flower-bicubic-96x128", "flower", {"size": {"height": 96, "width": 128}, "resample": 3}, 3),
    ("digit-as-rgb-32-nearest", "digit-7", {"size": {"height": 32, "width": 32}, "resample": 0}, 3),
    ("digit-grey-8x8", "digit-5", {"size": {"height": 8, "width": 8}, "image_mean": [0.5], "image_std": [0.5]}, 1),
    ("photo-as-grey-16-no-normalise", "china", {"size": {"height": 16, "width": 16}, "do_normalize": False}, 1),
    ("no-resize-no-rescale", "digit-9", {"do_resize": False, "do_rescale": False, **IMAGENET}, 3),
]


def reference_input(pixels: np.ndarray, channels: int) -> np.ndarray:
    """The image as transformers is given it: (H, W, 1) grey for one channel, (H, W, 3) for three."""
    if channels == 1:
        return np.asarray(Image.fromarray(pixels).convert("L"))[:, :, None]
    return pixels if pixels.ndim == 3 else np.repeat(pixels[:, :, None], 3, axis=2)


@pytest.mark.parametrize(("sample", "config", "channels"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_preprocessing_equals_vit_image_processor(
    sample: str, config: dict[str, Any], channels: int, tmp_path: Path
) -> None:
    from transformers.models.vit.image_processing_pil_vit import ViTImageProcessorPil

    written = Preprocessing.from_config(config, channels).config()
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(written))
    reference = ViTImageProcessorPil.from_pretrained(tmp_path)
    pixels = load_sample(sample).pixels
    given = reference_input(pixels, channels)
    expected = reference(given, input_data_format="channels_last", return_tensors="np")["pixel_values"][0]
    read = Preprocessing.from_config(json.loads((tmp_path / "preprocessor_config.json").read_text()), channels)
    ours = preprocess(pixels, read).numpy()
    size = (read.height, read.width) if read.do_resize else pixels.shape[:2]
    assert ours.dtype == np.float32 and ours.shape == expected.shape == (channels, *size)
    assert np.abs(ours - expected).max() <= 1e-6
    # the negative control: another resampling filter (where the size changes), or another mean, fails the check
    resized = read.do_resize and size != pixels.shape[:2]
    wrong = {"resample": 2 if read.resample != 2 else 3} if resized else {"image_mean": [0.1] * channels}
    other = Preprocessing.from_config({**written, **wrong}, channels)
    assert np.abs(preprocess(pixels, other).numpy() - expected).max() > 1e-3


BAD_CONFIGS: list[tuple[dict[str, Any], int, str]] = [
    ({"size": {"shortest_edge": 224}}, 3, "size"),
    ({"size": {"height": 0, "width": 8}}, 3, "size.height"),
    ({"size": {"height": 8, "width": 100_000}}, 3, "size.width"),
    ({"resample": 9}, 3, "resample"),
    ({"image_std": [0.5, 0.0, 0.5]}, 3, "image_std"),
    ({"image_mean": [0.5, 0.5]}, 3, "image_mean"),
    ({"rescale_factor": float("nan")}, 3, "rescale_factor"),
    ({"do_resize": "yes"}, 3, "do_resize"),
    ({"do_center_crop": True, "crop_size": {"height": 8, "width": 8}}, 3, "do_center_crop"),
    ({}, 4, "num_channels"),
]


@pytest.mark.parametrize(("config", "channels", "key"), BAD_CONFIGS, ids=[b[2] for b in BAD_CONFIGS])
def test_a_preprocessor_config_attnlab_cannot_follow_names_its_key(
    config: dict[str, Any], channels: int, key: str
) -> None:
    with pytest.raises(PreprocessingError) as caught:
        Preprocessing.from_config(config, channels)
    assert caught.value.key == key and str(caught.value).startswith(f"preprocessor_config.json: {key}: ")
