"""The view options of an attention body, checked against the run they view: `rollout`, `attention_flow`, `sinks`
and `first_layer`."""

from __future__ import annotations

from engine.analysis.attention_flow import FLOW_MAX_TOKENS, flow_work, fused_maps
from engine.models import AttentionModel, ModelRun, RunInput
from engine.models.base import Encoded
from server.config import Settings
from server.errors import ApiError
from server.schemas.attention import AttentionRequest
from wire.arrays import STREAM_MEDIA_TYPE


def check_rollout(req: AttentionRequest, encoded: Encoded) -> None:
    """Rollout's options need include rollout or attention_flow; both need keys that are the queries' own
    positions; attention flow is a max-flow per pair, for up to FLOW_MAX_TOKENS positions."""
    stacked = [name for name in ("rollout", "attention_flow") if name in req.include]
    if req.rollout is not None and not stacked:
        raise ApiError(
            422,
            "invalid_request",
            "rollout options need include rollout or attention_flow: add one or leave rollout out",
            "rollout",
        )
    if stacked and encoded.source is not None:
        raise ApiError(
            422,
            "invalid_request",
            f"{stacked[0]} follows each layer's map through the one before, which needs the keys to be the queries' "
            f"own positions; with a source the keys are another sequence: leave {stacked[0]} out of include",
            "include",
        )
    s = len(encoded.tokens)
    if "attention_flow" in req.include and s > FLOW_MAX_TOKENS:
        raise ApiError(
            422,
            "too_large",
            f"attention flow is a max-flow per (query, key) pair per layer: up to {FLOW_MAX_TOKENS} positions, got "
            f"{s}; use rollout, or a shorter input",
            "include",
        )


def check_flow_work(req: AttentionRequest, run: ModelRun, settings: Settings) -> None:
    """After the forward, before any max-flow: the pairs times the edges they run over, within max_flow_work."""
    if "attention_flow" not in req.include:
        return
    layers = [req.layer] if req.layer is not None else list(range(len(run.layers)))
    heads = req.rollout.heads if req.rollout is not None else "mean"
    residual = req.rollout.residual if req.rollout is not None else True
    maps = fused_maps([run.layers[i].attn.weights for i in range(max(layers) + 1)], heads, residual)
    work, limit = flow_work(maps, layers), settings.limit("max_flow_work")
    if work > limit:
        raise ApiError(
            422,
            "too_large",
            f"attention flow here is {work:,} (pair, edge) steps of max-flow; limit {limit:,} (set by "
            "ATTNLAB_MAX_FLOW_WORK on this server): ask for one `layer`, fewer tokens, or use rollout",
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


def check_first_layer(req: AttentionRequest, model: AttentionModel, inp: RunInput, form: str) -> None:
    """`first_layer` orders the streamed form's layers: refused by name in any other form, beside `layer`, and past
    the model's last layer."""
    if req.first_layer is None:
        return
    if form != "stream":
        why = f"only /api/attention's streamed form sends a layer first (Accept: {STREAM_MEDIA_TYPE})"
        raise ApiError(422, "invalid_request", why, "first_layer")
    if req.layer is not None:
        raise ApiError(
            422, "invalid_request", "first_layer orders every layer: leave out layer or first_layer", "first_layer"
        )
    n = model.n_layers(inp)
    if req.first_layer >= n:
        why = f"got layer {req.first_layer}: {model.info.name} has layers 0..{n - 1}"
        raise ApiError(422, "invalid_request", why, "first_layer")
