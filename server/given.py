"""What /api/attention can send for typed-in matrices (engine/models/given.py): a field or an include item that has
no meaning without a model's projections is a 422 naming it, never a number made up."""

from __future__ import annotations

from server.errors import ApiError
from server.schemas import AttentionRequest

# include items that read Q, K, V or the chapter's audit of a model: typed-in matrices have no projections
NEEDS_PROJECTIONS = ("qkv", "audit")
# include items made from the contexts: they need value vectors to mix
NEEDS_VALUES = ("contexts", "output", "final", "value_norms", "head_contributions")


def refuse_given(req: AttentionRequest) -> None:
    """The include items and fields typed-in scores or a typed-in pattern cannot honour."""
    if req.scores is None and req.pattern is None:
        return
    what = "scores" if req.scores is not None else "pattern"
    for item in NEEDS_PROJECTIONS:
        if item in req.include:
            raise ApiError(
                422,
                "invalid_request",
                f"{item} needs a model's projections, and typed-in {what} have none: leave {item} out of include",
                "include",
            )
    if req.values is None:
        for item in NEEDS_VALUES:
            if item in req.include:
                raise ApiError(
                    422,
                    "invalid_request",
                    f"{item} needs values (S x d_v) to mix: give values with the {what}, or leave {item} out",
                    "include",
                )
    if req.demo_bug is not None:
        raise ApiError(
            422, "invalid_request", f"typed-in {what} run as typed, with no classic bug: leave demo_bug out", "demo_bug"
        )
