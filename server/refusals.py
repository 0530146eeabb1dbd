"""A request's refusals: the checks that turn it away before any work, each a 4xx naming the field and the limit
(ATTNLAB_MAX_TOKENS, ATTNLAB_MAX_WIDTH, ...) or why the field cannot be honoured. In the order `make_plan`
(server/plan.py) asks them:

    model -> input -> token counts -> layers -> include -> precision/dtype

and `refuse_fields`, for the fields an endpoint cannot honour. Each check reads the request, the settings and what
the step before gave (the model, the encoding's shape); none runs a model's forward pass, and nothing here reads
the plan, which is made only of a request that every check has let through. Three steps hand on what they settled
as they check it: `choose_model` the model, `sink_positions` the key positions `sinks` hides, and `request_runtime`
the runtime in the request's dtype.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import torch

from engine.analysis.attention_flow import FLOW_MAX_TOKENS
from engine.errors import InputError
from engine.models import AttentionModel, RunInput, model_for
from engine.models.base import Encoded, InputShape
from server.config import Settings
from server.deps import Runtime
from server.errors import ApiError
from server.images import check_image_fields
from server.schemas import AttentionRequest, Weights
from server.serialize import Sinks, dtype_name
from wire.arrays import STREAM_MEDIA_TYPE

# include items that read Q, K, V or the chapter's audit of a model: typed-in matrices have no projections
NEEDS_PROJECTIONS = ("qkv", "audit")
# include items made from the contexts: they need value vectors to mix
NEEDS_VALUES = ("contexts", "output", "final", "value_norms", "head_contributions")
# fields that make a request more than one sequence, or a classic bug on purpose: refused where an endpoint reads one
# sequence as it is
ONE_SEQUENCE = ("texts", "source", "demo_bug")

# ---- model ---------------------------------------------------------------------------------------------------------


def choose_model(req: AttentionRequest, models: dict[str, AttentionModel]) -> AttentionModel:
    name = model_for(req.model, req.x is not None, req.scores is not None or req.pattern is not None)
    if name is None:
        raise ApiError(422, "invalid_request", "give a model name, or x with weights", "model")
    unavailable: dict[str, str] = getattr(models, "unavailable", {})
    if name in unavailable:
        raise ApiError(422, "model_unavailable", f"{name} is not loaded on this server: {unavailable[name]}", "model")
    if name not in models:
        raise ApiError(
            422, "unknown_model", f"unknown model {name!r}; this server has {', '.join(sorted(models))}", "model"
        )
    return models[name]


# ---- input ---------------------------------------------------------------------------------------------------------


def check_input(req: AttentionRequest, model: AttentionModel, settings: Settings, dtype: torch.dtype) -> None:
    """Which input the request gives, and each within the server's limits, before anything is tokenised."""
    if req.head_widths is not None and model.info.name != "custom":
        why = f"head_widths splits custom weights into heads; {model.info.name} has its own: leave head_widths out"
        raise ApiError(422, "invalid_request", why, "head_widths")
    check_image_fields(req, model)
    given = [f for f in ("text", "tokens", "x", "texts", "image", "sample") if getattr(req, f) is not None]
    if model.needs_input and not given:
        raise ApiError(422, "invalid_request", "give one of text, tokens, texts or x", "text")
    if req.text is not None and req.tokens is not None:
        raise ApiError(422, "invalid_request", "give text or tokens, not both", "tokens")
    if req.texts is not None and len(given) > 1:
        raise ApiError(422, "invalid_request", f"a batch of texts replaces {given[0]}: give one of them", "texts")
    check_limits(req, settings, dtype)


def check_limits(req: AttentionRequest, settings: Settings, dtype: torch.dtype) -> None:
    if req.text is not None and len(req.text) > settings.max_text_chars:
        raise ApiError(
            413,
            "too_large",
            f"got {len(req.text)} characters, limit {settings.max_text_chars} "
            "(set by ATTNLAB_MAX_TEXT_CHARS on this server)",
            "text",
        )
    for i, tok in enumerate(req.tokens or []):
        if len(tok) > settings.max_text_chars:
            raise ApiError(413, "too_large", f"longer than {settings.max_text_chars} characters", f"tokens[{i}]")
    if req.texts is not None:
        if len(req.texts) > settings.max_batch:
            raise ApiError(
                422,
                "too_large",
                f"got {len(req.texts)} texts, limit {settings.max_batch} (set by ATTNLAB_MAX_BATCH on this server)",
                "texts",
            )
        for i, text in enumerate(req.texts):
            if len(text) > settings.max_text_chars:
                raise ApiError(413, "too_large", f"longer than {settings.max_text_chars} characters", f"texts[{i}]")
    if req.x is not None:
        _check_width(len(req.x[0]), "x", settings)
        check_tokens(len(req.x), "x", settings)
        _check_magnitude(req.x, "x", dtype)
    for name in ("scores", "pattern", "values"):  # typed-in matrices (engine/models/given.py): S x S, S x d_v
        m = getattr(req, name)
        if m is not None:
            check_tokens(len(m) if name == "values" else max(len(m), len(m[0])), name, settings)
            if name == "values":
                _check_width(len(m[0]), name, settings)
            _check_magnitude(m, name, dtype)
    src = req.source
    if src is not None:
        if src.text is not None and len(src.text) > settings.max_text_chars:
            raise ApiError(413, "too_large", f"longer than {settings.max_text_chars} characters", "source.text")
        if src.x is not None:
            _check_width(len(src.x[0]), "source.x", settings)
            check_tokens(len(src.x), "source.x", settings)
            _check_magnitude(src.x, "source.x", dtype)
    if req.weights is not None:
        _check_weights(req.weights, settings, dtype)
    _check_heads(req.heads, "heads", settings)
    _check_heads(req.kv_heads, "kv_heads", settings)
    if req.options is not None:
        if req.options.d_model is not None:
            _check_width(req.options.d_model, "options.d_model", settings)
        _check_heads(req.options.heads, "options.heads", settings)
        _check_heads(req.options.kv_heads, "options.kv_heads", settings)


