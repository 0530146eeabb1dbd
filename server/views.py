"""The view options of an attention body, checked against the run they view: `rollout` and `sinks`."""

from __future__ import annotations

from engine.models import ModelRun
from engine.models.base import Encoded
from server.errors import ApiError
from server.schemas.attention import AttentionRequest


def check_rollout(req: AttentionRequest, encoded: Encoded) -> None:
    """Rollout's options need include rollout; rollout needs keys that are the queries' own positions."""
    if req.rollout is not None and "rollout" not in req.include:
        raise ApiError(
            422, "invalid_request", "rollout options need include rollout: add it or leave rollout out", "rollout"
        )
    if "rollout" in req.include and encoded.source is not None:
        raise ApiError(
            422,
            "invalid_request",
            "rollout multiplies each layer's map by the one before, which needs the keys to be the queries' own "
            "positions; with a source the keys are another sequence: leave rollout out of include",
            "include",
        )


def sink_positions(req: AttentionRequest, run: ModelRun) -> tuple[list[int], bool] | None:
    """The key positions `sinks` hides in this run (validated against its keys), and whether rows renormalise."""
    if req.sinks is None:
        return None
    s_k = run.eligible.shape[-1]
    hide = req.sinks.hide
    if hide == "first":
        return [0], req.sinks.renormalise
    if hide == "special":
        special = run.config.special
        if run.batch_tokens is not None or run.source_tokens is not None:
            raise ApiError(
                422,
                "invalid_request",
                "special positions are one sequence's own: for a batch or a source, name the positions",
                "sinks.hide",
            )
        if special is None or not any(special):
            raise ApiError(
                422,
                "invalid_request",
                f"{run.model} adds no special tokens to this input: hide first or name positions",
                "sinks.hide",
            )
        return [i for i, flag in enumerate(special) if flag], req.sinks.renormalise
    for i, p in enumerate(hide):
        if not 0 <= p < s_k:
            raise ApiError(422, "invalid_request", f"got position {p}: the keys are 0..{s_k - 1}", f"sinks.hide[{i}]")
    return sorted(set(hide)), req.sinks.renormalise
