"""A ViT-Base-shaped image, side by side in one run: transformers' eager forward, attnlab's engine in process, the
server's answer and the Vision workspace drawing it in headless Chromium.

The checkpoint: transformers' ViTModel (12 layers, 12 heads, width 768, MLP 3072, image 224, patch 16: 196 patches
and [CLS], 197 tokens), random weights from a seed, eager attention, saved with save_pretrained into a temporary
directory beside a preprocessor_config.json (resize to 224 x 224, mean and std 0.5). The image: the shipped
photograph `china` (224 x 149) resized to 224 x 224 and written as a PNG, preprocessed once as the server does
(engine/vision/images.py) into the (3, 224, 224) pixels both in-process forwards read. Per round, in an order that
rotates every round (the median of --rounds rounds after one warm-up; the page's own warm-up is its first upload):

    transformers  ViTModel(pixel_values, output_attentions=True) under inference_mode: every layer's weights
    engine        load_checkpoint("vit", DIR).run(RunInput(pixels)): attnlab's forward with every layer's tensors
    server f16    `attnlab serve --model vitb=DIR` (bench/serving.py: this checkout, CPU, no run cache), POST
                  /api/attention with `image` (the PNG as base64) and include ["weights"], the arrays form at
                  float16, on a kept-alive connection: from the request to the answer's last byte read
    server f32    the same at float32
    server JSON   the same image with include ["weights", "rollout"] as JSON: what the Vision tab asked for until
                  it read the arrays form (it now asks the same include in the arrays form at float32)
    page upload   the Vision workspace (/?ws=vision) in headless Chromium: the PNG put in its file input (a File
                  made in the page under a new name each time, of a PNG that differs in its first pixel each time
                  (so the page has not drawn that image before), set with a DataTransfer, its change event
                  dispatched; performance.now() just before) until the tab says it holds the image (its status line
                  names the file; the drawing is done in the same task) and the frame after it has been painted
                  (two requestAnimationFrame callbacks).
                  The tab holds every layer's weights from that one answer; this row waits for the layer chosen:
                  the image with its veils and the twelve heads' thumbnails
    page upload, every layer drawn
                  the same upload until every layer's grid (static/js/visionlayers.js) has painted: its canvases
                  say they hold this image and this answer's veils for 12 layers x 12 heads (data-image, data-veils,
                  data-drawn, set once drawn), then the frame after it (two requestAnimationFrame callbacks)
    page layers   then each of the 12 layers chosen in turn in the tab's layer select (its change event), each
                  until painted as above: the sum of the 12, so that every layer's weights have been drawn once

Every answer is checked once before timing: the engine's and the server's weights (layers 0 and 11, heads 0 and 11)
against transformers', the page's image drawn with 197 tokens, and every layer's grid read back from its canvases
after one upload: each of the 144 thumbnails and 12 means veils each of its 196 patches as the served float32 weights
of the row shown say (within 1.5 / 255), over the image. The goal (issue 42): every layer's weights to the page,
drawn, at most 3x transformers' eager forward: "page upload, every layer drawn" against "transformers" (and, as
before, the upload with the 12 layer switches after it, "page upload + page layers").

    .venv/bin/python -m bench.vision [--threads 1] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from http.client import HTTPConnection, RemoteDisconnected
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import torch
from PIL import Image
from playwright.sync_api import Page, sync_playwright

from bench.page_timing import profiled
from bench.serving import VIEWPORT, attnlab_server, launch
from wire.arrays import MEDIA_TYPE as ARRAYS_MEDIA_TYPE
from wire.arrays import read_arrays

LAYERS = 12
HEADS = 12
TOKENS = 197
PREPROCESSOR = {
    "do_resize": True,
    "size": {"height": 224, "width": 224},
    "image_mean": [0.5] * 3,
    "image_std": [0.5] * 3,
}
GOAL = 3.0  # every layer's weights drawn in the page, x the transformers forward (issue 42)
NAME = "china.png"

# The upload, in the page: a File of the PNG put in the Vision tab's file input, timed until the status line names
# it and the frame after has been painted (`painted`), and until every layer's grid has painted this image and its
# veils, every layer and head (its data-image, data-veils and data-drawn, set once each canvas is drawn), and the frame
# after (`every`).
UPLOAD_JS = """async ([b64, name, drawn]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const input = document.querySelector("[data-testid=vision-file]");
  const status = document.querySelector("[data-testid=vision-status]");
  const grid = document.querySelector("[data-testid=vision-layers]");
  const painted = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const tick = () => new Promise((r) => setTimeout(r, 1));
  const gridDrawn = () =>
    grid.dataset.image === name && grid.dataset.veils === name && grid.dataset.drawn === drawn;
  const t0 = performance.now();
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, { type: "image/png" }));
  input.files = dt.files;
  input.dispatchEvent(new Event("change", { bubbles: true }));
  while (!status.textContent.includes(name)) await tick();
  const answered = performance.now() - t0;
  const ready = gridDrawn();
  await painted();
  const shown = performance.now() - t0;
  if (ready) return { answered, painted: shown, every: shown };
  while (!gridDrawn()) {
    if (performance.now() - t0 > 60000) throw new Error(`the grid was not drawn: ${JSON.stringify(grid.dataset)}`);
    await tick();
  }
  await painted();
  return { answered, painted: shown, every: performance.now() - t0 };
}"""

# Every layer's grid read back: for each thumbnail [layer, col] (the heads, then their mean), the veil's alpha at each
# patch's centre (over 255), and whether the image's canvas is opaque there; with the patch whose row it shows.
GRID_JS = """([layers, cols, n]) => {
  const veils = document.querySelector("[data-testid=vision-layers] .vision-layers-veils");
  const image = document.querySelector("[data-testid=vision-layers] .vision-layers-image");
  const [cw, ch, pad, s] = ["cellW", "cellH", "pad", "patch"].map((k) => Number(veils.dataset[k]));
  const read = (c) => c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const [v, im] = [read(veils), read(image)];
  const out = [];
  let opaque = true;
  for (let layer = 0; layer < layers; layer++) {
    const line = [];
    for (let col = 0; col < cols; col++) {
      const alphas = [];
      for (let i = 0; i < n * n; i++) {
        const x = Math.floor(col * cw + pad + ((i % n) + 0.5) * s);
        const y = Math.floor(layer * ch + pad + (Math.floor(i / n) + 0.5) * s);
        const at = (y * veils.width + x) * 4 + 3;
        alphas.push(v[at] / 255);
        opaque &&= im[at] === 255;
      }
      line.push(alphas);
    }
    out.push(line);
  }
  return { cells: out, opaque, query: Number(document.querySelector("[data-testid=vision-image]").dataset.query) };
}"""
VEIL_MAX = 0.85  # static/js/visionpicture.js: a veil's opacity where the weight is 0

# Every layer chosen in turn in the layer select, each until painted; the sum.
LAYERS_JS = """async () => {
  const select = document.querySelector("[data-testid=vision-layer]");
  const image = document.querySelector("[data-testid=vision-image]");
  const painted = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const each = [];
  const t0 = performance.now();
  for (let layer = 0; layer < select.options.length; layer++) {
    const t = performance.now();
    select.value = String(layer);
    select.dispatchEvent(new Event("change", { bubbles: true }));
    if (image.dataset.layer !== String(layer)) throw new Error(`layer ${layer} not drawn`);
    await painted();
    each.push(performance.now() - t);
  }
  return { total: performance.now() - t0, each };
}"""


# ---- the checkpoint and the image ------------------------------------------------------------------------------


def make_checkpoint(directory: Path, seed: int) -> Any:
    """A ViT-Base-shaped random ViTModel saved into `directory` with its preprocessor_config.json; the model."""
    import transformers as tf
    from transformers.utils import logging

    logging.disable_progress_bar()
    config = tf.ViTConfig(
        hidden_size=768,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=3072,
        image_size=224,
        patch_size=16,
    )
    torch.manual_seed(seed)
    model = tf.ViTModel._from_config(config, attn_implementation="eager").float().eval()
    model.save_pretrained(directory, safe_serialization=True)
    (directory / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return model


def china_png(variant: int = 0) -> bytes:
    """The photograph at 224 x 224 as a PNG; a variant other than 0 has its first pixel's red set to that number, so
    that each upload is an image the page has not drawn before (a new data URL to decode) at the same cost."""
    from engine.vision.samples import load_sample

    pixels = np.asarray(load_sample("china").pixels)
    image = Image.fromarray(pixels).resize((224, 224), Image.Resampling.BILINEAR)
    if variant:
        image.putpixel((0, 0), (variant % 256, *image.getpixel((0, 0))[1:]))  # type: ignore[index]
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def pixels_of(png: bytes) -> torch.Tensor:
    """The PNG as the server makes it the model's input: decoded, then the checkpoint's preprocessing."""
    from engine.vision.images import ImageLimits, Preprocessing, decode_image, preprocess

    decoded = decode_image(png, ImageLimits(max_bytes=len(png), max_pixels=224 * 224))
    return preprocess(decoded, Preprocessing.from_config(PREPROCESSOR, 3))


# ---- the calls -------------------------------------------------------------------------------------------------


def post(conn: HTTPConnection, body: bytes, accept: str) -> bytes:
    """One request on the kept-alive connection, read to its last byte; again on a new one if the server closed it
    while idle."""
    for attempt in (1, 2):
        try:
            conn.request(
                "POST", "/api/attention", body=body, headers={"Content-Type": "application/json", "Accept": accept}
            )
            resp = conn.getresponse()
            break
        except (BrokenPipeError, ConnectionResetError, RemoteDisconnected):
            conn.close()
            if attempt == 2:
                raise
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"status {resp.status}: {data[:300]!r}")
    return data


def check(name: str, got: Callable[[int, int], np.ndarray], reference: torch.Tensor, tol: float) -> None:
    for layer in (0, LAYERS - 1):
        for head in (0, HEADS - 1):
            w = got(layer, head)
            if w.shape != (TOKENS, TOKENS):
                raise SystemExit(f"{name}: layer {layer} head {head} has shape {w.shape}")
            diff = float(np.abs(w - reference[layer, head].numpy()).max())
            if diff > tol:
                raise SystemExit(f"{name}: layer {layer} head {head} differs from transformers' by {diff:.2g}")


def weights_reader(data: bytes, accept: str) -> Callable[[int, int], np.ndarray]:
    """An answer's weights of (layer, head): from JSON, or from the arrays form."""
    answer = orjson.loads(data) if accept == "application/json" else read_arrays(data)
    return lambda ly, h: np.asarray(answer["layers"][ly]["heads"][h]["weights"], dtype=np.float32)


