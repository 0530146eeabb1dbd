"""/api/patch: activation patching from a clean into a corrupted input, a grid of cells (engine/analysis/patch.py)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, Field

from engine.analysis.patch import BY_POSITION, Hook, Metric, patch, token_id
from engine.errors import InputError
from server.analyses.compare import naming
from server.declare import Analysis, Context, Limit
from server.errors import ApiError
from server.plan import Plan, make_plan
from server.refusals import ONE_SEQUENCE, refuse_fields
from server.schemas.attention import AttentionRequest, Position, Strict, Text

INDUCTION_CLEAN = "red ball king river frog red ball king"
INDUCTION_CORRUPTED = "red ball moon river frog red ball king"


class LogitDiff(Strict):
    kind: Literal["logit_diff"]
    position: Position = Field(description="the query position whose logits are read")
    correct: Text = Field(description="the token the clean input should predict there")
    wrong: Text = Field(description="the token the corrupted input pushes towards")


class Loss(Strict):
    kind: Literal["loss"]


class OutputDistance(Strict):
    kind: Literal["output_distance"]


MetricIn = Annotated[LogitDiff | Loss | OutputDistance, Field(discriminator="kind")]


class PatchRequest(Strict):
    clean: AttentionRequest
    corrupted: AttentionRequest = Field(description="the same model, length and masks as clean")
    hook: Hook = Field(
        description="resid_pre, attn_out, mlp_out: a layer x position grid; z, pattern: a layer x head grid"
    )
    metric: MetricIn = Field(
        description="logit_diff (correct minus wrong at a position; decoders), loss (mean next-token loss on the "
        "clean tokens; decoders) or output_distance (mean L2 distance of the final output from the clean one)"
    )


class PatchResult(BaseModel):
    model: str
    tokens: list[str] = Field(description="the clean input's tokens")
    corrupted_tokens: list[str]
    hook: Hook
    rows: int = Field(description="layers")
    columns: int = Field(description="positions (resid_pre, attn_out, mlp_out) or heads (z, pattern)")
    clean_metric: float
    corrupted_metric: float
    metric_grid: list[list[float]] = Field(description="rows x columns: the metric with that one cell patched")
    recovered: list[list[float | None]] = Field(
        description="(patched - corrupted) / (clean - corrupted) per cell: 1 = the cell carries the whole "
        "difference, 0 = none of it; null everywhere when clean and corrupted give the same metric"
    )
    changed_positions: list[int] = Field(description="where the two inputs' embeddings differ")
    forwards: int = Field(description="forward passes this answer cost: one per cell, plus clean and corrupted")


def prepare_pair(
    clean: AttentionRequest, corrupted: AttentionRequest, ctx: Context, why: str, *, answered: bool = False
) -> tuple[Plan, Plan]:
    """Both bodies checked and prepared: one sequence each, the same model, network settings and length.
    `answered`: the corrupted body's layer, include and precision shape an /api/attention answer (patch/run)."""
    settings, models, runtime = ctx.settings, ctx.models, ctx.runtime
    with naming("clean"):
        refuse_fields(clean, ("layer", "include", "precision", *ONE_SEQUENCE), why)
    with naming("corrupted"):
        refuse_fields(corrupted, ONE_SEQUENCE if answered else ("layer", "include", "precision", *ONE_SEQUENCE), why)
    for name in ("scale", "all_masked", "options", "heads", "kv_heads", "weights"):
        if getattr(clean, name) != getattr(corrupted, name):
            raise ApiError(
                422,
                "invalid_request",
                f"differs from clean.{name}: both inputs run through one network, so only their tokens may differ",
                f"corrupted.{name}",
            )
    with naming("clean"):
        pc = make_plan(clean.model_copy(update={"include": []}), settings, models, runtime)
    with naming("corrupted"):
        pb = make_plan(
            corrupted if answered else corrupted.model_copy(update={"include": []}),
            settings,
            models,
            runtime,
            accept=ctx.accept if answered else None,
        )
    if pb.model is not pc.model:
        raise ApiError(
            422,
            "invalid_request",
            f"is {pb.model.info.name} but clean runs {pc.model.info.name}: patch within one model",
            "corrupted.model",
        )
    s = len(pc.encoded.tokens)
    if len(pb.encoded.tokens) != s:
        raise ApiError(
            422,
            "invalid_request",
            f"has {len(pb.encoded.tokens)} tokens but clean has {s}: patching needs inputs of the same length "
            "(change a token, do not add one)",
            "corrupted",
        )
    return pc, pb


