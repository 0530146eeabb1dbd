from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from engine.masks import MaskSpec
from server.deps import ModelsDep
from server.schemas import ModelEntry, ModelsResponse

router = APIRouter(prefix="/api", tags=["models"])


def _masks(m: MaskSpec | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "causal": m.causal,
        "padding": list(m.padding) if m.padding is not None else None,
        "window": m.window,
        "blocked": [list(c) for c in m.blocked],
    }


@router.get("/models", response_model=ModelsResponse)
def list_models(models: ModelsDep) -> ModelsResponse:
    entries = []
    for model in models.values():
        i = model.info
        entries.append(
            ModelEntry(
                name=i.name,
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
                default_masks=_masks(i.default_masks),
                options=i.options,
                vocab=i.vocab,
            )
        )
    return ModelsResponse(models=entries)
