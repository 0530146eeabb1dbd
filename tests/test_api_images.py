"""Images in through the API: `sample` (a shipped image by name) and `image` (a PNG or JPEG as base64) reach the
`digits` model as the pixels its preprocessor_config.json makes, and /api/models says what an image model reads."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

from engine.models import RunInput, build
from engine.models.digits import DIRECTORY
from engine.models.image_model import ImageCheckpointModel
from engine.vision.images import Preprocessing, preprocess
from engine.vision.samples import load_sample
from tests.helpers import assert_error

MODELS = "textbook,digits"
PATCHES = [f"p({r},{c})" for r in range(4) for c in range(4)]


@pytest.fixture(scope="module")
def digits() -> ImageCheckpointModel:
    model = build("digits")
    assert isinstance(model, ImageCheckpointModel)
    return model


def engine_weights(model: ImageCheckpointModel, pixels: np.ndarray) -> list[torch.Tensor]:
    """Every layer's (H, S, S) weights of the engine's own run on `pixels` preprocessed as the model's config says."""
    x = preprocess(pixels, Preprocessing.from_config(model.preprocessor, model.embedding.channels))
    run = model.run(RunInput(pixels=x), torch.device("cpu"), torch.float32)
    return [layer.attn.weights[0] for layer in run.layers]


def answered_weights(body: dict[str, Any]) -> list[torch.Tensor]:
    return [torch.tensor([head["weights"] for head in layer["heads"]]) for layer in body["layers"]]


def png_base64(pixels: np.ndarray) -> str:
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode("ascii")


def test_digits_on_a_sample_answers_its_patches_as_the_engine_runs_them(
    shared_client: Callable[..., TestClient], digits: ImageCheckpointModel
) -> None:
    resp = shared_client(models=MODELS).post("/api/attention", json={"model": "digits", "sample": "digit-12"})
    assert resp.status_code == 200, resp.text[:500]
    body = resp.json()
    assert body["tokens"] == ["[CLS]", *PATCHES]
    assert body["config"]["patch_grid"] == [4, 4]
    ours = engine_weights(digits, load_sample("digit-12").pixels)
    for got, want in zip(answered_weights(body), ours, strict=True):
        assert got.shape == (4, 17, 17)
        assert torch.allclose(got.sum(-1), torch.ones(4, 17), atol=1e-5)
        assert torch.allclose(got, want, atol=1e-6), float((got - want).abs().max())
    # a negative control: another digit's weights are not these
    other = engine_weights(digits, load_sample("digit-13").pixels)[0]
    assert not torch.allclose(answered_weights(body)[0], other, atol=1e-3)


def test_a_png_of_the_digit_gives_the_samples_weights(
    shared_client: Callable[..., TestClient], digits: ImageCheckpointModel
) -> None:
    client = shared_client(models=MODELS)
    pixels = np.asarray(load_sample("digit-12").pixels)
    by_name = client.post("/api/attention", json={"model": "digits", "sample": "digit-12"}).json()
    encoded = png_base64(pixels)
    wrapped = "data:image/png;base64," + "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    for image in (encoded, wrapped):  # as sent, and as a data URL broken into lines
        resp = client.post("/api/attention", json={"model": "digits", "image": image})
        assert resp.status_code == 200, resp.text[:500]
        assert resp.json()["tokens"] == by_name["tokens"]
        assert resp.json()["layers"] == by_name["layers"]
    # an RGB image four times the size is made grey and resized to 8 x 8 as the preprocessor config says
    big = np.repeat(np.repeat(pixels, 4, axis=0), 4, axis=1)
    rgb = np.stack([big] * 3, axis=-1)
    resp = client.post("/api/attention", json={"model": "digits", "image": png_base64(rgb)})
    assert resp.status_code == 200, resp.text[:500]
    assert resp.json()["tokens"] == ["[CLS]", *PATCHES]
    for got, want in zip(answered_weights(resp.json()), engine_weights(digits, big), strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    # a JPEG photograph: decoded, made grey and resized to the digits' 8 x 8
    out = io.BytesIO()
    Image.fromarray(np.asarray(load_sample("china").pixels)).save(out, "JPEG")
    photo = client.post("/api/attention", json={"model": "digits", "image": base64.b64encode(out.getvalue()).decode()})
    assert photo.status_code == 200 and photo.json()["tokens"] == ["[CLS]", *PATCHES], photo.text[:500]


def test_an_analysis_takes_the_sample_as_attention_does(shared_client: Callable[..., TestClient]) -> None:
    client = shared_client(models=MODELS)
    body = {"model": "digits", "sample": "digit-3", "include": ["weights"]}
    plain = client.post("/api/attention", json=body).json()
    resp = client.post("/api/compare", json={"a": body, "b": {**body, "sample": "digit-4"}})
    assert resp.status_code == 200, resp.text[:500]
    assert resp.json()["a"]["layers"] == plain["layers"]
    heads = client.post("/api/heads", json={"model": "digits", "sample": "digit-3"})  # scored on the image
    assert heads.status_code == 200, heads.text[:500]


def test_models_lists_digits_with_what_it_reads(shared_client: Callable[..., TestClient]) -> None:
    entries = {m["name"]: m for m in shared_client(models=MODELS).get("/api/models").json()["models"]}
    card = json.loads((DIRECTORY / "attnlab.json").read_text())
    digits = entries["digits"]
    assert digits["reads"] == ["pixels"] and digits["family"] == "vit"
    assert digits["card"]["held_out_accuracy"] == card["held_out_accuracy"]
    assert f"{card['held_out_accuracy']:.1%}" in digits["description"]
    local = digits["card"]["most_local_head"]  # its most local head (engine/vision/neighbours.py), in words too
    assert local == card["most_local_head"] and f"layer {local['layer']} head {local['head']}" in digits["description"]
    assert digits["image"] == {
        "channels": 1,
        "size": [8, 8],
        "patch_size": 2,
        "patch_grid": [4, 4],
        "samples": {"digits": 1797, "photos": ["china", "flower"]},
    }
    assert entries["textbook"]["image"] is None


def test_the_token_limit_counts_an_images_patches_before_the_forward(
    shared_client: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = shared_client(models=MODELS, max_tokens=16)

    def no_forward(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the forward ran")

    monkeypatch.setattr(ImageCheckpointModel, "run", no_forward)
    resp = client.post("/api/attention", json={"model": "digits", "sample": "digit-12"})
    assert_error(resp, 422, "sample", "got 17 tokens, limit 16", "ATTNLAB_MAX_TOKENS")


@pytest.mark.parametrize("name", ["digit-12", "china"])
def test_a_sample_is_served_as_a_png_of_the_pixels_it_runs_on(
    shared_client: Callable[..., TestClient], name: str
) -> None:
    resp = shared_client(models=MODELS).get(f"/api/samples/{name}")
    assert resp.status_code == 200, resp.text[:300]
    assert resp.headers["content-type"] == "image/png"
    served = np.asarray(Image.open(io.BytesIO(resp.content)))
    np.testing.assert_array_equal(served, load_sample(name).pixels)


@pytest.mark.parametrize("name", ["digit-1797", "digit-01", "mandrill", "x" * 300])
def test_an_unknown_sample_is_a_404_naming_sample(shared_client: Callable[..., TestClient], name: str) -> None:
    resp = shared_client(models=MODELS).get(f"/api/samples/{name}")
    assert_error(resp, 404, "sample", "digit-1796")
