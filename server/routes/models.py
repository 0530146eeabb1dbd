from __future__ import annotations

from fastapi import APIRouter

from engine.models.declare import INPUT_FIELDS
from server.deps import ModelsDep
from server.schemas import ModelEntry, ModelsResponse, UnavailableModel
from server.schemas.attention import ModelCapabilities
from server.schemas.errors import ANY_ROUTE, errors

router = APIRouter(prefix="/api", tags=["models"], responses=errors(*ANY_ROUTE))


@router.get("/models", response_model=ModelsResponse)
async def list_models(models: ModelsDep) -> ModelsResponse:
    entries = []
    for model in models.values():
        i = model.info
        entries.append(
            ModelEntry(
                name=model.name,
                description=i.description,
                layers=i.n_layers,
                heads=i.n_heads,
                kv_heads=i.n_kv_heads,
                d_model=i.d_model,
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
                vocab=i.vocab,
            )
        )
    unavailable = getattr(models, "unavailable", {})
    return ModelsResponse(
        models=entries, unavailable=[UnavailableModel(name=n, reason=r) for n, r in unavailable.items()]
    )
