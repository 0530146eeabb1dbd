"""The image families (vit, deit, dinov2, dinov2_with_registers) against transformers' eager forward.

Each family's tiny random checkpoint (tests/checkpoints.py make_image_checkpoint: no tokenizer.json, a
preprocessor_config.json) loads through load_checkpoint; its every layer's every head's weights, its last hidden
state (after the final LayerNorm) and its classifier's logits equal transformers' within 1e-5 in float32, at the
config's image size and at another (24 x 32 pixels: positions resized as interpolate_pos_encoding does). The same
comparison FAILS (by more than 1e-3) on a deliberately wrong embedding, for every family: the patches read column
by column, the positions resized otherwise (bilinear; without antialiasing where transformers antialiases), the
[CLS] token's embedding dropped (test_image_family_matches_transformers holds the same comparison right at both
sizes, so the change alone breaks it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

import engine.patches as patches
from engine.errors import InputError
from engine.masks import MaskSpec
from engine.models.checkpoint import CheckpointError, ImageCheckpointModel, load_checkpoint
from engine.models.run import RunInput
from tests.checkpoints import IMAGE_SIZES, PREPROCESSOR, VISION, make_image_checkpoint, make_image_model

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
OTHER = (24, 32)  # (height, width) unlike every config's square image: a 6 x 8 grid of 4-pixel patches
HEADED = {"vit": 3, "deit": 3, "dinov2": 3, "dinov2_with_registers": None}  # classes of each one's head
LEAD = {"vit": ["[CLS]"], "deit": ["[CLS]", "[DIST]"], "dinov2": ["[CLS]"]}
LEAD["dinov2_with_registers"] = ["[CLS]", "[REG1]", "[REG2]"]


class Loaded:
    """A family's transformers model and attnlab's model of its checkpoint, made once per module."""

    def __init__(self, family: str, directory: Path) -> None:
        self.family = family
        self.directory = make_image_checkpoint(family, directory)
        self.hf = make_image_model(family)
        self.model = load_checkpoint(family, self.directory, reference=False)
        assert isinstance(self.model, ImageCheckpointModel)

    def pixels(self, size: tuple[int, int] | None = None) -> torch.Tensor:
        image = IMAGE_SIZES[self.family][0]
        h, w = size or (image, image)
        return torch.randn((1, 3, h, w), generator=torch.Generator().manual_seed(h * 100 + w))

    def theirs(self, pixels: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """transformers' answer (attentions, and logits where there is a head) and its last hidden state."""
        resize = {} if self.family.startswith("dinov2") else {"interpolate_pos_encoding": True}  # dinov2: always
        with torch.no_grad():
            out = self.hf(pixel_values=pixels, output_attentions=True, **resize)
            return out, self.hf.base_model(pixel_values=pixels, **resize).last_hidden_state


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Loaded]:
    made: dict[str, Loaded] = {}

    def get(family: str) -> Loaded:
        if family not in made:
            made[family] = Loaded(family, tmp_path_factory.mktemp(family))
        return made[family]

    return get


def differences(m: Loaded, pixels: torch.Tensor) -> dict[str, float]:
    """The largest |attnlab - transformers| of every layer's every head's weights, of the last hidden state, and
    (where the checkpoint has a head) of the class logits."""
    assert isinstance(m.model, ImageCheckpointModel)
    run = m.model.run(RunInput(pixels=pixels), CPU, torch.float32)
    out, final = m.theirs(pixels)
    weights = max(
        float((theirs - ours.attn.weights).abs().max()) for theirs, ours in zip(out.attentions, run.layers, strict=True)
    )
    d = {"weights": weights, "output": float((final - run.layers[-1].resid_out).abs().max())}
    logits = m.model.logits(run)
    if hasattr(out, "logits"):
        assert logits is not None
        d["logits"] = float((out.logits - logits).abs().max())
    else:
        assert logits is None
    return d


@pytest.mark.parametrize("family", VISION)
def test_image_family_matches_transformers(family: str, loaded: Callable[[str], Loaded]) -> None:
    """At the config's image size and at another, every head's weights, the last hidden state and the logits."""
    m = loaded(family)
    for size in (None, OTHER):
        d = differences(m, m.pixels(size))
        assert all(diff < TOLERANCE for diff in d.values()), (family, size, d)
    assert m.model.info.family == family and not m.model.capabilities.decode
    assert m.model.preprocessor == PREPROCESSOR  # kept as it is, for whoever resizes and normalises images
    classes = HEADED[family]
    assert (m.model.classifier is not None) == (classes is not None)
    if m.model.classifier is not None:
        assert len(m.model.classifier.labels) == classes and m.model.classifier.labels[0] == "zero"


