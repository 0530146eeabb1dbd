"""What the training lab's routes (server/routes/train.py) read and answer.

TrainRequest's fields are TrainSpec's (engine/trainlab/spec.py), read from the dataclass itself, so a knob added
there is a field here with the same default; the body is strict (no field it does not know, no "2" for 2), and
check_spec then refuses what the server's limits do not allow, naming the field.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from engine.trainlab.spec import TASKS, TrainSpec
from server.schemas.ints import INT64_MAX, INT64_MIN

Status = Literal["queued", "running", "finished", "cancelled", "failed", "interrupted"]
NAME = Field(None, min_length=1, max_length=200, description="the run's name in lists (default: its task and shape)")


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def spec_fields() -> dict[str, Any]:
    hints = typing.get_type_hints(TrainSpec)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(TrainSpec):
        default = ... if f.default is dataclasses.MISSING else f.default
        kind = hints[f.name]
        if f.name == "task":
            out[f.name] = (kind, Field(default, description=f"what the model learns: one of {', '.join(TASKS)}"))
        elif kind is int:  # bounded at 64 bits here (server/schemas/ints.py); check_spec then names the real limit
            out[f.name] = (kind, Field(default, ge=INT64_MIN, le=INT64_MAX))
        else:
            out[f.name] = (kind, default)
    return out


TrainRequest: type[StrictBody] = create_model(
    "TrainRequest",
    __base__=StrictBody,
    __doc__="A training run: TrainSpec's knobs (engine/trainlab/spec.py), and a name.",
    name=(str | None, NAME),
    **spec_fields(),
)
TrainRequest.model_config["json_schema_extra"] = {
    "examples": [{"task": "copy", "layers": 1, "heads": 2, "width": 16, "positions": 16, "steps": 2, "batch": 2}]
}


def spec_of(body: BaseModel) -> TrainSpec:
    return TrainSpec(**body.model_dump(exclude={"name"}))


class RenameRequest(StrictBody):
    name: str = Field(min_length=1, max_length=200)


class TrainStarted(BaseModel):
    """A run queued: follow it at `events`."""

    id: str
    name: str
    status: Status
    events: str = Field(description="the run's server-sent events: GET it to follow the run")


class SnapshotOut(BaseModel):
    step: int
    measures: dict[str, Any] = Field(description="the measures at this step (engine/trainlab/measures.py)")
    model: str = Field(description="this snapshot as a model in every other view: train:RUN@STEP")


class RunOut(BaseModel):
    id: str
    name: str
    status: Status
    spec: dict[str, Any] = Field(description="the TrainSpec the run was started with")
    created: datetime
    updated: datetime
    error: str | None = Field(description="why it failed or stopped; null when it did not")
    steps: list[int] = Field(description="the steps of its snapshots so far")


class RunList(BaseModel):
    runs: list[RunOut] = Field(description="every run kept, newest first")


class RunDetail(RunOut):
    snapshots: list[SnapshotOut] = Field(description="its snapshots so far, in step order")
