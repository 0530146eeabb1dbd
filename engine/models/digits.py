"""`digits`: a small vision transformer attnlab trains and ships (engine/train_digits.py).

Its checkpoint, engine/checkpoints/digits/, is an ordinary Hugging Face directory (config.json, model.safetensors,
preprocessor_config.json) with its card, attnlab.json (the held-out accuracy and how it was trained); it is served
like any user's image checkpoint, through load_checkpoint, every layer computed by attnlab's engine.

It reads 8 x 8 grey digits as scikit-learn's set draws them: light ink on a black ground (0 the paper, 255 the most
ink). An image of another size is resized to 8 x 8 by its preprocessor_config.json; dark ink on white paper is read
as it is, not inverted, and the model has not seen such digits.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.models.checkpoint import load_checkpoint
from engine.models.declare import ModelSource
from engine.models.image_model import ImageCheckpointModel

DIRECTORY = Path(__file__).resolve().parent.parent / "checkpoints" / "digits"


def neighbour_words(local: object) -> str:
    """The card's most local head (engine/train_digits.py locality_card) in a sentence; "" when the card has none."""
    if not isinstance(local, dict) or not all(k in local for k in ("layer", "head", "reach", "neighbour_share")):
        return ""
    where = f"layer {local['layer']} head {local['head']}"
    figures = (
        f"{local['neighbour_share']:.0%} of a patch's weight on its {local['reach']} neighbouring patches, against "
        f"{local['uniform']:.0%} for a head that weighs every patch alike"
    )
    if local.get("local"):
        return f" Its {where} looks at a patch's neighbours: {figures}."
    return f" No head keeps to a patch's neighbours: the most local, {where}, puts {figures}."


class DigitsModel(ImageCheckpointModel):
    """The built-in digit reader: an image checkpoint like any other, loaded from the directory attnlab ships."""

    name = "digits"

    @classmethod
    def build(cls, source: ModelSource | None = None) -> ImageCheckpointModel:
        if source is not None:
            raise ValueError(f"digits reads its own checkpoint ({DIRECTORY}); serve another as NAME=DIR")
        # measured against transformers by tests/test_train_digits.py, not at every start
        model = load_checkpoint("digits", DIRECTORY, reference=False, image_class=cls)
        assert isinstance(model, cls), "digits' checkpoint is an image model"
        model.reference = {
            "library": None,
            "reason": "digits is not compared with transformers at load (tests/test_train_digits.py compares it)",
        }
        accuracy = model.card.get("held_out_accuracy")
        held = model.card.get("held_out", {}).get("count")
        e = model.embedding
        description = (
            f"digits: a {model.info.n_layers}-layer vision transformer ({model.info.n_heads} heads, width "
            f"{model.info.d_model}) trained by attnlab on scikit-learn's 8x8 handwritten digits, read in "
            f"{e.patch_size}x{e.patch_size} patches"
            + (f", {accuracy:.1%} of {held} held-out digits right" if isinstance(accuracy, float) and held else "")
            + ". It expects light ink on a dark ground, as the shipped digits are drawn."
            + neighbour_words(model.card.get("most_local_head"))
        )
        model.info = replace(model.info, description=description)
        return model
