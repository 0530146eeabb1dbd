from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter

from engine.models import AttentionModel
from engine.models.declare import INPUT_FIELDS
from engine.models.image_model import ImageCheckpointModel
from engine.vision.images import Preprocessing, PreprocessingError
from engine.vision.samples import PHOTOS, digits
from server.deps import ModelsDep
from server.schemas.errors import ANY_ROUTE, errors
from server.schemas.models import (
    ImageInput,
    LayerKindOut,
    ModelCapabilities,
    ModelEntry,
    ModelExperts,
    ModelReference,
    ModelsResponse,
    ShippedSamples,
    UnavailableModel,
)

router = APIRouter(prefix="/api", tags=["models"], responses=errors(*ANY_ROUTE))


@router.get("/models", response_model=ModelsResponse)
async def list_models(models: ModelsDep) -> ModelsResponse:
    unavailable = getattr(models, "unavailable", {})
    return ModelsResponse(
        models=[entry(model) for model in models.values()],
        unavailable=[UnavailableModel(name=n, reason=r) for n, r in unavailable.items()],
    )


def entry(model: AttentionModel) -> ModelEntry:
    """What GET /api/models says of one model: its info (engine/models/run.py ModelInfo) and its declaration."""
    i = model.info
    reference: dict[str, Any] | None = getattr(model, "reference", None)
    vocab_size = getattr(i, "vocab_size", None) or (len(i.vocab) if i.vocab else None)
    return ModelEntry(
        name=model.name,
        description=i.description,
        family=getattr(i, "family", None) or model.name,
        n_layers=i.n_layers,
        n_heads=i.n_heads,
        n_kv_heads=i.n_kv_heads,
        d_model=i.d_model,
        vocab_size=vocab_size,
        max_positions=getattr(i, "max_positions", None) or i.max_tokens,
        reference=None if reference is None else ModelReference.model_validate(reference),
        card=dict(getattr(model, "card", None) or {}),
        layers=i.n_layers,
        heads=i.n_heads,
        kv_heads=i.n_kv_heads,
        d_head=i.d_head,
        d_v=i.d_v,
        max_tokens=i.max_tokens,
        tokenizer=i.tokenizer,
        default_text=i.default_text,
        default_masks=i.default_masks.to_dict() if i.default_masks else None,
        options=i.options,
        capabilities=ModelCapabilities(**model.capabilities.as_dict()),
        reads=[f for f in INPUT_FIELDS if f in model.reads],
        defaults=i.defaults,
        breaks=dict(model.breaks),
        layer_kinds=kinds(model),
        vocab=i.vocab,
        experts=None if i.experts is None else ModelExperts(count=i.experts[0], top_k=i.experts[1]),
        sinks=i.sinks,
        image=image_input(model),
    )


def image_input(model: AttentionModel) -> ImageInput | None:
    """The images a model that reads pixels takes (its preprocessor_config.json's size) and its patch grid there."""
    if "pixels" not in model.reads or not isinstance(model, ImageCheckpointModel):
        return None
    e = model.embedding
    try:
        how = Preprocessing.from_config(model.preprocessor, e.channels)
        height, width = (how.height, how.width) if how.do_resize else (model.image_size, model.image_size)
    except PreprocessingError:
        height = width = model.image_size
    rows, cols = e.patch_grid(height, width)
    return ImageInput(
        channels=e.channels,
        size=[height, width],
        patch_size=e.patch_size,
        patch_grid=[rows, cols],
        samples=ShippedSamples(digits=len(digits()[1]), photos=list(PHOTOS)),
    )


def kinds(model: AttentionModel) -> list[LayerKindOut]:
    """Each layer's kind: the model's own where it declares them (a checkpoint), else every layer global with no
    window, rotary or softcap of its own declared."""
    declared = getattr(model.info, "layer_kinds", None)
    if declared is None:
        return [
            LayerKindOut(index=i, kind="global", window=None, rope_theta=None, softcap=None)
            for i in range(model.info.n_layers)
        ]
    return [LayerKindOut(**dataclasses.asdict(k)) for k in declared]
