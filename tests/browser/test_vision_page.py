"""The Vision workspace on one page load (/?ws=vision, 1440x900) against a real server holding `digits`: the sample
digit is drawn from its PNG, a clicked patch veils the image as the served weights of its query row say (the heads
averaged, then one head chosen by its thumbnail; the [CLS]'s row and its rollout too), the arrow keys and Enter
choose a patch, every layer's heads are drawn at once as a grid whose thumbnails follow the chosen patch and choose
a layer and head when pressed, a blocked patch and a 2-D window are sent as blocked cells and answered with 0 on
those keys, a layer switch paints the veils it drew before (the same elements) with the new layer's weights, an
ablated head is sent to /api/intervene and the run after it drawn, patching from digit-8 draws /api/patch's
recovered shares (and per head, from a photograph, a layer x head table with its best cell named, a cell pressed by
the keyboard showing that head; from the person's own file; a GIF there refused naming corrupted.image), a PNG made
here is uploaded and drawn, a GIF is refused with the message naming `image`, and a PNG dropped on the image is run.
Nothing waits a fixed time: each step waits for what the page shows."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import Page

from tests.browser.conftest import PHONE, Device
from wire.arrays import MEDIA_TYPE as ARRAYS_MEDIA_TYPE

pytestmark = pytest.mark.browser

IMAGE = "[data-testid=vision-image]"
FIRST = 1  # the [CLS], then p(0,0) ... p(3,3)
GRID = 4

# Whether the element `sel` names holds the text `text`.
HOLDS_JS = "([sel, text]) => document.querySelector(sel).textContent.includes(text)"
ALPHAS_JS = """() => Object.fromEntries([...document.querySelectorAll('[data-testid=vision-image] [data-token]')]
  .map((r) => [r.dataset.token, Number(r.dataset.alpha)]))"""
# Whether the element `sel` names is at least partly in the viewport; the page scrolled to put its top at the top.
IN_VIEW_JS = """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
  return r.height > 0 && r.bottom > 0 && r.top < innerHeight; }"""
TOP_JS = "(sel) => scrollTo(0, document.querySelector(sel).getBoundingClientRect().top + scrollY)"
# A file dropped on the image, as a browser hands a drop to the page: [name, its bytes as base64].
DROP_JS = """([name, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type: "image/png" }));
  const target = document.querySelector('[data-testid=vision-image]');
  target.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
}"""
# Each layer's veils in the patching thumbnails, in token order.
PATCHED_JS = """() => [...document.querySelectorAll('[data-testid=vision-patching] figure')]
  .map((f) => [...f.querySelectorAll('.vision-veil')].map((r) => Number(r.dataset.alpha)))"""
# Whether the other image's file input has read the file named, and the choice is "your own image".
READ_JS = """(name) => { const f = document.querySelector('[data-testid=vision-other-file]');
  return f.dataset.read === name && document.querySelector('[data-testid=vision-other]').value === 'file'; }"""
# The per-head patching table's cells: [layer, head, share, whether it is the best].
CELLS_JS = """() => [...document.querySelectorAll('[data-testid=vision-patching] .vision-cell')]
  .map((b) => [Number(b.dataset.layer), Number(b.dataset.head), Number(b.dataset.share),
    b.classList.contains('vision-best')])"""
# Each veil's drawn opacity over its alpha: the veil's most (vision.js VEIL_MAX) wherever the alpha is not 0.
OPACITY_JS = """() => [...document.querySelectorAll('[data-testid=vision-image] [data-token]')]
  .filter((r) => Number(r.dataset.alpha) > 0)
  .map((r) => Number(r.getAttribute('fill-opacity')) / Number(r.dataset.alpha))"""
# The image's veil over token t and head h's thumbnail (a canvas) kept aside, then, after a draw, whether each is
# still in the page and the alpha it drew over token t: a layer switch paints the elements it drew before.
KEEP_JS = """([t, h]) => { window.kept = [
  document.querySelector(`[data-testid=vision-image] [data-token="${t}"]`),
  document.querySelector(`[data-testid=vision-heads] [data-head="${h}"] canvas`)]; }"""
KEPT_JS = """([t, first]) => { const [veil, thumb] = window.kept;
  return [[veil.isConnected, Number(veil.dataset.alpha)], [!!thumb?.isConnected, thumb?.alphas?.[t - first]]]; }"""
# Every layer's grid (visionlayers.js): thumbnail [layer, col]'s veils read back from its canvas, one alpha a patch
# (the pixel at each patch's centre, over the veil's most, VEIL_MAX), and whether the image's canvas is opaque there.
GRID_JS = """([layer, col, n]) => {
  const veils = document.querySelector('[data-testid=vision-layers] .vision-layers-veils');
  const image = document.querySelector('[data-testid=vision-layers] .vision-layers-image');
  const [cw, ch, pad, s] = ['cellW', 'cellH', 'pad', 'patch'].map((k) => Number(veils.dataset[k]));
  const at = (canvas, i) => canvas.getContext('2d').getImageData(
    col * cw + pad + (i % n + 0.5) * s, layer * ch + pad + (Math.floor(i / n) + 0.5) * s, 1, 1).data[3];
  const cells = Array.from({ length: n * n }, (_, i) => i);
  return [cells.map((i) => at(veils, i) / 255 / 0.85), cells.every((i) => at(image, i) === 255)];
}"""
VEIL_STEP = 1 / 255 / 0.85  # a veil's alpha as a canvas keeps it: a byte


def assert_grid_veils(page: Page, layer: int, col: int, row: np.ndarray) -> list[float]:
    """Thumbnail [layer, col] of every layer's grid: the image drawn under it, and its veils those of `row`."""
    drawn, opaque = page.evaluate(GRID_JS, [layer, col, GRID])
    assert opaque, f"the image is not drawn under thumbnail {layer}, {col}"
    want = list(expected_alphas(row).values())
    assert np.abs(np.array(drawn) - want).max() <= VEIL_STEP, (layer, col, drawn, want)
    return list(drawn)


