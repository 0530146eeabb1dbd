"""/api/scale-sweep: why scores are divided by sqrt(d_k), measured on random q and k (engine/analysis/sweep.py)."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, Field

from engine.analysis.sweep import SweepRow, scale_sweep, sweep_values
from server.declare import Analysis, Context, Limit, answer_of
from server.errors import ApiError
from server.schemas.attention import Strict


class ScaleSweepRequest(Strict):
    widths: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], min_length=1, max_length=32
    )
    samples: int = Field(2000, ge=10, le=20_000, description="query rows per width")
    keys: int = Field(16, ge=2, le=256, description="keys per row")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    variance: float = Field(1.0, gt=0, le=100, allow_inf_nan=False, description="per-coordinate variance of q and k")


SweepRowOut = answer_of(SweepRow, "SweepRowOut")  # the engine's row, field for field


class ScaleSweepResult(BaseModel):
    variance: float
    samples: int
    keys: int
    uniform_entropy: float = Field(description="ln(keys): the entropy of a uniform row")
    widths: list[SweepRowOut]  # type: ignore[valid-type]


def scale_sweep_route(req: ScaleSweepRequest, ctx: Context) -> ScaleSweepResult:
    """For random q and k with the given per-coordinate variance: the standard deviation of q.k (grows like
    sqrt(d_k)) and of q.k / sqrt(d_k) (stays flat), and what a softmax over `keys` such scores does: its entropy
    and its largest weight, unscaled and scaled. samples x keys x the sum of the widths is bounded by
    ATTNLAB_MAX_SWEEP_VALUES."""
    limit = ctx.settings.limit("max_sweep_values")
    work = sweep_values(req.widths, req.samples, req.keys)
    if work > limit:
        raise ApiError(
            422,
            "too_large",
            f"samples x keys x sum of widths = {req.samples:,} x {req.keys:,} x {sum(req.widths):,} = {work:,} "
            f"q.k products, limit {limit:,} (set by ATTNLAB_MAX_SWEEP_VALUES on this server): "
            "ask for fewer or narrower widths, fewer samples or fewer keys",
            "widths",
        )
    rows = scale_sweep(req.widths, req.samples, req.seed, req.variance, req.keys)
    return ScaleSweepResult(
        variance=req.variance,
        samples=req.samples,
        keys=req.keys,
        uniform_entropy=math.log(req.keys),
        widths=[SweepRowOut.model_validate(r, from_attributes=True) for r in rows],
    )


SCALE_SWEEP = Analysis(
    name="scale-sweep",
    request=ScaleSweepRequest,
    answer=ScaleSweepResult,
    run=scale_sweep_route,
    summary="Why scores are divided by sqrt(d_k): the spread of q.k against d_k, unscaled and scaled",
    examples={"figure": {"summary": "The chapter's Figure 21.5", "value": {"widths": [1, 4, 16, 64, 256]}}},
    panel="sweep",
    tags=("mechanics",),
    limits=(
        Limit(
            "max_sweep_values",
            64_000_000,
            "q.k products of one `/api/scale-sweep` (samples x keys x the sum of its widths): Figure 21.5 and the "
            "default widths pass",
        ),
    ),
)
ANALYSES = (SCALE_SWEEP,)
