"""The attention sources attnlab serves, by name."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from engine.models.base import AttentionModel, ModelInfo, ModelRun, RunInput
from engine.models.custom import CustomModel
from engine.models.induction import InductionModel
from engine.models.minilm import MiniLMModel
from engine.models.random_layer import RandomModel
from engine.models.textbook import TextbookModel

BUILDERS: dict[str, Callable[[], AttentionModel]] = {
    "textbook": TextbookModel,
    "random": RandomModel,
    "custom": CustomModel,
    "minilm": MiniLMModel,
    "induction": InductionModel,
}


def load_models(names: Iterable[str]) -> dict[str, AttentionModel]:
    """Build each named model once (loading weights where a model has them)."""
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; known: {sorted(BUILDERS)}")
    return {name: BUILDERS[name]() for name in names}


__all__ = ["BUILDERS", "AttentionModel", "ModelInfo", "ModelRun", "RunInput", "load_models"]
