"""Every family attnlab reads a checkpoint of, by config.json `model_type`: the family modules gathered, above the
pieces they share (engine/models/families/__init__.py)."""

from __future__ import annotations

from engine.models.families import Family, bert, gemma2, gemma3_text, gpt2, gpt_neox, llama, olmo2, qwen3, qwen3_moe

SUPPORTED = (
    "bert",
    "roberta",
    "gpt2",
    "gpt_neox",
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "qwen3",
    "olmo2",
    "qwen3_moe",
    "gemma2",
    "gemma3_text",
)
FAMILIES: tuple[Family, ...] = (
    *bert.FAMILIES,
    gpt2.FAMILY,
    gpt_neox.FAMILY,
    llama.FAMILY,
    qwen3.FAMILY,
    olmo2.FAMILY,
    qwen3_moe.FAMILY,
    gemma2.FAMILY,
    gemma3_text.FAMILY,
)
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}


def family_for(model_type: str) -> Family | None:
    return BY_MODEL_TYPE.get(model_type)
