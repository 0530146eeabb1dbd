"""`model: "train:RUN@STEP"`: a training run's snapshot served as a model in /api/attention and every analysis.

The snapshot's checkpoint directory (Snapshot.write) opens through the same loader as anyone's checkpoint
(engine/models/checkpoint.py load_checkpoint), within ATTNLAB_CHECKPOINT_PARAMETERS. A run trained with the causal
mask off says so in config.json's "attnlab" key, and its model's default masks leave the mask off too, as it was
trained. The few snapshots opened last are kept loaded (least recently used out), as the server keeps its models;
a deleted run's are dropped.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from engine.masks import MaskSpec
from engine.models import AttentionModel, LoadedModels
from engine.models.checkpoint import CheckpointError, CheckpointLimits, load_checkpoint
from server.errors import ApiError
from server.trainstore import RunNotFound, TrainStore

PREFIX = "train:"
TRAINED = re.compile(r"train:([0-9a-f]{1,32})@([0-9]{1,9})")
KEPT = 4  # snapshots kept loaded


def trained_name(run_id: str, step: int) -> str:
    return f"{PREFIX}{run_id}@{step}"


def refused(message: str) -> ApiError:
    return ApiError(422, "unknown_model", message, "model")


class TrainedModels:
    """The snapshots opened as models, by "train:RUN@STEP"."""

    def __init__(self, store: TrainStore, limits: CheckpointLimits) -> None:
        self.store = store
        self.limits = limits
        self._loaded: OrderedDict[str, AttentionModel] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str) -> AttentionModel:
        """The snapshot `name` names, loaded (or from those kept); a 422 naming `model` for an unknown run or step."""
        match = TRAINED.fullmatch(name)
        if match is None:
            raise refused(f"got {name[:100]!r}: a training run's snapshot is named train:RUN@STEP (GET /api/train)")
        run_id, step = match.group(1), int(match.group(2))
        with self._lock:
            if name in self._loaded:
                self._loaded.move_to_end(name)
                return self._loaded[name]
        try:
            record = self.store.get(run_id)
        except RunNotFound:
            raise refused(f"no training run {run_id!r} is kept on this server (GET /api/train lists them)") from None
        snapshot = record.snapshot(step)
        if snapshot is None:
            steps = ", ".join(str(s.step) for s in record.snapshots) or "none yet"
            raise refused(f"run {run_id} has no snapshot at step {step}; its snapshots: {steps}")
        model = self.load(name, snapshot.directory)
        with self._lock:
            self._loaded[name] = model
            while len(self._loaded) > KEPT:
                self._loaded.popitem(last=False)
        return model

    def load(self, name: str, directory: Path) -> AttentionModel:
        try:
            model = load_checkpoint(name, directory, limits=self.limits, reference=False)
        except CheckpointError as err:
            raise refused(f"{name} does not open: {err.reason}") from err
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        if (config.get("attnlab") or {}).get("causal") is False:  # trained without the mask: opened without it
            masks = dataclasses.replace(model.info.default_masks or MaskSpec(), causal=False)
            model.info = dataclasses.replace(model.info, default_masks=masks)
        return model

    def forget(self, run_id: str) -> None:
        """A deleted run's snapshots dropped."""
        with self._lock:
            for name in [n for n in self._loaded if n.startswith(f"{PREFIX}{run_id}@")]:
                del self._loaded[name]


class ServedModels(LoadedModels):
    """The server's models by name, and every kept snapshot as "train:RUN@STEP" (looked up when asked for)."""

    def __init__(self, loaded: LoadedModels, trained: Callable[[str], AttentionModel]) -> None:
        super().__init__(dict(loaded), dict(loaded.unavailable))
        self.trained = trained

    def __contains__(self, name: object) -> bool:
        return (isinstance(name, str) and name.startswith(PREFIX)) or super().__contains__(name)

    def __getitem__(self, name: str) -> AttentionModel:
        if isinstance(name, str) and name.startswith(PREFIX):
            return self.trained(name)
        return super().__getitem__(name)