def _check_width(width: int, field: str, settings: Settings) -> None:
    if width > settings.max_width:
        raise ApiError(
            422,
            "too_large",
            f"got width {width}, limit {settings.max_width} (set by ATTNLAB_MAX_WIDTH on this server)",
            field,
        )


def _check_heads(heads: int | None, field: str, settings: Settings) -> None:
    if heads is not None and heads > settings.max_heads:
        raise ApiError(
            422,
            "too_large",
            f"got {heads}, limit {settings.max_heads} (set by ATTNLAB_MAX_HEADS on this server)",
            field,
        )


def check_tokens(n: int, field: str, settings: Settings) -> None:
    if n > settings.max_tokens:
        raise ApiError(
            422,
            "too_large",
            f"got {n} tokens, limit {settings.max_tokens} (set by ATTNLAB_MAX_TOKENS on this server): "
            "shorten the input",
            field,
        )


def _check_magnitude(m: list[list[float]], field: str, dtype: torch.dtype) -> None:
    limit = torch.finfo(dtype).max
    for i, row in enumerate(m):
        for j, v in enumerate(row):
            if abs(v) > limit:
                raise ApiError(
                    422,
                    "out_of_range",
                    f"{v:g} overflows {str(dtype).removeprefix('torch.')} (|value| <= {limit:.4g})",
                    f"{field}[{i}][{j}]",
                )


def _check_weights(w: Weights, settings: Settings, dtype: torch.dtype) -> None:
    for name in ("w_q", "w_k", "w_v", "w_o"):
        m = getattr(w, name)
        if m is None:
            continue
        _check_width(len(m), f"weights.{name}", settings)
        _check_width(len(m[0]), f"weights.{name}", settings)
        _check_magnitude(m, f"weights.{name}", dtype)


# ---- token counts ----------------------------------------------------------------------------------------------------


def check_token_counts(model: AttentionModel, req: AttentionRequest, inp: RunInput, settings: Settings) -> None:
    """The token limit on each sequence, counted before anything is embedded (65,536 tokens at width 1,024 took
    2.5 s and 1.7 GB to embed before the 422): the text, each text of a batch, and the source."""
    one = replace(inp, source=None, texts=None)
    if inp.texts is not None:
        for i, text in enumerate(inp.texts):
            item = f"texts[{i}]"
            check_tokens(_count(model, replace(one, text=text, tokens=None), item), item, settings)
    else:
        field = input_field(req)
        check_tokens(_count(model, one, field), field, settings)
    src = inp.source
    if src is not None:
        where = "source.tokens" if src.tokens is not None else "source.x" if src.x is not None else "source.text"
        counted = _count(model, replace(one, text=src.text, tokens=src.tokens, x=src.x), where)
        check_tokens(counted, where, settings)


def input_field(req: AttentionRequest) -> str:
    """The request's field that holds its one input, for the token limit's message."""
    order = ("texts", "tokens", "x", "image", "sample")
    return next((f for f in order if getattr(req, f) is not None), "text")


def _count(model: AttentionModel, one: RunInput, field: str) -> int:
    """model.count_tokens(one); a refusal of the sequence while counting (a text its tokenizer's normaliser would
    lengthen past the limit) names the request's field for it (texts[3], source.text), as encoding does."""
    try:
        return model.count_tokens(one)
    except InputError as err:
        if err.field != "text" or field == "text":
            raise
        raise InputError(field, err.message) from err


# ---- layers ----------------------------------------------------------------------------------------------------------


