"""DeiT (model_type deit): ViT's layout (engine/models/families/vit.py) with a distillation token after [CLS].

    x_0 = [CLS] + [DIST] + patches + positions        positions for both lead tokens, then the grid's
    per layer and final LayerNorm: as ViT

DeiTForImageClassification's classifier reads [CLS]; DeiTForImageClassificationWithTeacher averages its
cls_classifier on [CLS] and its distillation_classifier on [DIST] (engine/models/families/vision.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from engine.models.families import Config, Family, Mapped, Shapes, Sizes, vit
from engine.models.families import vision as v


def sizes(config: Config) -> Sizes:
    return v.image_sizes(config, lead=2)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d = s.d_model
    tokens = v.embedding_shapes(config, d, 2) | {f"{v.E}.distillation_token": (1, 1, d)}
    return tokens | vit.layer_shapes(config, d, s.n_layers) | v.head_shapes(config, d)


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    net, act = vit.network(config, t, s)
    return Mapped(
        embedding=v.patch_embedding(t, dist=t[f"{v.E}.distillation_token"].reshape(-1)),
        network=net,
        architecture=(
            f"DeiT pre-LN encoder over image patches: a = x + Attention(LayerNorm(x)); "
            f"x' = a + FeedForward(LayerNorm(a)), {act}; [CLS] + [DIST] + patches + learned positions; "
            "bidirectional; a final LayerNorm"
        ),
        classifier=v.classifier(config, t, first_patch=2),
    )


FAMILY = Family(model_types=("deit",), prefix="deit.", sizes=sizes, shapes=shapes, build=build, reads="pixels")
