"""From a validated AttentionRequest to an engine run: pick the model, enforce the limits, build RunInput.

Every analysis endpoint takes the same request body, so they all go through `prepare`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.errors import InputError
from engine.interventions import NO_INTERVENTIONS, Interventions
from engine.masks import MaskSpec
from engine.models import AttentionModel, ModelRun, RunInput, model_for
from engine.models.base import Encoded, SourceInput
from server.config import Settings
from server.deps import Runtime
from server.errors import ApiError
from server.forms import form_of
from server.given import refuse_given
from server.precision import check_how
from server.runcache import cacheable, run_key
from server.schemas import AttentionRequest, Weights
from server.schemas.attention import sends_eligibility
from server.serialize import ResultCount, check_result_bytes, check_result_size, serialize_run
from server.views import check_first_layer, check_flow_work, check_rollout, sink_positions
from server.work import WorkShape, check_work_bytes


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
        _check_tokens(len(req.x), "x", settings)
        _check_magnitude(req.x, "x", dtype)
    for name in ("scores", "pattern", "values"):  # typed-in matrices (engine/models/given.py): S x S, S x d_v
        m = getattr(req, name)
        if m is not None:
            _check_tokens(len(m) if name == "values" else max(len(m), len(m[0])), name, settings)
            if name == "values":
                _check_width(len(m[0]), name, settings)
            _check_magnitude(m, name, dtype)
    src = req.source
    if src is not None:
        if src.text is not None and len(src.text) > settings.max_text_chars:
            raise ApiError(413, "too_large", f"longer than {settings.max_text_chars} characters", "source.text")
        if src.x is not None:
            _check_width(len(src.x[0]), "source.x", settings)
            _check_tokens(len(src.x), "source.x", settings)
            _check_magnitude(src.x, "source.x", dtype)
    if req.weights is not None:
        _check_weights(req.weights, settings, dtype)
    for field, value in (("heads", req.heads), ("kv_heads", req.kv_heads)):
        if value is not None and value > settings.max_heads:
            raise ApiError(
                422,
                "too_large",
                f"got {value}, limit {settings.max_heads} (set by ATTNLAB_MAX_HEADS on this server)",
                field,
            )
    if req.options is not None:
        if req.options.d_model is not None:
            _check_width(req.options.d_model, "options.d_model", settings)
        for field, value in (("options.heads", req.options.heads), ("options.kv_heads", req.options.kv_heads)):
            if value is not None and value > settings.max_heads:
                raise ApiError(
                    422,
                    "too_large",
                    f"got {value}, limit {settings.max_heads} (set by ATTNLAB_MAX_HEADS on this server)",
                    field,
                )


def _check_width(width: int, field: str, settings: Settings) -> None:
    if width > settings.max_width:
        raise ApiError(
            422,
            "too_large",
            f"got width {width}, limit {settings.max_width} (set by ATTNLAB_MAX_WIDTH on this server)",
            field,
        )


def _check_tokens(n: int, field: str, settings: Settings) -> None:
    if n > settings.max_tokens:
        raise ApiError(
            422,
            "too_large",
            f"got {n} tokens, limit {settings.max_tokens} (set by ATTNLAB_MAX_TOKENS on this server): "
            "shorten the input",
            field,
        )


def reason_grids(inp: RunInput, model: AttentionModel, encoded: Encoded) -> int:
    """How many reasons grids the answer holds (one per mask in force), at most: counted from the masks asked for."""
    m = inp.masks if inp.masks is not None else model.info.default_masks or MaskSpec()
    if encoded.source is not None:
        return (encoded.source_padding is not None) + bool(m.blocked)
    padding = m.padding is not None or m.padded is not None or encoded.batch is not None
    return m.causal + (m.window is not None) + padding + bool(m.blocked)


def check_token_counts(model: AttentionModel, req: AttentionRequest, inp: RunInput, settings: Settings) -> None:
    """The token limit on each sequence, counted before anything is embedded (65,536 tokens at width 1,024 took
    2.5 s and 1.7 GB to embed before the 422): the text, each text of a batch, and the source."""
    one = replace(inp, source=None, texts=None)
    if inp.texts is not None:
        for i, text in enumerate(inp.texts):
            item = f"texts[{i}]"
            _check_tokens(_count(model, replace(one, text=text, tokens=None), item), item, settings)
    else:
        field = "tokens" if req.tokens is not None else "x" if req.x is not None else "text"
        _check_tokens(_count(model, one, field), field, settings)
    src = inp.source
    if src is not None:
        where = "source.tokens" if src.tokens is not None else "source.x" if src.x is not None else "source.text"
        counted = _count(model, replace(one, text=src.text, tokens=src.tokens, x=src.x), where)
        _check_tokens(counted, where, settings)


def _count(model: AttentionModel, one: RunInput, field: str) -> int:
    """model.count_tokens(one); a refusal of the sequence while counting (a text its tokenizer's normaliser would
    lengthen past the limit) names the request's field for it (texts[3], source.text), as encoding does."""
    try:
        return model.count_tokens(one)
    except InputError as err:
        if err.field != "text" or field == "text":
            raise
        raise InputError(field, err.message) from err


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


