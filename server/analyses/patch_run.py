"""/api/patch/run: one cell of a patching grid opened as a run of its own (engine/analysis/patch.py's Patches).

The corrupted input runs once with the one activation of `cell` taken from the clean run, and comes back as
/api/attention answers the corrupted body (its `layer`, `include`, `precision` and form), so the page draws the
patched run's maps with the same code as any other run, beside the clean and the corrupted ones.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, Field

from engine.analysis.patch import BY_POSITION, Hook
from engine.hooks import patch_source
from engine.interventions import Interventions, Patches
from server.analyses.patch import INDUCTION_CLEAN, INDUCTION_CORRUPTED, prepare_pair
from server.declare import Analysis, Context
from server.errors import ApiError
from server.plan import run_body
from server.schemas.attention import AttentionRequest, AttentionResult, Strict
from server.schemas.ints import Index


class Cell(Strict):
    layer: Index = Field(description="the grid's row: the layer patched")
    column: Index = Field(description="the grid's column: the position (resid_pre, attn_out, mlp_out) or head")


class PatchRunRequest(Strict):
    clean: AttentionRequest = Field(description="one sequence; no layer, include or precision")
    corrupted: AttentionRequest = Field(
        description="the same model, length, masks and network settings as clean; its layer, include and "
        "precision shape the answer, as /api/attention's would"
    )
    hook: Hook = Field(
        description="resid_pre, attn_out, mlp_out (a layer x position cell) or z, pattern (layer x head)"
    )
    cell: Cell


class PatchedCell(BaseModel):
    hook: Hook
    layer: int
    column: int
    clean_tokens: list[str]
    changed_positions: list[int] = Field(description="where the two inputs' embeddings differ")


class PatchRunResult(AttentionResult):
    patched: PatchedCell = Field(description="which clean activation this run of the corrupted input carries")


def patch_run_route(req: PatchRunRequest, ctx: Context) -> dict[str, Any]:
    """Runs the clean input, then the corrupted one with `cell`'s activation taken from it (two forwards), and
    answers the patched run as /api/attention answers `corrupted` (JSON, .npz or the arrays form), with `patched`
    saying which cell it carries. Patching layer 0's input at the only changed position gives the clean run's
    maps exactly; a z patch leaves that head's own map as the corrupted one; a pattern patch makes it the clean
    one."""
    why = "a patched run is one clean and one corrupted sequence through one network"
    pc, pb = prepare_pair(req.clean, req.corrupted, ctx, why, answered=True)
    model, runtime = pc.model, ctx.runtime
    layers = model.n_layers(pb.inp)
    columns = len(pb.encoded.tokens) if req.hook in BY_POSITION else model.n_heads(pb.inp)
    what = "positions" if req.hook in BY_POSITION else "heads"
    if req.cell.layer >= layers:
        raise ApiError(
            422, "invalid_request", f"got {req.cell.layer}: the grid's layers are 0..{layers - 1}", "cell.layer"
        )
    if req.cell.column >= columns:
        raise ApiError(
            422,
            "invalid_request",
            f"got {req.cell.column}: the {req.hook} grid's {what} are 0..{columns - 1}",
            "cell.column",
        )
    if req.hook == "mlp_out" and all(
        b.mlp is None for b in model.network(pb.inp, runtime.device, runtime.dtype).held_blocks
    ):
        raise ApiError(422, "invalid_request", f"{model.info.name} has no feed-forward to patch", "hook")
    _, eligible = model.eligibility(pb.inp, pb.encoded, runtime.device)
    _, clean_eligible = model.eligibility(pc.inp, pc.encoded, runtime.device)
    if not torch.equal(eligible, clean_eligible):
        raise ApiError(
            422, "invalid_request", "the clean and corrupted inputs must have the same masks", "corrupted.masks"
        )
    clean = pc.run()  # every layer: clean refuses `layer`
    patched = pb.run(
        Interventions(
            patch=Patches(req.hook, (((req.cell.layer, req.cell.column),),), patch_source(clean.result, req.hook))
        ),
    )
    body = run_body(patched, req.corrupted, ctx.settings, runtime)
    x_clean, x_bad = pc.encoded.x, pb.encoded.x
    body["patched"] = {
        "hook": req.hook,
        "layer": req.cell.layer,
        "column": req.cell.column,
        "clean_tokens": pc.encoded.tokens,
        "changed_positions": (x_clean != x_bad).any(dim=-1).nonzero().flatten().tolist(),
    }
    return body


PATCH_RUN = Analysis(
    name="patch/run",
    request=PatchRunRequest,
    answer=PatchRunResult,
    run=patch_run_route,
    summary="One cell of a patching grid opened: the corrupted input run with that one clean activation",
    forms=("json", "arrays", "npz"),
    examples={
        "induction": {
            "summary": "Induction with layer 0's input at the corrupted position patched: the clean run's maps",
            "value": {
                "clean": {"model": "induction", "text": INDUCTION_CLEAN},
                "corrupted": {"model": "induction", "text": INDUCTION_CORRUPTED, "include": ["weights"]},
                "hook": "resid_pre",
                "cell": {"layer": 0, "column": 2},
            },
        },
    },
    panel="patch",
    client="patch_run",
)
ANALYSES = (PATCH_RUN,)