@pytest.mark.parametrize("family", ["vit", "dinov2_with_registers"])
def test_loader_reference_check_reads_the_directory(family: str, loaded: Callable[[str], Loaded]) -> None:
    """load_checkpoint's own comparison (transformers' AutoModel from the directory, engine/models/reference.py)."""
    model = load_checkpoint(family, loaded(family).directory)
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    d = model.reference["max_abs_diff"]
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


@pytest.mark.parametrize("family", VISION)
def test_image_tokens_named_and_grid_reported(family: str, loaded: Callable[[str], Loaded]) -> None:
    m = loaded(family)
    run = m.model.run(RunInput(pixels=m.pixels(OTHER)[0]), CPU, torch.float32)  # one image given as (C, H, W)
    lead = LEAD[family]
    rows, cols = OTHER[0] // IMAGE_SIZES[family][1], OTHER[1] // IMAGE_SIZES[family][1]
    assert run.config.patch_grid == (rows, cols)
    assert run.tokens[: len(lead)] == lead
    assert run.tokens[len(lead) :] == [f"p({r},{c})" for r in range(rows) for c in range(cols)]
    assert run.config.special == tuple([True] * len(lead) + [False] * rows * cols)
    assert m.model.count_tokens(RunInput(pixels=m.pixels(OTHER))) == len(run.tokens)
    hooks = run.cache()  # TransformerLens's names, as for a text
    assert hooks["hook_full_embed"].shape == (1, len(run.tokens), 32)
    assert hooks["blocks.1.attn.hook_pattern"].shape == (1, 4, len(run.tokens), len(run.tokens))


# --- negative controls: the same comparison, a wrong embedding, a difference far past the tolerance ---


def columns_first(grid: torch.Tensor) -> torch.Tensor:
    """The grid read column by column: patch (r, c) as token c * rows + r."""
    return grid.transpose(2, 3).flatten(2).transpose(1, 2)


def resized_otherwise(grid: torch.Tensor, rows: int, cols: int, antialias: bool) -> torch.Tensor:
    """Bilinear, or bicubic without antialiasing where transformers antialiases (DINOv2 with registers)."""
    mode = "bicubic" if antialias else "bilinear"
    return F.interpolate(grid, size=(rows, cols), mode=mode, align_corners=False)


CONTROLS = ("patches column by column", "positions resized otherwise", "[CLS] dropped")


@pytest.mark.parametrize("control", CONTROLS)
@pytest.mark.parametrize("family", VISION)
def test_wrong_embedding_breaks_the_equality(
    family: str, control: str, loaded: Callable[[str], Loaded], monkeypatch: pytest.MonkeyPatch
) -> None:
    m = loaded(family)
    size = OTHER if control == "positions resized otherwise" else None
    if control == "patches column by column":
        monkeypatch.setattr(patches, "grid_tokens", columns_first)
    elif control == "positions resized otherwise":
        monkeypatch.setattr(patches, "resize_grid", resized_otherwise)
    else:
        assert isinstance(m.model, ImageCheckpointModel)
        e = m.model.embedding
        monkeypatch.setattr(m.model, "embedding", replace(e, cls=torch.zeros_like(e.cls)))
    d = differences(m, m.pixels(size))
    assert d["weights"] > WRONG and d["output"] > WRONG, (family, control, d)


# --- what the model takes, and what it refuses ---


def test_masks_act_on_patches(loaded: Callable[[str], Loaded]) -> None:
    """Bidirectional by default; a blocked cell gets zero weight in every layer, and the rows sum to 1."""
    m = loaded("deit")
    pixels = m.pixels()
    plain = m.model.run(RunInput(pixels=pixels), CPU, torch.float32)
    assert all(bool((layer.attn.weights[0, :, 0, -1] > 0).all()) for layer in plain.layers)  # [CLS] sees the last
    blocked = m.model.run(RunInput(pixels=pixels, masks=MaskSpec(blocked=((0, 5),))), CPU, torch.float32)
    for layer in blocked.layers:
        w = layer.attn.weights[0]
        assert bool((w[:, 0, 5] == 0).all()) and torch.allclose(w.sum(-1), torch.ones(()))