def to_run_input(req: AttentionRequest) -> RunInput:
    def tensor(m: list[list[float]]) -> torch.Tensor:
        return torch.tensor(m, dtype=torch.float64)

    weights = None
    if req.weights is not None:
        weights = {k: tensor(v) for k, v in req.weights.model_dump().items() if v is not None}
    masks = None
    if req.masks is not None:
        m = req.masks
        masks = MaskSpec(
            causal=m.causal,
            padding=tuple(m.padding) if m.padding is not None else None,
            padded=tuple(m.padded) if m.padded is not None else None,
            window=m.window,
            blocked=tuple((int(q), int(k)) for q, k in m.blocked),
        )
    options = req.options.model_dump(exclude_none=True) if req.options is not None else {}
    source = None
    if req.source is not None:
        src = req.source
        source = SourceInput(
            text=src.text,
            tokens=src.tokens,
            x=tensor(src.x) if src.x is not None else None,
            padding=tuple(src.padding) if src.padding is not None else None,
        )
    return RunInput(
        text=req.text,
        tokens=req.tokens,
        x=tensor(req.x) if req.x is not None else None,
        scores=tensor(req.scores) if req.scores is not None else None,
        pattern=tensor(req.pattern) if req.pattern is not None else None,
        values=tensor(req.values) if req.values is not None else None,
        texts=req.texts,
        source=source,
        weights=weights,
        heads=req.heads,
        kv_heads=req.kv_heads,
        head_widths=tuple(req.head_widths) if req.head_widths is not None else None,
        options=options,
        masks=masks,
        scale=req.scale,
        all_masked=req.all_masked,
        # the final output is the model's last: a request for it runs every layer, whichever one it shows
        last_layer=None if "final" in req.include else req.layer,
    )


@dataclass(frozen=True)
class Prepared:
    """A request checked against every limit, with its input tokenised and embedded once."""

    model: AttentionModel
    inp: RunInput
    encoded: Encoded

    def run(self, runtime: Runtime, interventions: Interventions = NO_INTERVENTIONS) -> ModelRun:
        """The forward pass (on the request's compute thread: server/scheduling.py), or the same pass kept in the
        run cache. A pass through every layer also serves a request for one of them."""
        return cached_run(self.model, self.inp, runtime, interventions, self.encoded)

    def run_to(self, layer: int, runtime: Runtime, interventions: Interventions = NO_INTERVENTIONS) -> ModelRun:
        """The pass through layers 0..layer only (or a whole pass the run cache holds): what `run_on` goes on from."""
        if layer >= self.model.last_layer(self.inp):  # the part is the whole pass
            return self.run(runtime, interventions)
        first = replace(self.inp, last_layer=layer)
        return cached_run(self.model, first, runtime, interventions, self.encoded, keep=False)

    def run_on(self, part: ModelRun, runtime: Runtime, interventions: Interventions = NO_INTERVENTIONS) -> ModelRun:
        """The request's whole pass, going on from `part` (this input's first layers, from `run_to`): one forward
        in two parts, kept in the run cache as the whole pass."""
        last = self.model.last_layer(self.inp)
        if len(part.layers) > last:
            return part
        return cached_run(self.model, self.inp, runtime, interventions, self.encoded, after=part)

    def every_layer(self) -> RunInput:
        """The input with no last layer: analyses run the whole model, whatever layer the result shows."""
        return replace(self.inp, last_layer=None)


def cached_run(
    model: AttentionModel,
    inp: RunInput,
    runtime: Runtime,
    interventions: Interventions = NO_INTERVENTIONS,
    encoded: Encoded | None = None,
    after: ModelRun | None = None,
    keep: bool = True,
) -> ModelRun:
    """model.run through the run cache: the same input, masks and options give the same pass, run once. `after`:
    this pass's first layers, already computed (model.run goes on from them); `keep`: False for a part of a pass
    that the whole pass will replace (it is looked up, not kept)."""
    where = (str(runtime.device), str(runtime.dtype))
    key = run_key(model.info.name, inp, interventions, *where) if cacheable(interventions) else None
    if key is not None:
        keys = [key]
        if inp.last_layer is not None:  # a pass through every layer serves one of them
            keys.append(run_key(model.info.name, replace(inp, last_layer=None), interventions, *where))
        found = runtime.runs.get(*keys, count=after is None)  # going on from a part: that part's lookup counted
        if found is not None:
            return found
    with torch.inference_mode():
        run = model.run(inp, runtime.device, runtime.dtype, interventions=interventions, encoded=encoded, after=after)
    if key is not None and keep:
        runtime.runs.put(key, run)
    return run


