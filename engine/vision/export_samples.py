"""Write the images attnlab ships (engine/vision/samples.safetensors) from scikit-learn's bundled data, once, by hand.

    python -m engine.vision.export_samples

scikit-learn ships a small data set of handwritten digits (1,797 images of 8 x 8 pixels, each pixel a count of
0-16 from a 4 x 4 block of a 32 x 32 bitmap) and two sample photographs (china.jpg and flower.jpg, 640 x 427). This
script reads them with scikit-learn and writes them as plain uint8 arrays in one safetensors file, so a server (and
engine/vision/samples.py, which reads it) needs neither scikit-learn nor pickle:

    digits.images   (1797, 8, 8)   uint8: the counts 0-16 scaled to 0-255 (round(count * 255 / 16))
    digits.labels   (1797,)        uint8: the digit each image shows, 0-9
    photo.china     (H, W, 3)      uint8 RGB: china.jpg, its long side resized to PHOTO_SIDE (Lanczos)
    photo.flower    (H, W, 3)      uint8 RGB: flower.jpg, the same

scikit-learn is needed only here (a one-off export); it is no dependency of the server or the tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.numpy import save_file

from engine.vision.samples import SAMPLES_FILE

PHOTO_SIDE = 224  # the long side of each photograph as shipped: a ViT's usual input, and a small file
DIGIT_MAX = 16  # the data set's largest count (ink in all 16 pixels of a 4 x 4 block)


def digit_pixels(counts: np.ndarray) -> np.ndarray:
    """Counts 0-16 (float) as grey levels 0-255 (uint8)."""
    return np.rint(counts * (255 / DIGIT_MAX)).astype(np.uint8)


def downscaled(photo: np.ndarray, side: int = PHOTO_SIDE) -> np.ndarray:
    """An (H, W, 3) uint8 photograph with its long side `side`, the aspect kept (Lanczos)."""
    height, width = photo.shape[:2]
    scale = side / max(height, width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(photo).resize(size, Image.Resampling.LANCZOS), dtype=np.uint8)


def export(out: Path = SAMPLES_FILE) -> dict[str, tuple[int, ...]]:
    """Read scikit-learn's digits and sample photographs, write them to `out`; the shapes written, by name."""
    from sklearn.datasets import load_digits, load_sample_images

    digits = load_digits()
    photos = load_sample_images()
    arrays = {
        "digits.images": digit_pixels(digits.images),
        "digits.labels": digits.target.astype(np.uint8),
    }
    for path, photo in zip(photos.filenames, photos.images, strict=True):
        arrays[f"photo.{Path(path).stem}"] = downscaled(photo)
    metadata = {
        "source": "scikit-learn's bundled data (sklearn.datasets.load_digits, load_sample_images)",
        "digits": f"counts 0-{DIGIT_MAX} scaled to 0-255",
        "photos": f"long side resized to {PHOTO_SIDE} pixels (Lanczos)",
    }
    save_file(arrays, str(out), metadata=metadata)
    return {name: tuple(a.shape) for name, a in arrays.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=SAMPLES_FILE)
    args = parser.parse_args(argv)
    shapes = export(args.out)
    for name, shape in shapes.items():
        print(f"{name}: {shape}")
    print(f"{args.out}: {args.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