# The drawn image's own pixels, decoded: its natural size.
PIXELS_JS = """async () => {
  const href = document.querySelector('[data-testid=vision-image] image').getAttribute('href');
  const img = new Image();
  img.src = href;
  await img.decode();
  return [href, img.naturalWidth, img.naturalHeight];
}"""


def served(base: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(f"{base}/api/attention", json=body, timeout=60)
    assert resp.status_code == 200, resp.text[:500]
    answer: dict[str, Any] = resp.json()
    return answer


def expected_alphas(row: np.ndarray) -> dict[str, float]:
    """The veil over each patch for a row of weights: 1 - w / max over the patches."""
    w = row[FIRST : FIRST + GRID * GRID]
    return {str(FIRST + i): float(1 - v / w.max()) for i, v in enumerate(w)}


def assert_veils(page: Page, row: np.ndarray) -> None:
    drawn = page.evaluate(ALPHAS_JS)
    want = expected_alphas(row)
    assert drawn.keys() == want.keys()
    for t, alpha in want.items():
        assert abs(drawn[t] - alpha) < 1e-6, (t, drawn[t], alpha)
    ratios = page.evaluate(OPACITY_JS)
    assert ratios and max(ratios) - min(ratios) < 1e-6 and 0.5 < ratios[0] <= 1, ratios


def weights(answer: dict[str, Any], layer: int) -> np.ndarray:
    return np.array([h["weights"] for h in answer["layers"][layer]["heads"]])  # (H, S, S)


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def test_the_vision_workspace_draws_attention_over_the_image(page: Page, typed_pycode_server: str) -> None:
    vision_server = typed_pycode_server  # it serves digits beside textbook
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    accepts: list[str] = []  # the tab's runs: every layer's weights travel in the arrays form, not as JSON text
    page.on(
        "request",
        lambda r: (
            r.url.endswith("/api/attention")
            and '"sample"' in (r.post_data or "")
            and accepts.append(r.headers.get("accept", ""))
        ),
    )
    page.goto(f"{vision_server}/?ws=vision")
    page.wait_for_selector(f"{IMAGE} [data-token]", timeout=20_000)
    assert page.locator("[data-testid=vision-model]").input_value() == "digits"
    assert accepts == [ARRAYS_MEDIA_TYPE]
    # the sample's own pixels are drawn, 8 x 8, under the grid of 16 patches
    href, width, height = page.evaluate(PIXELS_JS)
    assert (href, width, height) == ("/api/samples/digit-0", 8, 8)
    last = int(page.locator(IMAGE).get_attribute("data-layer") or -1)
    assert last == 2
    plain = served(vision_server, {"model": "digits", "sample": "digit-0", "include": ["weights", "rollout"]})
    w = weights(plain, last)

    # a click on p(1,1) (token 6): the veils follow its row, the heads averaged
    page.locator(f"{IMAGE} [data-token='6']").click()
    assert page.locator(IMAGE).get_attribute("data-query") == "6"
    assert_veils(page, w[:, 6].mean(axis=0))
    assert "p(1,1), layer 2, heads averaged" in page.locator("[data-testid=vision-readout]").inner_text()
    # head 2's thumbnail chooses head 2, pressed with the image scrolled out of sight: the image comes back into it
    page.evaluate(TOP_JS, "[data-testid=vision-heads]")
    assert not page.evaluate(IN_VIEW_JS, IMAGE)
    page.locator("[data-testid=vision-heads] [data-head='2']").click()
    assert page.evaluate(IN_VIEW_JS, IMAGE)
    assert page.locator(IMAGE).get_attribute("data-head") == "2"
    assert page.locator("[data-testid=vision-heads] [data-head='2']").get_attribute("aria-pressed") == "true"
    assert_veils(page, w[2, 6])
    # the [CLS]'s row, then its rollout through the layer (heads fused), then the chosen patch's row again
    page.locator("[data-testid=vision-map]").select_option("cls")
    assert_veils(page, w[2, 0])
    page.locator("[data-testid=vision-map]").select_option("rollout")
    assert_veils(page, np.array(plain["layers"][last]["rollout"][0]))
    page.locator("[data-testid=vision-map]").select_option("patch")
    assert_veils(page, w[2, 6])
    # the keyboard: the cursor moves right from p(1,1) and Enter chooses p(1,2) (token 7)
    page.locator(IMAGE).focus()
    page.keyboard.press("ArrowRight")
    assert "Cursor on p(1,2)" in page.locator("[data-testid=vision-readout]").inner_text()
    page.keyboard.press("Enter")
    assert page.locator(IMAGE).get_attribute("data-query") == "7"
    assert page.locator("[data-testid=vision-readout]").inner_text().startswith("p(1,2), layer 2, head 2: most on")
    assert_veils(page, w[2, 7])

    # every layer's heads at once: 3 layers x (4 heads and their mean), each drawn from the served weights of the row
    # shown, and drawn again when another patch is chosen
    layers_grid = page.locator("[data-testid=vision-layers]")
    assert layers_grid.get_attribute("data-drawn") == "3x4"
    assert layers_grid.locator("[role=row]").count() == 4  # the heads' names, then a row a layer
    cells = layers_grid.locator("[role=gridcell]")
    assert cells.count() == 3 * 5
    assert cells.nth(6).get_attribute("aria-label") == "layer 1, head 1"
    assert cells.nth(14).get_attribute("aria-label") == "layer 2, heads averaged"
    assert cells.nth(12).get_attribute("aria-selected") == "true"  # layer 2, head 2: the one shown
    w0, w1 = weights(plain, 0), weights(plain, 1)
    on_seven = assert_grid_veils(page, 0, 1, w0[1, 7])
    assert_grid_veils(page, 1, 4, w1[:, 7].mean(axis=0))
    page.locator(f"{IMAGE} [data-token='6']").click()
    on_six = assert_grid_veils(page, 0, 1, w0[1, 6])
    assert np.abs(np.array(on_six) - on_seven).max() > 0.05  # the thumbnail was drawn again for p(1,1)
    # pressing a thumbnail chooses its layer and head in the large picture; the keyboard moves and presses too
    layers_grid.locator("[data-layer='1'][data-head='3']").click()
    assert (page.locator(IMAGE).get_attribute("data-layer"), page.locator(IMAGE).get_attribute("data-head")) == (
        "1",
        "3",
    )
    assert_veils(page, w1[3, 6])
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("() => document.activeElement.getAttribute('aria-label')") == "layer 2, head 2"
    page.keyboard.press("Enter")
    assert page.locator(IMAGE).get_attribute("data-layer") == "2"
    assert_veils(page, w[2, 6])
    page.locator(f"{IMAGE} [data-token='7']").click()

    # p(0,3) (token 4) blocked as a key: sent as its column of cells, and answered with 0 on it in every row
    page.locator(f"{IMAGE} [data-token='4']").click()
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        page.locator("[data-testid=vision-block]").click()
    body = sent.value.post_data_json
    assert body["masks"]["blocked"] == [[q, 4] for q in range(1 + GRID * GRID)]
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-masked]", "p(0,3)"])
    masked = weights(served(vision_server, body), last)
    assert np.all(masked[:, :, 4] == 0) and not np.all(w[:, :, 4] == 0)
    page.locator(f"{IMAGE} [data-token='6']").click()
    assert_veils(page, masked[2, 6])
    assert page.evaluate(ALPHAS_JS)["4"] == 1  # the blocked key is veiled whole
    # a 2-D window of radius 0: each patch sees itself (and the [CLS]) only
    page.locator("[data-testid=vision-radius]").fill("0")
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        page.locator("[data-testid=vision-radius]").press("Tab")
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-masked]", "window"])
    windowed = weights(served(vision_server, sent.value.post_data_json), last)
    assert_veils(page, windowed[2, 6])
    assert {t for t, a in page.evaluate(ALPHAS_JS).items() if a < 1} == {"6"}

    # the masks cleared, head 1 of layer 0 ablated: sent to /api/intervene, and its run after the ablation drawn
    with page.expect_request(lambda r: r.url.endswith("/api/attention")):
        page.locator("[data-testid=vision-clear]").click()
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-masked]", "no masks"])
    # layer 0 chosen: the image's veils and the thumbnails' are the same elements, painted with layer 0's weights
    # (kept: the patch where layers 0 and 2 draw the image most apart, head 0's thumbnail over it)
    w0 = weights(plain, 0)
    before, after_switch = expected_alphas(w[2, 6]), expected_alphas(w0[2, 6])
    t = max(before, key=lambda k: abs(before[k] - after_switch[k]))
    assert abs(before[t] - after_switch[t]) > 1e-3
    page.evaluate(KEEP_JS, [int(t), 0])
    page.locator("[data-testid=vision-layer]").select_option("0")
    assert_veils(page, w0[2, 6])
    (image_kept, image_alpha), (thumb_kept, thumb_alpha) = page.evaluate(KEPT_JS, [int(t), FIRST])
    assert image_kept, "the image's veil was built anew"
    assert thumb_kept, "head 0's thumbnail was built anew"
    assert abs(image_alpha - after_switch[t]) < 1e-6
    assert abs(thumb_alpha - expected_alphas(w0[0, 6])[t]) < 1e-6
    page.locator("[data-testid=vision-heads] [data-head='1']").click()
    with page.expect_request(lambda r: r.url.endswith("/api/intervene")) as sent:
        page.locator("[data-testid=vision-ablate]").click()
    body = sent.value.post_data_json
    assert body["ablate"] == [{"layer": 0, "head": 1}] and "masks" not in body
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-masked]", "ablated: layer 0 head 1"])
    resp = httpx.post(f"{vision_server}/api/intervene", json=body, timeout=60)
    assert resp.status_code == 200, resp.text[:500]
    after = weights(resp.json()["after"], last)
    assert np.abs(after - w).max() > 1e-3  # the ablation changed the last layer's weights
    page.locator("[data-testid=vision-layer]").select_option(str(last))
    page.locator("[data-testid=vision-heads] [data-head='2']").click()
    assert_veils(page, after[2, 6])

    # patching from a second image: the digit shown clean, digit-8 corrupted, each layer's recovered share drawn
    with page.expect_request(lambda r: r.url.endswith("/api/patch")) as sent:
        page.locator("[data-testid=vision-patch]").click()
    body = sent.value.post_data_json
    assert body["clean"] == {"model": "digits", "sample": "digit-0"} and body["corrupted"]["sample"] == "digit-8"
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-patch-line]", "From digit-8 to digit-0"])
    assert page.evaluate(IN_VIEW_JS, "[data-testid=vision-patching]")
    resp = httpx.post(f"{vision_server}/api/patch", json=body, timeout=60)
    assert resp.status_code == 200, resp.text[:500]
    recovered = np.array(resp.json()["recovered"], dtype=float)  # (layers, tokens)
    drawn = page.evaluate(PATCHED_JS)
    assert len(drawn) == 3
    for layer, alphas in enumerate(drawn):
        want = expected_alphas(np.clip(recovered[layer], 0, None))
        assert np.allclose(alphas, list(want.values()), atol=1e-6), (layer, alphas, want)

    # per head, from a photograph: a layer x head table of the served shares, its best cell named in words; pressing a
    # cell (by the keyboard here) shows that layer and head above
    page.locator("[data-testid=vision-other]").select_option("china")
    page.locator("[data-testid=vision-hook]").select_option("z")
    with page.expect_request(lambda r: r.url.endswith("/api/patch")) as sent:
        page.locator("[data-testid=vision-patch]").click()
    body = sent.value.post_data_json
    assert body["corrupted"] == {"model": "digits", "sample": "china"} and body["hook"] == "z"
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-patch-line]", "From china to digit-0"])
    resp = httpx.post(f"{vision_server}/api/patch", json=body, timeout=60)
    recovered = np.array([[np.nan if v is None else v for v in row] for row in resp.json()["recovered"]])
    cells = page.evaluate(CELLS_JS)
    assert [[c[0], c[1]] for c in cells] == [[layer, h] for layer in range(3) for h in range(4)]
    for layer, head, shared, _ in cells:
        assert abs(shared - float(np.clip(np.nan_to_num(recovered[layer, head]), 0, 1))) < 1e-6, (layer, head, shared)
    layer, head = np.unravel_index(np.nanargmax(recovered), recovered.shape)
    assert [(c[0], c[1]) for c in cells if c[3]] == [(layer, head)]
    strength = "b => b.style.getPropertyValue('--share')"  # coloured next to the largest share: the best cell's is 1
    assert page.locator("[data-testid=vision-patching] .vision-best").evaluate(strength) == "1"
    line = page.locator("[data-testid=vision-patch-line]").inner_text()
    assert f"head {head} of layer {layer} brings back the most ({recovered[layer, head]:.3f}" in line, line
    page.locator(f"[data-testid=vision-patching] [data-layer='0'][data-head='{3 - head}']").focus()
    page.keyboard.press("Enter")
    page.wait_for_function(
        "([l, h]) => { const i = document.querySelector('[data-testid=vision-image]');"
        " return i.dataset.layer === l && i.dataset.head === h; }",
        arg=["0", str(3 - head)],
    )

    # the person's own other image: a second file input, sent as base64 like the image shown; a GIF there is
    # refused with the message naming corrupted.image and that input marked
    flipped = png(
        np.asarray(Image.open(io.BytesIO(httpx.get(f"{vision_server}/api/samples/digit-8").content)))[::-1].copy()
    )
    page.locator("[data-testid=vision-other-file]").set_input_files(
        files=[{"name": "upside.png", "mimeType": "image/png", "buffer": flipped}]
    )
    page.wait_for_function(READ_JS, arg="upside.png")
    with page.expect_request(lambda r: r.url.endswith("/api/patch")) as sent:
        page.locator("[data-testid=vision-patch]").click()
    assert (
        sent.value.post_data_json["corrupted"]["image"] == "data:image/png;base64," + base64.b64encode(flipped).decode()
    )
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-patch-line]", "From upside.png to digit-0"])
    gif = io.BytesIO()
    Image.new("L", (8, 8)).save(gif, "GIF")
    page.locator("[data-testid=vision-other-file]").set_input_files(
        files=[{"name": "still.gif", "mimeType": "image/gif", "buffer": gif.getvalue()}]
    )
    page.wait_for_function(READ_JS, arg="still.gif")
    page.locator("[data-testid=vision-patch]").click()
    error = page.locator("[data-testid=vision-error]")
    error.wait_for(state="visible")
    assert error.inner_text().startswith("corrupted.image: ") and "GIF" in error.inner_text()
    assert page.locator("[data-testid=vision-other-file]").get_attribute("aria-invalid") == "true"
    page.locator("[data-testid=vision-other]").select_option("digit")
    page.locator("[data-testid=vision-hook]").select_option("resid_pre")

    # an upload of a small PNG made here: sent as base64, drawn from the file itself
    pixels = np.zeros((16, 16), np.uint8)
    pixels[2:14, 7:9] = 255  # a "1"
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        page.locator("[data-testid=vision-file]").set_input_files(
            files=[{"name": "one.png", "mimeType": "image/png", "buffer": png(pixels)}]
        )
    assert sent.value.post_data_json["image"].startswith("data:image/png;base64,")
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-status]", "one.png"])
    href, width, height = page.evaluate(PIXELS_JS)
    assert href.startswith("data:image/png;base64,") and (width, height) == (16, 16)
    assert page.locator("[data-testid=vision-masked]").inner_text() == "no masks"  # they named digit-0's run
    page.locator(f"{IMAGE} [data-token='2']").click()
    page.locator("[data-testid=vision-block]").click()
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-masked]", "p(0,1)"])

    # a GIF is refused: the server's message, naming image, under the panel's head, and the file control marked
    gif = io.BytesIO()
    Image.new("L", (8, 8)).save(gif, "GIF")
    page.locator("[data-testid=vision-file]").set_input_files(
        files=[{"name": "still.gif", "mimeType": "image/gif", "buffer": gif.getvalue()}]
    )
    error = page.locator("[data-testid=vision-error]")
    error.wait_for(state="visible")
    assert error.inner_text().startswith("image: ") and "GIF" in error.inner_text()
    assert error.get_attribute("data-field") == "image"
    assert page.locator("[data-testid=vision-file]").get_attribute("aria-invalid") == "true"
    assert page.evaluate(PIXELS_JS)[0].startswith("data:image/png;base64,")  # the PNG drawn stays, its mask too
    assert "p(0,1)" in page.locator("[data-testid=vision-masked]").inner_text()
    page.locator("[data-testid=vision-radius]").fill("3")  # a window the grid fits in: the next run, same cells
    with page.expect_request(lambda r: r.url.endswith("/api/attention")) as sent:
        page.locator("[data-testid=vision-radius]").press("Tab")
    body = sent.value.post_data_json
    assert body["image"].startswith("data:image/png;") and body["masks"]["blocked"] == [[q, 2] for q in range(17)]
    # a PNG dropped on the image runs as a chosen file does, and the refusal goes
    page.evaluate(DROP_JS, ["dropped.png", base64.b64encode(png(pixels.T.copy())).decode("ascii")])
    page.wait_for_function(HOLDS_JS, arg=["[data-testid=vision-status]", "dropped.png"])
    assert error.is_hidden() and page.locator("[data-testid=vision-file]").get_attribute("aria-invalid") is None
    assert page.locator("[data-testid=vision-masked]").inner_text() == "no masks"
    assert errors == []