def check_grid(page: Page, image_b64: str, weights: Callable[[int, int], np.ndarray]) -> None:
    """One upload of the PNG, then every layer's grid read back from its canvases: each of the 12 x 12 thumbnails and
    each layer's mean veils every patch as the served weights of the row shown say, over the image."""
    page.evaluate(UPLOAD_JS, [image_b64, f"check-{NAME}", f"{LAYERS}x{HEADS}"])
    got = page.evaluate(GRID_JS, [LAYERS, HEADS + 1, 14])
    if not got["opaque"]:
        raise SystemExit("the grid's image is not drawn under every thumbnail")
    q = got["query"]
    worst = 0.0
    for layer in range(LAYERS):
        rows = np.stack([weights(layer, h)[q] for h in range(HEADS)]).astype(np.float64)
        for col, row in enumerate([*rows, rows.mean(axis=0)]):
            w = np.clip(row[1:TOKENS], 0, None)
            want = VEIL_MAX * (1 - w / w.max())
            worst = max(worst, float(np.abs(np.array(got["cells"][layer][col]) - want).max()))
    if worst > 1.5 / 255:
        raise SystemExit(f"the grid's veils differ from the served weights' by {worst * 255:.1f} / 255")
    print(f"the page's grid: {LAYERS} layers x {HEADS} heads and their means drawn, within {worst * 255:.2f} / 255")


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def open_vision(page: Page, base: str) -> None:
    """The Vision workspace with its first image drawn (the sample it opens on)."""
    page.goto(f"{base}/?ws=vision")
    page.wait_for_selector("[data-testid=vision-image] [data-token]", timeout=120_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads here and in the server (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up (1 to 9)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="then profile one upload and the 12 layers in the page")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 9:
        parser.error(f"--rounds: got {args.rounds}, choose 1 to 9")
    torch.set_num_threads(args.threads)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from engine.models.checkpoint import load_checkpoint
    from engine.models.run import RunInput

    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, CPU, {args.threads} torch thread(s) "
        f"here and in the server; ViT-Base-shaped ViTModel (seed {args.seed}), {TOKENS} tokens; median of "
        f"{args.rounds} rotating rounds after one warm-up; load average "
        f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} at the start",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp, "vitb")
        hf = make_checkpoint(directory, args.seed)
        png = china_png()
        pixels = pixels_of(png)
        batch = pixels.unsqueeze(0)
        engine = load_checkpoint("vit", directory, reference=False)
        cpu = torch.device("cpu")

        def tf_forward() -> Any:
            with torch.inference_mode():
                return hf(pixel_values=batch, output_attentions=True)

        def engine_forward() -> Any:
            return engine.run(RunInput(pixels=pixels), cpu, torch.float32)

        reference = torch.stack([a[0] for a in tf_forward().attentions]).float()  # (L, H, S, S)
        layers_run = engine_forward().layers
        check("engine", lambda ly, h: layers_run[ly].attn.weights[0, h].detach().float().numpy(), reference, 1e-4)
        image_b64 = base64.b64encode(png).decode()
        bodies = {
            "server f16": (
                orjson.dumps({"model": "vitb", "image": image_b64, "include": ["weights"], "precision": "float16"}),
                ARRAYS_MEDIA_TYPE,
            ),
            "server f32": (
                orjson.dumps({"model": "vitb", "image": image_b64, "include": ["weights"]}),
                ARRAYS_MEDIA_TYPE,
            ),
            "server JSON": (
                orjson.dumps({"model": "vitb", "image": image_b64, "include": ["weights", "rollout"]}),
                "application/json",
            ),
        }
        sizes: dict[str, int] = {}
        f32_answer = b""
        with (
            attnlab_server(args.threads, Path(tmp, "server.log"), models=f"vitb={directory}") as port,
            sync_playwright() as p,
        ):
            base = f"http://127.0.0.1:{port}"
            conn = HTTPConnection("127.0.0.1", port, timeout=300)
            for name, (body, accept) in bodies.items():
                data = post(conn, body, accept)
                sizes[name] = len(data)
                if name == "server f32":
                    f32_answer = data
                check(name, weights_reader(data, accept), reference, 2e-3 if "f16" in name else 1e-4)
            browser = launch(p)
            page = browser.new_context(viewport=VIEWPORT).new_page()  # type: ignore[arg-type]
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            open_vision(page, base)
            check_grid(page, image_b64, weights_reader(f32_answer, ARRAYS_MEDIA_TYPE))
            page_rows: dict[str, list[float]] = {
                "page upload": [],
                "page upload, drawn before paint": [],
                "page upload, every layer drawn": [],
                "page layers": [],
            }
            each_layer: list[list[float]] = []

            uploads = iter(range(1, 256))

            def upload() -> None:
                # a new name each time: the status line still names the last upload until this one is answered; a new
                # image too (its first pixel), so that the page decodes and draws its pixels as for a person's new file
                n = next(uploads)
                b64 = base64.b64encode(china_png(n)).decode()
                got = page.evaluate(UPLOAD_JS, [b64, f"upload-{n}-{NAME}", f"{LAYERS}x{HEADS}"])
                page_rows["page upload"].append(got["painted"])
                page_rows["page upload, every layer drawn"].append(got["every"])
                page_rows["page upload, drawn before paint"].append(got["answered"])

            def layers() -> None:
                got = page.evaluate(LAYERS_JS)
                page_rows["page layers"].append(got["total"])
                each_layer.append(got["each"])

            def page_call() -> None:
                upload()
                layers()

            def tf_call() -> None:
                tf_forward()

            def engine_call() -> None:
                engine_forward()

            def server_call(body: bytes, accept: str) -> Callable[[], None]:
                def call() -> None:
                    post(conn, body, accept)

                return call

            calls: dict[str, Callable[[], None]] = {
                "transformers": tf_call,
                "engine": engine_call,
                **{name: server_call(body, accept) for name, (body, accept) in bodies.items()},
                "page": page_call,
            }
            times: dict[str, list[float]] = {n: [] for n in calls if n != "page"}
            for r in range(args.rounds + 1):
                names = list(calls)
                names = names[r % len(names) :] + names[: r % len(names)]
                loads.append(os.getloadavg()[0])
                for name in names:
                    ms = timed(calls[name])
                    if r == 0:
                        continue
                    if name != "page":
                        times[name].append(ms)
                if r == 0:
                    for v in page_rows.values():
                        v.clear()
                    each_layer.clear()
                print(
                    f"round {r}{' (warm-up)' if r == 0 else ''} done at {time.monotonic() - started:.0f} s", flush=True
                )
            drawn = page.locator("[data-testid=vision-image] [data-token]").count()
            status = page.locator("[data-testid=vision-status]").inner_text()
            if NAME not in status or str(TOKENS) not in status:
                raise SystemExit(f"the page's status line reads {status!r}")
            kept_rows = {k: list(v) for k, v in page_rows.items()}  # the profiled calls below add to page_rows
            kept_each = list(each_layer)
            profiles: dict[str, list[tuple[float, str]]] = {}
            if args.profile:
                profiles["upload"] = profiled(page, upload)
                profiles["the 12 layers"] = profiled(page, layers)
            browser.close()
    report(times, kept_rows, kept_each, sizes, loads, drawn, errors)
    for name, top in profiles.items():
        print(f"\nJS profile, {name}: self time, ms (sampled every 0.5 ms)")
        for ms, fn in top:
            print(f"  {ms:8.0f}  {fn}")
    print(f"whole run {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")


