"""The training lab's ready-made experiments and a snapshot's model entry, for the page's Train workspace.

GET /api/train/experiments                       the six experiments (engine/trainlab/experiments.py EXPERIMENTS):
                                                 each one's title, the specs it runs side by side with their labels,
                                                 the measure that shows its claim, what to look at, and the claim
GET /api/train/experiments/{id}/check?runs=A,B   the claim checked over those runs' measures (one run per spec, in
                                                 the specs' order): whether it held and the figure it read
GET /api/train/{id}/model?step=N                 the snapshot as GET /api/models describes a model, so that the
                                                 page opens train:RUN@STEP in its other workspaces

Included before the run routes (server/routes/train.py): "experiments" is no run id.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from engine.trainlab.experiments import BY_ID, EXPERIMENTS, Experiment
from server.deps import ModelsDep
from server.errors import ApiError
from server.routes.models import entry
from server.routes.train import RUN_ID, RunId, TrainerDep, kept
from server.schemas.errors import ANY_ROUTE, errors
from server.schemas.models import ModelEntry
from server.trained import trained_name

router = APIRouter(prefix="/api/train", tags=["training"], responses=errors(*ANY_ROUTE))
RUN_LIST = rf"^{RUN_ID[1:-1]}(,{RUN_ID[1:-1]})?$"


class ExperimentOut(BaseModel):
    id: str
    title: str
    specs: list[dict[str, Any]] = Field(description="the TrainSpecs run side by side (POST /api/train bodies)")
    labels: list[str] = Field(description="what differs, one per spec")
    measure: str = Field(description="the measure key that shows the claim")
    look_at: str = Field(description="what to look at while it runs")
    claim: str = Field(description="the claim, as its check tests it")


class ExperimentList(BaseModel):
    experiments: list[ExperimentOut]


class CheckOut(BaseModel):
    id: str
    claim: str
    measure: str
    held: bool = Field(description="whether the claim held over the runs' measures")
    figure: float | None = Field(description="the number the check read (null when it is not finite)")
    steps: list[int] = Field(description="each run's last step checked")


def experiment_out(e: Experiment) -> ExperimentOut:
    return ExperimentOut(
        id=e.id,
        title=e.title,
        specs=[dataclasses.asdict(s) for s in e.specs],
        labels=list(e.labels),
        measure=e.measure,
        look_at=e.look_at,
        claim=e.claim,
    )


@router.get("/experiments", response_model=ExperimentList)
def list_experiments() -> ExperimentList:
    """The ready-made experiments, each one click on the page."""
    return ExperimentList(experiments=[experiment_out(e) for e in EXPERIMENTS])


@router.get("/experiments/{experiment_id}/check", response_model=CheckOut, responses=errors(404, 409, 422))
def check_experiment(
    experiment_id: Annotated[str, Path(max_length=64, description="the experiment's id")],
    trainer: TrainerDep,
    runs: Annotated[str, Query(pattern=RUN_LIST, description="the runs' ids, one per spec, comma-separated")],
) -> CheckOut:
    """The experiment's claim checked over the runs' snapshots' measures."""
    experiment = BY_ID.get(experiment_id)
    if experiment is None:
        known = ", ".join(BY_ID)
        raise ApiError(
            404, "not_found", f"no experiment with id {experiment_id[:64]!r}; the experiments: {known}", "id"
        )
    ids = runs.split(",")
    if len(ids) != len(experiment.specs):
        message = f"got {len(ids)} runs: {experiment.id} compares {len(experiment.specs)}, one of runs per spec"
        raise ApiError(422, "invalid_request", message, "runs")
    records = [kept(trainer, run_id) for run_id in ids]
    measures = [[s.measures for s in r.snapshots] for r in records]
    try:
        held, figure = experiment.check(measures)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
        counts = ", ".join(f"{r.id}: {len(r.snapshots)}" for r in records)
        message = f"the runs' snapshots do not yet hold what the claim reads (snapshots {counts})"
        raise ApiError(409, "not_ready", message, "runs") from None
    return CheckOut(
        id=experiment.id,
        claim=experiment.claim,
        measure=experiment.measure,
        held=bool(held),
        figure=float(figure) if math.isfinite(figure) else None,
        steps=[r.snapshots[-1].step if r.snapshots else 0 for r in records],
    )


@router.get("/{run_id}/model", response_model=ModelEntry, responses=errors(404, 422))
def snapshot_model(
    run_id: RunId,
    models: ModelsDep,
    trainer: TrainerDep,
    step: Annotated[int, Query(ge=0, le=2**31, description="the snapshot's step")],
) -> ModelEntry:
    """The snapshot train:RUN@STEP as GET /api/models lists a model (loaded, as /api/attention would)."""
    kept(trainer, run_id)
    return entry(models[trained_name(run_id, step)])
