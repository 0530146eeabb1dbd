"""The attention sources attnlab serves, by name."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.errors import is_panic
from engine.models.base import AttentionModel, ModelInfo, ModelRun, RunInput
from engine.models.custom import CustomModel
from engine.models.declare import KNOWN, Capabilities, ModelSource
from engine.models.digits import DigitsModel
from engine.models.given import GivenModel
from engine.models.induction import InductionModel
from engine.models.minilm import MiniLMModel
from engine.models.pycode import PycodeModel
from engine.models.random_layer import RandomModel
from engine.models.textbook import TextbookModel

# Every model family attnlab knows, by name, in the order /api/models lists them: the one place a new family is
# added. Each class declares what it reads and can do (engine/models/declare.py) and how it is built.
FAMILIES: dict[str, type[AttentionModel]] = KNOWN  # engine/models/declare.py's table, which its messages read
FAMILIES.update(
    {
        m.name: m
        for m in (
            TextbookModel,
            RandomModel,
            CustomModel,
            GivenModel,
            MiniLMModel,
            InductionModel,
            PycodeModel,
            DigitsModel,
        )
    }
)
Builder = Callable[[ModelSource | None], AttentionModel]
BUILDERS: dict[str, Builder] = {name: family.build for name, family in FAMILIES.items()}
# Models whose weights come from a package of their own: what to run when it is missing.
INSTALL = {name: family.install for name, family in FAMILIES.items() if family.install is not None}


def check_known(names: list[str]) -> None:
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown models {unknown}; known: {sorted(FAMILIES)}")


def build(name: str, source: ModelSource | None = None) -> AttentionModel:
    """The model `name`, its weights read from `source` (a checkpoint directory) or from its own default."""
    check_known([name])
    return BUILDERS[name](source)


def model_for(name: str | None, x_given: bool, matrices_given: bool = False) -> str | None:
    """The model a request runs on: the one it names, or, for x without a name, the family that serves a bare x,
    and for typed-in scores or pattern without a name, the family that reads them."""
    if name is not None:
        return name
    if matrices_given:
        return next((n for n, family in FAMILIES.items() if "scores" in family.reads), None)
    if not x_given:
        return None
    return next((n for n, family in FAMILIES.items() if family.serves_bare_x), None)


def load_models(names: Iterable[str]) -> dict[str, AttentionModel]:
    """Build each named model once (loading weights where a model has them)."""
    names = list(names)
    check_known(names)
    return {name: BUILDERS[name](None) for name in names}


class LoadedModels(dict[str, AttentionModel]):
    """The models a server loaded, by name, and those it could not, with why (and the command that installs them)."""

    def __init__(self, models: dict[str, AttentionModel], unavailable: dict[str, str]) -> None:
        super().__init__(models)
        self.unavailable = unavailable


def load_available(names: Iterable[str], checkpoints: Mapping[str, Path] | None = None, **loading: Any) -> LoadedModels:
    """Like load_models, but a model whose weights package is not installed is left out, with the command that
    installs it, instead of stopping the server from starting; so is a checkpoint directory (`checkpoints`: name ->
    directory, loaded by engine/models/checkpoint.py load_checkpoint with `loading`: limits, reference) that
    cannot load, with the loader's reason."""
    names = list(names)
    check_known(names)
    models: dict[str, AttentionModel] = {}
    missing: dict[str, str] = {}
    for name in names:
        try:
            models[name] = BUILDERS[name](None)
        except ModuleNotFoundError as err:
            if name not in INSTALL:
                raise
            missing[name] = f"its weights package is not installed ({err.name}): {INSTALL[name]}"
    for name, directory in (checkpoints or {}).items():
        loaded = load_checkpoint_or_why(name, directory, **loading)
        if isinstance(loaded, str):
            missing[name] = loaded
        else:
            models[name] = loaded
    return LoadedModels(models, missing)


def load_checkpoint_or_why(name: str, directory: Path, **loading: Any) -> AttentionModel | str:
    """The checkpoint in `directory` served as `name`, or why it cannot be: the loader's reason for what it refuses
    (a pickle, an unknown family, a missing file, a limit), and the error itself for anything else, so that one
    person's directory never stops a server from starting. The reason is told to clients, so it names files
    within the directory only; the log says which directory."""
    from engine.models.checkpoint import CheckpointError, load_checkpoint, unrooted  # the families' code

    log = logging.getLogger("attnlab")
    try:
        return load_checkpoint(name, directory, **loading)
    except CheckpointError as err:
        log.warning("checkpoint %s in %s did not load: %s", name, directory, err.reason)
        return err.reason
    except BaseException as err:  # a directory anyone can point at: say what failed, keep serving
        if not isinstance(err, Exception) and not is_panic(err):  # KeyboardInterrupt, SystemExit: stop
            raise
        log.exception("checkpoint %s in %s did not load", name, directory)
        return f"did not load ({type(err).__name__}: {unrooted(str(err), directory)})"


__all__ = [
    "BUILDERS",
    "FAMILIES",
    "INSTALL",
    "AttentionModel",
    "Builder",
    "Capabilities",
    "LoadedModels",
    "ModelInfo",
    "ModelRun",
    "ModelSource",
    "RunInput",
    "build",
    "load_available",
    "load_models",
    "model_for",
]