def prepare(
    req: AttentionRequest,
    settings: Settings,
    models: dict[str, AttentionModel],
    runtime: Runtime,
    *,
    results: int = 1,
    accept: str | None = None,
) -> Prepared:
    """Pick the model, tokenise once and check every limit before any computation starts.

    `results`: how many results of the request's shape the answer holds (an intervention sends before and after).
    `accept`: the request's Accept header, the form whose bytes ATTNLAB_MAX_RESULT_BYTES bounds (JSON when absent).
    """
    model = choose_model(req, models)
    refuse_given(req)
    check_how(req, runtime, model.info.name)  # dtype and head_widths
    given = [f for f in ("text", "tokens", "x", "texts") if getattr(req, f) is not None]
    if model.needs_input and not given:
        raise ApiError(422, "invalid_request", "give one of text, tokens, texts or x", "text")
    if req.text is not None and req.tokens is not None:
        raise ApiError(422, "invalid_request", "give text or tokens, not both", "tokens")
    if req.texts is not None and len(given) > 1:
        raise ApiError(422, "invalid_request", f"a batch of texts replaces {given[0]}: give one of them", "texts")
    check_limits(req, settings, runtime.dtype)
    inp = to_run_input(req)
    check_token_counts(model, req, inp, settings)
    encoded = model.encode(inp)
    tokens = encoded.tokens
    field = "texts" if req.texts is not None else "tokens" if req.tokens is not None else "text"
    _check_tokens(len(tokens), field, settings)
    s_k = len(tokens)
    if encoded.source is not None:
        s_k = len(encoded.source.tokens)
        _check_tokens(s_k, "source.tokens" if req.source and req.source.tokens is not None else "source.text", settings)
    model.last_layer(inp)  # a 422 naming `layer` when it is past the model's last
    check_first_layer(req, model, inp, form_of(accept))
    check_rollout(req, encoded)
    # refuse before computing what could not be sent: the S x S_k matrices, and the per-position vectors asked for
    layers = 1 if req.layer is not None else model.n_layers(inp)
    heads, s = model.n_heads(inp), len(tokens)
    # a lower bound: head widths are the model's own unless options or custom weights set them (then 1)
    info = model.info
    d_head = 1 if inp.options or inp.weights or not info.d_head else min(info.d_head, info.d_v)
    matrices = sum(k in req.include for k in ("scores", "weights"))
    per_layer = heads * s * s_k * matrices
    per_layer += ("contexts" in req.include) * heads * s * d_head + ("output" in req.include) * heads * s * d_head
    per_layer += ("qkv" in req.include) * 3 * heads * s * d_head
    per_layer += ("value_norms" in req.include) * heads * s * s_k + ("head_contributions" in req.include) * heads * s
    per_layer += (("rollout" in req.include) + ("attention_flow" in req.include)) * s * s_k
    items = (encoded.batch or 1) * results
    values = (layers * per_layer + ("final" in req.include) * s * final_width(model)) * items
    check_result_size(values, settings.max_result_values)
    # and what it would weigh in the form asked: eligible and the reasons grids go out with any grid include asks
    stats = ("stats" in req.include) * heads * (2 * s + heads)
    booleans = items * s * s_k * (1 + reason_grids(inp, model, encoded)) * sends_eligibility(req.include)
    one_layer = ResultCount(per_layer * items, stats * items, booleans)
    every = ResultCount(layers * per_layer * items, layers * stats * items, booleans)
    dtype = str(runtime.dtype).removeprefix("torch.")
    limit = settings.max_result_bytes
    check_result_bytes(every, None if layers == 1 else one_layer, form_of(accept), req.precision, dtype, limit)
    # and what the passes hold while they run, whatever the answer sends
    d_model = 0 if inp.options or inp.weights else info.d_model or 0
    shape = WorkShape(model.last_layer(inp) + 1, encoded.batch or 1, heads, s, s_k, d_model)
    compared = req.dtype is not None and runtime.dtype != torch.float32  # max_diff_vs_float32's float32 pass
    check_work_bytes(shape, runtime.dtype, results, compared, settings.max_work_bytes, field)
    return Prepared(model, inp, encoded)


def final_width(model: AttentionModel) -> int:
    """Columns of the model's final output: its vocabulary when it predicts tokens, else its width (a lower
    bound where options or weights set the width)."""
    info = model.info
    if model.capabilities.predicts_tokens:
        return len(info.vocab) if info.vocab else int(getattr(info, "vocab_size", None) or 1)
    return info.d_model or 1


ONE_SEQUENCE = ("texts", "source", "demo_bug")


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


def run_body(run: ModelRun, req: AttentionRequest, settings: Settings, runtime: Runtime) -> dict[str, Any]:
    """A run as /api/attention answers it, for the request's layer and include."""
    check_flow_work(req, run, settings)
    return serialize_run(
        run,
        layer=req.layer,
        include=req.include,
        scale=req.scale,
        all_masked=req.all_masked,
        device=str(runtime.device),
        dtype=str(runtime.dtype).removeprefix("torch."),
        max_values=settings.max_result_values,
        precision=req.precision,
        rollout_heads=req.rollout.heads if req.rollout is not None else "mean",
        rollout_residual=req.rollout.residual if req.rollout is not None else True,
        sinks=sink_positions(req, run),
    )