def test_on_a_phone_each_vision_act_leaves_what_it_changed_in_view(
    tab_on: Callable[[Device], Page], typed_pycode_server: str
) -> None:
    """The in-view rule of the page (test_workspaces.py) on the Vision tab at 390x844 with touch: a tap on a patch
    chooses it; a thumbnail, the block button and the ablate button, tapped with the image scrolled out of sight,
    bring the image back; the patching thumbnails come into sight once drawn."""
    page = tab_on(PHONE)
    page.goto(f"{typed_pycode_server}/?ws=vision")
    page.wait_for_selector(f"{IMAGE} [data-token]", timeout=20_000)
    page.locator(f"{IMAGE} [data-token='7']").tap()
    assert page.locator(IMAGE).get_attribute("data-query") == "7"
    for button, answered in [
        ("[data-testid=vision-heads] [data-head='1']", None),
        ("[data-testid=vision-block]", "/api/attention"),
        ("[data-testid=vision-ablate]", "/api/intervene"),
    ]:
        page.evaluate(TOP_JS, button)
        assert not page.evaluate(IN_VIEW_JS, IMAGE), button
        if answered is None:
            page.locator(button).tap()
        else:
            with page.expect_response(lambda r, path=answered: r.url.endswith(path)):
                page.locator(button).tap()
        page.wait_for_function(IN_VIEW_JS, arg=IMAGE, timeout=5_000)
    page.locator("[data-testid=vision-patch]").tap()
    page.wait_for_selector("[data-testid=vision-patching] figure")
    page.wait_for_function(IN_VIEW_JS, arg="[data-testid=vision-patching]", timeout=5_000)
