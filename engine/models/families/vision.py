"""What the image families (vit, deit, dinov2) share: their sizes from config.json, the patch embedding's tensors,
the classifier head a checkpoint's architecture implies, and the final LayerNorm.

An image model's sizes: S at the config's image size is its lead tokens ([CLS], [DIST]), registers and
(image_size / patch_size)^2 patches; it has no vocabulary. The encoder is bidirectional (no default mask) and
pre-LN; the final LayerNorm (their `layernorm`) closes the last block as its Norm_mlp, so the last layer's output
is the model's last hidden state (transformers' last_hidden_state) and its hook_resid_post the sum before that
norm. The classifier heads (engine/classifier.py) are read where config.json `architectures` names one:

    ViTForImageClassification, DeiTForImageClassification      classifier.*             on [CLS]
    DeiTForImageClassificationWithTeacher                       cls_classifier.*, distillation_classifier.*
    Dinov2ForImageClassification (and WithRegisters)           classifier.* on [CLS] and the patches' mean
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import AttentionWeights, from_concatenated
from engine.classifier import ImageClassifier, Reads
from engine.forward import Block
from engine.models.families import Config, Shapes, Sizes, heads_divide, linear_T, need, refuse
from engine.norms import LayerNorm
from engine.patches import PatchEmbedding

E = "embeddings"
HEADS: dict[str, tuple[Reads, tuple[str, ...]]] = {
    "ViTForImageClassification": ("cls", ("classifier",)),
    "DeiTForImageClassification": ("cls", ("classifier",)),
    "DeiTForImageClassificationWithTeacher": ("cls_and_dist", ("cls_classifier", "distillation_classifier")),
    "Dinov2ForImageClassification": ("cls_and_patch_mean", ("classifier",)),
    "Dinov2WithRegistersForImageClassification": ("cls_and_patch_mean", ("classifier",)),
}


def grid(config: Config) -> int:
    """g: the config's image is g x g patches."""
    image, patch = config.get("image_size"), config.get("patch_size")
    for name, value in (("image_size", image), ("patch_size", patch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise refuse(name, f"got {value!r}: attnlab reads a square image and patch, one positive integer")
    assert isinstance(image, int) and isinstance(patch, int)
    if patch > image:
        raise refuse("patch_size", f"got {patch} for image_size {image}: a patch must fit in the image")
    return image // patch


def image_sizes(config: Config, lead: int) -> Sizes:
    """An image model's Sizes: `lead` tokens ([CLS], [DIST], registers) before the config's g x g patches."""
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    heads_divide(d, h, h)
    g = grid(config)
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=0,
        max_positions=lead + g * g,
        decoder=False,
    )


def channels(config: Config) -> int:
    return int(need(config, "num_channels")) if "num_channels" in config else 3


def embedding_shapes(config: Config, d: int, lead: int) -> Shapes:
    """The patch projection, [CLS] and the positions (lead + g * g rows)."""
    g, p = grid(config), need(config, "patch_size")
    return {
        f"{E}.cls_token": (1, 1, d),
        f"{E}.position_embeddings": (1, lead + g * g, d),
        f"{E}.patch_embeddings.projection.weight": (d, channels(config), p, p),
        f"{E}.patch_embeddings.projection.bias": (d,),
    }


def attention_shapes(prefix: str, d: int, qkv_bias: bool) -> Shapes:
    """{prefix}.attention.{query,key,value} and {prefix}.output.dense: BERT's layout, q/k/v biases where qkv_bias."""
    out: Shapes = {}
    for name in ("query", "key", "value"):
        out[f"{prefix}.attention.{name}.weight"] = (d, d)
        if qkv_bias:
            out[f"{prefix}.attention.{name}.bias"] = (d,)
    return out | {f"{prefix}.output.dense.weight": (d, d), f"{prefix}.output.dense.bias": (d,)}


def norm_shapes(*names: str, d: int) -> Shapes:
    return {f"{n}.{part}": (d,) for n in names for part in ("weight", "bias")}


def head(config: Config) -> tuple[Reads, tuple[str, ...]] | None:
    """The classifier head config.json `architectures` names (HEADS), or None: the encoder alone."""
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        raise refuse("architectures", f"got {architectures!r}: need a list of class names")
    return next((HEADS[a] for a in architectures if a in HEADS), None)


def labels(config: Config) -> tuple[str, ...]:
    """The classes, in order: config.json id2label, or LABEL_0, LABEL_1 as transformers names them (2 by default)."""
    given = config.get("id2label")
    if given is None:
        return ("LABEL_0", "LABEL_1")
    if not isinstance(given, Mapping) or not given:
        raise refuse("id2label", f"got {given!r}: need an object of class ids and names")
    ids = sorted(int(k) for k in given)
    if ids != list(range(len(ids))):
        raise refuse("id2label", f"got ids {ids[:5]}: need 0 .. n - 1, one per class")
    return tuple(str(given[str(i)] if str(i) in given else given[i]) for i in ids)


def head_shapes(config: Config, d: int) -> Shapes:
    found = head(config)
    if found is None:
        return {}
    reads, names = found
    n = len(labels(config))
    width = 2 * d if reads == "cls_and_patch_mean" else d
    return {k: v for name in names for k, v in {f"{name}.weight": (n, width), f"{name}.bias": (n,)}.items()}


def classifier(config: Config, t: Mapping[str, Tensor], first_patch: int) -> ImageClassifier | None:
    found = head(config)
    if found is None:
        return None
    reads, names = found
    out = ImageClassifier(t[f"{names[0]}.weight"], t[f"{names[0]}.bias"], reads, labels(config), first_patch)
    if reads == "cls_and_dist":
        out = replace(out, W_dist=t[f"{names[1]}.weight"], b_dist=t[f"{names[1]}.bias"])
    return out


def patch_embedding(
    t: Mapping[str, Tensor], dist: Tensor | None = None, registers: Tensor | None = None, antialias: bool = False
) -> PatchEmbedding:
    """The embedding's tensors as the three families store them ([CLS] and positions with a leading 1 axis)."""
    return PatchEmbedding(
        W_patch=t[f"{E}.patch_embeddings.projection.weight"],
        b_patch=t[f"{E}.patch_embeddings.projection.bias"],
        cls=t[f"{E}.cls_token"].reshape(-1),
        W_pos=t[f"{E}.position_embeddings"][0],
        dist=dist,
        registers=registers,
        antialias=antialias,
    )


def self_attention(t: Mapping[str, Tensor], prefix: str, n_heads: int, qkv_bias: bool) -> AttentionWeights:
    """{prefix}.attention.{query,key,value} and {prefix}.output.dense as per-head weights and biases."""
    a = f"{prefix}.attention"
    w = from_concatenated(
        linear_T(t[f"{a}.query.weight"]),
        linear_T(t[f"{a}.key.weight"]),
        linear_T(t[f"{a}.value.weight"]),
        linear_T(t[f"{prefix}.output.dense.weight"]),
        n_heads=n_heads,
    )
    w = replace(w, b_O=t[f"{prefix}.output.dense.bias"])
    if not qkv_bias:
        return w
    return replace(
        w,
        b_Q=t[f"{a}.query.bias"].reshape(n_heads, w.d_head),
        b_K=t[f"{a}.key.bias"].reshape(n_heads, w.d_head),
        b_V=t[f"{a}.value.bias"].reshape(n_heads, w.d_v),
    )


def closed_by_final_norm(blocks: list[Block], t: Mapping[str, Tensor], eps: float) -> tuple[Block, ...]:
    """The blocks, the last one closed by the final LayerNorm (its Norm_mlp): its output is the last hidden state."""
    final = LayerNorm(t["layernorm.weight"], t["layernorm.bias"], eps)
    return (*blocks[:-1], replace(blocks[-1], ln_mlp=final))
