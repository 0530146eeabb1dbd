"""Images as files: a multipart/form-data request (the JSON body as the part `request`, each image a file part named
by its field's path) answers as the same body with the image as base64 does, and every bound of the form is a 4xx
naming the part (server/uploads.py)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

import attnlab
from engine.vision.samples import load_sample
from tests.fixtures import Through
from tests.helpers import assert_error
from tests.test_hostile_images import SMALL, SVG, bomb, encoded

SETTINGS = {"models": "textbook,digits", "max_image_bytes": SMALL.max_bytes, "max_image_pixels": SMALL.max_pixels}
PATCH = {
    "clean": {"model": "digits"},
    "corrupted": {"model": "digits", "sample": "digit-13"},
    "hook": "z",
    "metric": {"kind": "output_distance"},
}


@pytest.fixture(scope="module")
def client(shared_client: Callable[..., TestClient]) -> TestClient:
    return shared_client(**SETTINGS)


def png_of(name: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.asarray(load_sample(name).pixels)).save(out, "PNG")
    return out.getvalue()


def form(request: Any, **files: bytes) -> dict[str, Any]:
    """TestClient's `files=` for a multipart body: the part `request` (JSON unless given as bytes) and file parts."""
    text = request if isinstance(request, bytes) else json.dumps(request).encode()
    parts: dict[str, Any] = {"request": (None, text, "application/json")}
    return {
        "files": {**parts, **{name.replace("__", "."): ("file.png", data, "image/png") for name, data in files.items()}}
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_a_file_part_answers_as_the_same_image_in_base64_does(client: TestClient) -> None:
    png = png_of("digit-12")
    by_json = client.post("/api/attention", json={"model": "digits", "image": b64(png)})
    by_form = client.post("/api/attention", **form({"model": "digits"}, image=png))
    assert by_json.status_code == by_form.status_code == 200, by_form.text[:300]
    assert by_form.json()["tokens"] == by_json.json()["tokens"]
    assert by_form.json()["layers"] == by_json.json()["layers"]
    # the negative control: another digit's file gives other weights
    other = client.post("/api/attention", **form({"model": "digits"}, image=png_of("digit-13")))
    assert other.json()["layers"] != by_json.json()["layers"]


def test_patch_takes_each_side_as_a_file_part(client: TestClient) -> None:
    png = png_of("digit-12")
    clean = {**PATCH["clean"], "image": b64(png)}
    by_json = client.post("/api/patch", json={**PATCH, "clean": clean})
    by_form = client.post("/api/patch", **form(PATCH, clean__image=png))
    assert by_json.status_code == by_form.status_code == 200, by_form.text[:300]
    assert by_form.json() == by_json.json()
    # the corrupted side as a file too, in place of its sample: both the same image, so nothing to recover
    both = {**PATCH, "corrupted": {"model": "digits"}}
    same = client.post("/api/patch", **form(both, clean__image=png, corrupted__image=png))
    assert same.status_code == 200, same.text[:300]
    assert same.json()["clean_metric"] == same.json()["corrupted_metric"]


def test_the_client_sends_a_path_or_bytes_as_a_file(client: TestClient, tmp_path: Path) -> None:
    png = png_of("digit-12")
    (tmp_path / "digit.png").write_bytes(png)
    with attnlab.Client("http://testserver", transport=Through(client)) as api:
        want = api.attention("digits", image=b64(png), include=["weights"])
        for image in (tmp_path / "digit.png", png):
            got = api.attention("digits", image=image, include=["weights"])
            np.testing.assert_array_equal(
                got["layers"][-1]["heads"][0]["weights"], want["layers"][-1]["heads"][0]["weights"]
            )
        sides = {"clean": {"model": "digits", "image": tmp_path / "digit.png"}, "corrupted": PATCH["corrupted"]}
        patched = api.patch(**sides, hook="z", metric=PATCH["metric"])
        by_json = client.post("/api/patch", json={**PATCH, "clean": {"model": "digits", "image": b64(png)}}).json()
        assert patched["recovered"] == by_json["recovered"] and patched["columns"] == 4  # z: layers x heads


# (id, path, form arguments, status, field, words): each refusal of the form names its part
TOO_BIG = b"\x89PNG" + b"\x00" * 70_000
CUT_SHORT = b'--b\r\nContent-Disposition: form-data; name="request"\r\n\r\n{}'
A = "/api/attention"
REFUSED: list[tuple[str, str, Callable[[], dict[str, Any]], int, str, tuple[str, ...]]] = [
    (
        "file-past-the-limit",
        A,
        lambda: form({"model": "digits"}, image=TOO_BIG),
        413,
        "image",
        ("65,536 bytes", "ATTNLAB_MAX_IMAGE_BYTES"),
    ),
    (
        "unknown-part",
        A,
        lambda: form({"model": "digits"}, picture=b"x"),
        422,
        "picture",
        ("not a part", "request, image"),
    ),
    (
        "part-of-another-route",
        A,
        lambda: form({"model": "digits"}, clean__image=b"x"),
        422,
        "clean.image",
        ("request, image",),
    ),
    (
        "too-many-parts",
        "/api/patch",
        lambda: form(PATCH, clean__image=b"x", corrupted__image=b"x", image=b"x"),
        422,
        "body",
        ("more than 3 parts",),
    ),
    (
        "no-request-part",
        A,
        lambda: {"files": {"image": ("a.png", png_of("digit-1"), "image/png")}},
        422,
        "request",
        ("no part named",),
    ),
    ("request-not-json", A, lambda: form(b"{model: digits"), 422, "request", ("not JSON",)),
    ("request-empty", A, lambda: form(b""), 422, "request", ("empty",)),
    ("request-not-an-object", A, lambda: form([1, 2]), 422, "request", ("a JSON list", "not an object")),
    (
        "image-twice",
        A,
        lambda: form({"model": "digits", "image": b64(png_of("digit-1"))}, image=png_of("digit-1")),
        422,
        "image",
        ("both as a file part and in the JSON",),
    ),
    (
        "nested-twice",
        "/api/patch",
        lambda: form({**PATCH, "clean": {"model": "digits", "image": "AAAA"}}, clean__image=b"x"),
        422,
        "clean.image",
        ("both",),
    ),
    (
        "parent-not-an-object",
        "/api/patch",
        lambda: form({**PATCH, "clean": 3}, clean__image=b"x"),
        422,
        "clean",
        ("not an object",),
    ),
    (
        "no-boundary",
        A,
        lambda: {"content": b"x", "headers": {"content-type": "multipart/form-data"}},
        422,
        "content-type",
        ("boundary",),
    ),
    (
        "cut-short",
        A,
        lambda: {"content": CUT_SHORT, "headers": {"content-type": "multipart/form-data; boundary=b"}},
        422,
        "request",
        ("ends inside a part",),
    ),
]


@pytest.mark.parametrize(
    ("path", "make", "status", "field", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_bad_form_is_a_4xx_naming_the_part(
    client: TestClient, path: str, make: Callable[[], dict[str, Any]], status: int, field: str, words: tuple[str, ...]
) -> None:
    err = assert_error(client.post(path, **make()), status, field, *words)
    assert not err["message"].startswith(f"{field}: {field}"), err  # the field named once


@pytest.mark.parametrize(
    "file",
    [lambda: encoded("GIF", mode="L"), lambda: SVG, lambda: encoded("PNG")[:600], bomb],
    ids=["gif", "svg", "truncated-png", "bomb-png"],
)
def test_a_hostile_file_is_refused_as_its_base64_is(client: TestClient, file: Callable[[], bytes]) -> None:
    data = file()
    by_json = client.post("/api/attention", json={"model": "digits", "image": b64(data)})
    by_form = client.post("/api/attention", **form({"model": "digits"}, image=data))
    assert 400 <= by_json.status_code < 500 and by_json.json()["error"]["field"] == "image"
    assert (by_form.status_code, by_form.json()) == (by_json.status_code, by_json.json())


def test_a_route_without_an_image_refuses_a_form(client: TestClient) -> None:
    for path in ("/api/cost", "/api/train"):  # an analysis and a route of its own, neither reading an image
        resp = client.post(path, **form({"model": "textbook"}))
        assert_error(resp, 415, "content-type", "'multipart/form-data'", "reads application/json")
        assert "or multipart" not in resp.json()["error"]["message"]