def patch_route(req: PatchRequest, ctx: Context) -> PatchResult:
    """Runs the corrupted input once per cell of the grid with that one activation taken from the clean run (in
    batched forwards: one request, not one call per cell), and returns the metric per cell and the share of the
    clean-corrupted difference it recovers. Both inputs: one sequence each, the same model, length and masks.
    The number of cells is bounded by ATTNLAB_MAX_PATCH_CELLS before anything runs."""
    settings, runtime = ctx.settings, ctx.runtime
    why = "patching runs every layer of one clean and one corrupted sequence and returns a grid"
    pc, pb = prepare_pair(req.clean, req.corrupted, ctx, why)
    model, s = pc.model, len(pc.encoded.tokens)
    columns = s if req.hook in BY_POSITION else model.n_heads(pb.inp)
    n_cells = model.n_layers(pb.inp) * columns
    limit = settings.limit("max_patch_cells")
    if n_cells > limit:
        raise ApiError(
            422,
            "too_large",
            f"the {req.hook} grid has {model.n_layers(pb.inp)} layers x {columns} "
            f"{'positions' if req.hook in BY_POSITION else 'heads'} = {n_cells:,} cells, one forward each; limit "
            f"{limit:,} (set by ATTNLAB_MAX_PATCH_CELLS on this server): use a shorter input or a head hook",
            "hook",
        )
    m = req.metric
    with naming("metric"):
        if isinstance(m, LogitDiff):
            if not 0 <= m.position < s:
                raise InputError("position", f"got position {m.position}: the sequence has {s} positions, 0..{s - 1}")
            metric = Metric(
                "logit_diff", m.position, token_id(model, m.correct, "correct"), token_id(model, m.wrong, "wrong")
            )
        else:
            metric = Metric(m.kind)
    with torch.inference_mode():
        result = patch(model, pc.inp, pc.encoded, pb.inp, pb.encoded, req.hook, metric, runtime.device, runtime.dtype)
    return PatchResult(
        model=model.info.name,
        tokens=pc.encoded.tokens,
        corrupted_tokens=pb.encoded.tokens,
        **dataclasses.asdict(result),
    )


PATCH = Analysis(
    name="patch",
    request=PatchRequest,
    answer=PatchResult,
    run=patch_route,
    summary="Activation patching: which activation carries the difference between a clean and a corrupted input",
    examples={
        "induction": {
            "summary": "Induction: which heads carry 'king -> river' once 'king' before 'river' is corrupted",
            "value": {
                "clean": {"model": "induction", "text": INDUCTION_CLEAN},
                "corrupted": {"model": "induction", "text": INDUCTION_CORRUPTED},
                "hook": "z",
                "metric": {"kind": "logit_diff", "position": 7, "correct": "river", "wrong": "frog"},
            },
        },
        "residual": {
            "summary": "The same, over the residual stream by layer and position",
            "value": {
                "clean": {"model": "induction", "text": INDUCTION_CLEAN},
                "corrupted": {"model": "induction", "text": INDUCTION_CORRUPTED},
                "hook": "resid_pre",
                "metric": {"kind": "logit_diff", "position": 7, "correct": "river", "wrong": "frog"},
            },
        },
    },
    panel="patch",
    limits=(
        Limit(
            "max_patch_cells",
            1024,
            "cells one `/api/patch` may ask for (layers x positions, or layers x heads): one forward pass each",
        ),
    ),
)
ANALYSES = (PATCH,)