def report(
    times: dict[str, list[float]],
    page_rows: dict[str, list[float]],
    each_layer: list[list[float]],
    sizes: dict[str, int],
    loads: list[float],
    drawn: int,
    errors: list[str],
) -> None:
    tf = statistics.median(times["transformers"])
    whole = [u + ly for u, ly in zip(page_rows["page upload"], page_rows["page layers"], strict=True)]
    rows = {**times, **page_rows, "page upload + page layers": whole}
    print(f"\nload average {min(loads):.1f}-{max(loads):.1f} over the rounds")
    print("| row | median ms | x transformers | per round ms | answer bytes |\n| --- | ---: | ---: | --- | ---: |")
    for name, values in rows.items():
        med = statistics.median(values)
        size = f"{sizes[name]:,}" if name in sizes else ""
        per = " ".join(f"{v:.0f}" for v in values)
        print(f"| {name} | {med:.0f} | {med / tf:.2f} | {per} | {size} |")
    per_layer = [statistics.median(c) for c in zip(*each_layer, strict=True)]
    print(f"\npage, each layer's switch until painted, median ms: {' '.join(f'{v:.0f}' for v in per_layer)}")
    print(f"the page's image holds {drawn} patch cells; page errors: {errors or 'none'}")
    for name in ("page upload, every layer drawn", "page upload + page layers"):
        ratio = statistics.median(rows[name]) / tf
        verdict = "PASS" if ratio <= GOAL else "MISS"
        print(f"goal (issue 42), {name}: at most {GOAL}x transformers: {ratio:.2f}x, {verdict}")


if __name__ == "__main__":
    main()