def check_layers(req: AttentionRequest, n: int, model: str, form: str) -> None:
    """`layer` and `first_layer` within the model's `n` layers; `first_layer` orders the streamed form's layers, so
    it is refused by name in any other form and beside `layer`."""
    if req.layer is not None and req.layer >= n:
        raise InputError("layer", f"got layer {req.layer}: {model} has layers 0..{n - 1}")
    if req.first_layer is None:
        return
    if form != "stream":
        why = f"only /api/attention's streamed form sends a layer first (Accept: {STREAM_MEDIA_TYPE})"
        raise ApiError(422, "invalid_request", why, "first_layer")
    if req.layer is not None:
        raise ApiError(
            422, "invalid_request", "first_layer orders every layer: leave out layer or first_layer", "first_layer"
        )
    if req.first_layer >= n:
        why = f"got layer {req.first_layer}: {model} has layers 0..{n - 1}"
        raise ApiError(422, "invalid_request", why, "first_layer")


# ---- include ---------------------------------------------------------------------------------------------------------


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


def check_experts(req: AttentionRequest, shape: InputShape, model: str) -> None:
    """`experts` reads a mixture of experts' routing: a model whose feed-forward is dense in every layer has none."""
    if "experts" in req.include and not shape.top_k:
        raise ApiError(
            422,
            "invalid_request",
            f"{model} has no mixture of experts (its feed-forward is one dense network in every layer): "
            "leave experts out of include",
            "include",
        )


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


def sink_positions(
    req: AttentionRequest, s_k: int, special: tuple[bool, ...] | None, several: bool, model: str
) -> Sinks | None:
    """The key positions `sinks` hides among the `s_k` keys, and whether rows renormalise. `special`: which
    positions the tokenizer added; `several`: a batch or a source, whose special positions are not one sequence's."""
    if req.sinks is None:
        return None
    hide = req.sinks.hide
    if hide == "first":
        return [0], req.sinks.renormalise
    if hide == "special":
        if several:
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
                f"{model} adds no special tokens to this input: hide first or name positions",
                "sinks.hide",
            )
        return [i for i, flag in enumerate(special) if flag], req.sinks.renormalise
    for i, p in enumerate(hide):
        if not 0 <= p < s_k:
            raise ApiError(422, "invalid_request", f"got position {p}: the keys are 0..{s_k - 1}", f"sinks.hide[{i}]")
    return sorted(set(hide)), req.sinks.renormalise


# ---- precision/dtype -------------------------------------------------------------------------------------------------


@cache
def _cannot_run(device: str, dtype: torch.dtype) -> str | None:
    """Why `device` cannot run attention's steps (a matrix product, a batched product, a softmax) in `dtype`, or
    None where it can: tried once per device and dtype, on a 4 x 8 matrix."""
    try:
        a = torch.linspace(-1, 1, 32).reshape(4, 8).to(device=device, dtype=dtype)
        product = torch.baddbmm(a.new_empty(()).expand(1, 4, 4), a[None], a.t()[None], beta=0.0, alpha=0.5)
        torch.softmax(product @ a[None], dim=-1)
    except (RuntimeError, TypeError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def request_runtime(req: AttentionRequest, dtype: torch.dtype | None, runtime: Runtime) -> Runtime:
    """The runtime of this request: the server's, in the request's `dtype` when it gives one (the same run cache,
    keyed on the dtype). A dtype this device cannot compute in is a 422 naming `dtype` and why."""
    if dtype is None or dtype == runtime.dtype:
        return runtime
    why = _cannot_run(str(runtime.device), dtype)
    if why is not None:
        raise ApiError(
            422,
            "invalid_request",
            f"this server's device ({runtime.device}) cannot compute attention in {req.dtype} ({why}): "
            "ask for float32 or float64",
            "dtype",
        )
    return replace(runtime, dtype=dtype)


def check_dtype(dtype: torch.dtype | None, runtime: Runtime) -> Runtime:
    """An endpoint that computes in the server's dtype refuses another (`dtype`, the request's) by name
    (request_runtime sets the runtime of the endpoints that honour it)."""
    if dtype is not None and dtype != runtime.dtype:
        raise ApiError(
            422,
            "invalid_request",
            f"this endpoint computes in the server's {dtype_name(runtime.dtype)} (ATTNLAB_DTYPE); dtype per "
            "request comes with /api/attention and /api/export: leave dtype out",
            "dtype",
        )
    return runtime


# ---- fields an endpoint cannot honour --------------------------------------------------------------------------------


def refuse_fields(req: AttentionRequest, fields: tuple[str, ...], why: str) -> None:
    """A field an endpoint cannot honour is a 422 that names it, never silently ignored."""
    for name in fields:
        if name in req.model_fields_set and getattr(req, name) is not None:
            raise ApiError(422, "invalid_request", f"{why}: leave {name} out", name)
    if "include" in fields and req.sinks is not None:  # a view of weights, where no weights come back
        raise ApiError(422, "invalid_request", f"{why}: leave sinks out", "sinks")
    if "include" in fields or "audit" not in req.include:
        return
    raise ApiError(422, "invalid_request", f"{why}: the audit comes with /api/attention only", "include")
