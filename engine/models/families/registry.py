"""Every family attnlab reads a checkpoint of, by config.json `model_type`: the family modules gathered, above the
pieces they share (engine/models/families/__init__.py)."""

from __future__ import annotations

from engine.models.families import (
    Family,
    bert,
    deit,
    dinov2,
    distilbert,
    falcon,
    gemma2,
    gemma3_text,
    gpt2,
    gpt_neox,
    gpt_oss,
    llama,
    modernbert,
    olmo2,
    opt,
    phi,
    phi3,
    qwen3,
    qwen3_moe,
    smollm3,
    stablelm,
    vit,
)

FAMILIES: tuple[Family, ...] = (
    *bert.FAMILIES,
    distilbert.FAMILY,
    gpt2.FAMILY,
    gpt_neox.FAMILY,
    llama.FAMILY,
    gemma2.FAMILY,
    gemma3_text.FAMILY,
    phi3.FAMILY,
    qwen3.FAMILY,
    qwen3_moe.FAMILY,
    olmo2.FAMILY,
    phi.FAMILY,
    opt.FAMILY,
    falcon.FAMILY,
    stablelm.FAMILY,
    gpt_oss.FAMILY,
    smollm3.FAMILY,
    modernbert.FAMILY,
    vit.FAMILY,
    deit.FAMILY,
    *dinov2.FAMILIES,
)
SUPPORTED: tuple[str, ...] = tuple(t for f in FAMILIES for t in f.model_types)
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}


def family_for(model_type: str) -> Family | None:
    return BY_MODEL_TYPE.get(model_type)