def test_batch_of_images_equals_each_alone(loaded: Callable[[str], Loaded]) -> None:
    m = loaded("vit")
    one, two = m.pixels(), m.pixels(OTHER)[..., :16, :16]
    batch = m.model.run(RunInput(pixels=torch.cat((one, two))), CPU, torch.float32)
    for i, pixels in enumerate((one, two)):
        alone = m.model.run(RunInput(pixels=pixels), CPU, torch.float32)
        assert torch.allclose(batch.layers[-1].resid_out[i], alone.layers[-1].resid_out[0], atol=1e-6)


BAD_PIXELS = [
    (torch.zeros(16, 16), "2-dimensional"),
    (torch.zeros(1, 4, 16, 16), "got 4 channels: vit reads 3"),
    (torch.zeros(1, 3, 18, 16), "got height 18: need a multiple of the patch size 4"),
    (torch.zeros(1, 3, 16, 2), "got width 2: need a multiple of the patch size 4"),
    (torch.full((1, 3, 16, 16), float("nan")), "NaN or an infinity"),
    (torch.zeros(1, 3, 16, 16, dtype=torch.long), "need floats"),
    (torch.zeros(0, 3, 16, 16), "no images"),
]


@pytest.mark.parametrize(("pixels", "said"), BAD_PIXELS)
def test_bad_pixels_are_refused_by_field(pixels: torch.Tensor, said: str, loaded: Callable[[str], Loaded]) -> None:
    with pytest.raises(InputError) as err:
        loaded("vit").model.encode(RunInput(pixels=pixels))
    assert err.value.field == "pixels" and said in err.value.message, err.value.message


def test_text_to_an_image_model_and_pixels_to_a_text_model_are_refused(loaded: Callable[[str], Loaded]) -> None:
    with pytest.raises(InputError) as err:
        loaded("vit").model.encode(RunInput(text="a cat"))
    assert err.value.field == "text" and "reads pixels" in err.value.message
    with pytest.raises(InputError) as none:
        loaded("vit").model.encode(RunInput())
    assert none.value.field == "pixels" and "got no image" in none.value.message


def test_wrong_tensor_shape_is_refused(loaded: Callable[[str], Loaded], tmp_path: Path) -> None:
    """A position table one row too long for config.json's image and patch sizes: refused, naming both shapes."""
    source = loaded("vit").directory
    for name in ("config.json", "preprocessor_config.json"):
        (tmp_path / name).write_text((source / name).read_text())
    tensors = load_file(str(source / "model.safetensors"))
    key = "vit.embeddings.position_embeddings"
    tensors[key] = torch.cat((tensors[key], tensors[key][:, :1]), dim=1)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint("bad", tmp_path, reference=False)
    assert err.value.reason == (
        f"model.safetensors: tensor {key} has shape [1, 18, 32], expected [1, 17, 32] from config.json"
    )


BAD_CONFIGS = [
    ("vit", {"patch_size": 32}, "patch_size: got 32 for image_size 16: a patch must fit in the image"),
    ("vit", {"image_size": [16, 16]}, "image_size: got [16, 16]: attnlab reads a square image and patch"),
    ("vit", {"num_attention_heads": 5}, "num_attention_heads: got 5 heads for hidden_size 32"),
    ("vit", {"hidden_act": "mish"}, "hidden_act: got 'mish'"),
    ("vit", {"id2label": {"0": "a", "2": "b"}}, "id2label: got ids [0, 2]"),
    ("vit", {"architectures": "ViTForImageClassification"}, "architectures: got 'ViTForImageClassification'"),
    ("dinov2", {"mlp_ratio": 0}, "mlp_ratio: got 0"),
    ("dinov2_with_registers", {"num_register_tokens": -1}, "num_register_tokens: got -1"),
]


@pytest.mark.parametrize(("family", "changes", "said"), BAD_CONFIGS)
def test_bad_image_config_field_is_named(
    family: str, changes: dict[str, Any], said: str, loaded: Callable[[str], Loaded], tmp_path: Path
) -> None:
    source = loaded(family).directory
    config = json.loads((source / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    (tmp_path / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError) as err:
        load_checkpoint("bad", tmp_path, reference=False)
    assert err.value.reason.startswith("config.json ") and said in err.value.reason, err.value.reason
