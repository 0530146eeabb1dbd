"""A user's image checkpoint (vit, deit, dinov2) as an attnlab model: the caller's pixels become tokens
(engine/patches.py: [CLS], [DIST], [REG1].., p(row,col)), and every layer is computed by attnlab's engine, so
masks, hooks, interventions and analyses act on patches as they act on a text's tokens.

The model reads `pixels` (RunInput.pixels): float (C, H, W), or (B, C, H, W) for a batch of images of one size,
already resized and normalised as the checkpoint's preprocessor_config.json says (this module decodes nothing);
H and W multiples of the patch size. At the config's image size the positions are the checkpoint's own; at
another they are resized to the image's grid as transformers' interpolate_pos_encoding does. A run's config
reports the grid as patch_grid (rows, cols); `logits` gives the class logits where the checkpoint has a head.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from engine.classifier import ImageClassifier
from engine.errors import InputError
from engine.forward import ForwardResult, Network, layer_kinds
from engine.models.base import AttentionModel, Encoded, ModelInfo, ModelRun, NetworkCache, RunConfig, RunInput
from engine.models.declare import Capabilities, InputField
from engine.models.families import Mapped, Sizes
from engine.patches import PatchEmbedding
from engine.stored import converted_per_block


class ImageCheckpointModel(AttentionModel):
    """Built once from a loaded image checkpoint; runs only read its network and patch embedding."""

    name = "checkpoint"
    reads: ClassVar[frozenset[InputField]] = frozenset({"pixels"})
    capabilities = Capabilities(decode=False, batches=False, cross_attention=False, predicts_tokens=False)
    pad_token = None

    def __init__(
        self,
        name: str,
        family: str,
        sizes: Sizes,
        mapped: Mapped,
        *,
        directory: Path | None = None,
        card: dict[str, Any] | None = None,
        preprocessor: dict[str, Any] | None = None,
        reference: dict[str, Any] | None = None,
    ) -> None:
        assert isinstance(mapped.embedding, PatchEmbedding), "an image family's embedding reads pixels"
        setattr(self, "name", name)  # noqa: B010 (a ClassVar on AttentionModel)
        self.family = family
        self.directory = directory
        self.sizes = sizes
        self.embedding: PatchEmbedding = mapped.embedding
        self.classifier: ImageClassifier | None = mapped.classifier
        self.net = NetworkCache(mapped.network)
        self.card: dict[str, Any] = dict(card or {})
        self.preprocessor: dict[str, Any] = dict(preprocessor or {})  # for whoever resizes and normalises images
        self.reference = reference
        self.architecture = mapped.architecture
        setattr(self, "breaks", dict(mapped.breaks))  # noqa: B010
        e = self.embedding
        side = e.grid * e.patch_size
        attn = mapped.network.blocks[0].attn
        head = "" if self.classifier is None else f", a classifier over {len(self.classifier.labels)} classes"
        self.info = ModelInfo(
            name=name,
            description=(
                f"{name}: a {family} image checkpoint ({sizes.n_layers} layers x {sizes.n_heads} heads, width "
                f"{sizes.d_model}, {side}x{side} images in {e.patch_size}x{e.patch_size} patches{head}), every layer "
                "computed by attnlab's engine from its own weights; your masks apply in every layer."
            ),
            n_layers=sizes.n_layers,
            n_heads=sizes.n_heads,
            n_kv_heads=sizes.n_kv_heads,
            d_model=sizes.d_model,
            d_head=attn.d_head,
            d_v=attn.d_v,
            max_tokens=None,  # another image size has another grid: the server's own token limit bounds it
            tokenizer=f"image patches of {e.patch_size}x{e.patch_size} pixels, read row by row",
            default_text=None,
            default_masks=mapped.default_masks,
            family=family,
            max_positions=sizes.max_positions,
            layer_kinds=layer_kinds(mapped.network),
        )

    @property
    def image_size(self) -> int:
        """The side of the square image the checkpoint's positions were learned for."""
        return self.embedding.grid * self.embedding.patch_size

    def check_pixels(self, pixels: Tensor | None) -> Tensor:
        """`pixels` as (B, C, H, W) float32, or a 422 naming the field and what the model needs."""
        e = self.embedding
        need = f"{e.channels} x H x W with H and W multiples of {e.patch_size} ({self.image_size} x {self.image_size})"
        if pixels is None:
            raise InputError("pixels", f"got no image: {self.name} reads an image's pixels, {need}")
        if pixels.dim() not in (3, 4) or not pixels.is_floating_point():
            raise InputError("pixels", f"got a {pixels.dim()}-dimensional {pixels.dtype} tensor: need floats {need}")
        x = pixels[None] if pixels.dim() == 3 else pixels
        b, c, h, w = x.shape
        if b < 1:
            raise InputError("pixels", "got a batch of no images: give at least one")
        if c != e.channels:
            raise InputError("pixels", f"got {c} channels: {self.name} reads {e.channels}")
        for side, size in (("height", h), ("width", w)):
            if size < e.patch_size or size % e.patch_size:
                raise InputError(
                    "pixels",
                    f"got {side} {size}: need a multiple of the patch size {e.patch_size} (resize the image; "
                    f"{self.name} was made for {self.image_size} x {self.image_size})",
                )
        if not bool(torch.isfinite(x).all()):
            raise InputError("pixels", "holds a NaN or an infinity: every pixel must be a finite number")
        return x.float()

    def count_tokens(self, inp: RunInput) -> int:
        """Tokens of the image, from its shape alone (lead tokens, registers and the grid's patches)."""
        if inp.pixels is None or inp.pixels.dim() not in (3, 4):
            return 0
        rows, cols = self.embedding.patch_grid(int(inp.pixels.shape[-2]), int(inp.pixels.shape[-1]))
        return self.embedding.lead + self.embedding.n_registers + rows * cols

    def encode_sequence(self, inp: RunInput) -> Encoded:
        """The image's tokens named and embedded: one image (S, D), a batch (B, S, D) of images of one size."""
        pixels = self.check_pixels(inp.pixels)
        e = self.embedding
        rows, cols = e.patch_grid(pixels.shape[-2], pixels.shape[-1])
        labels = e.labels(rows, cols)
        special = tuple(not label.startswith("p(") for label in labels)
        x = e(pixels).float()  # (B, S, D) on the CPU
        if x.shape[0] == 1:
            return Encoded(labels, x[0], from_tokens=False, special=special, patch_grid=(rows, cols))
        b, s = x.shape[0], x.shape[1]
        return Encoded(
            labels,
            x,
            from_tokens=False,
            batch_tokens=(tuple(labels),) * b,
            real=((True,) * s,) * b,
            special=special,
            patch_grid=(rows, cols),
        )

    def network(self, inp: RunInput, device: torch.device, dtype: torch.dtype) -> Network:
        """As a text checkpoint's: on the CPU each stored block converted as the pass reaches it."""
        if device.type == "cpu":
            return converted_per_block(self.net.net, device, dtype)
        return self.net.on(device, dtype)

    def run_config(self, net: Network, fwd: ForwardResult, enc: Encoded) -> RunConfig:
        return replace(super().run_config(net, fwd, enc), special=enc.special, patch_grid=enc.patch_grid)

    def logits(self, run: ModelRun) -> Tensor | None:
        """(B, n_labels) class logits from the run's last hidden state, where the checkpoint has a classifier
        (its class names: classifier.labels); None without one, or for a run that stopped before the last layer."""
        if self.classifier is None or len(run.layers) < self.info.n_layers:
            return None
        return self.classifier(run.layers[-1].resid_out)

    def swap_token(self, inp: RunInput, enc: Encoded, position: int, token: str) -> RunInput:
        raise InputError("change.kind", f"{self.name} reads an image's pixels, not token strings: nothing to swap")

    def token_pool(self) -> list[str] | None:
        return None
