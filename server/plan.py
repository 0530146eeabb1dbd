"""One request, one plan: an AttentionRequest becomes a frozen `Plan` (model, input, encoded tokens, layers,
include, precision and the byte budget) in `make_plan`, which reads the request's fields in one order and refuses
the first that cannot be honoured with a 4xx naming it:

    model -> input -> encoding -> layers -> include -> precision/dtype -> budgets

What the steps need of the engine is asked once, where the step before has made it safe to ask: the request's
names (its model and dtype) together, then the input's token counts, then the encoding, which comes with the shape
of its run (the model's layers, heads and widths for this input: an InputShape). The encoding and its shape are kept
on the plan, so the checks, the budgets and the run read the plan and never the model or the request's fields
again. Every analysis endpoint takes the same request body, so they all go through `make_plan`.

The steps' refusals, each a 4xx naming its field, are server/refusals.py; this module holds what an accepted
request becomes: the request's input for the engine (`to_run_input`), the plan, its runs through the run cache
(`cached_run`) and how its answer reads them (`reading_of`, `run_body`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.analysis.flow import Fuse
from engine.analysis.perturb_kernel import Case
from engine.device import resolve_dtype
from engine.interventions import NO_INTERVENTIONS, ClassicBug, Interventions
from engine.masks import MaskSpec
from engine.models import AttentionModel, ModelRun, RunInput
from engine.models.base import Encoded, InputShape, SourceInput
from server.budgets import Budget, WorkShape, answer_shape, check_budgets
from server.config import Settings
from server.deps import Runtime
from server.forms import form_of
from server.images import request_pixels
from server.refusals import (
    check_dtype,
    check_experts,
    check_input,
    check_layers,
    check_rollout,
    check_token_counts,
    check_tokens,
    choose_model,
    input_field,
    refuse_given,
    request_runtime,
    sink_positions,
)
from server.runcache import cacheable, run_key
from server.schemas import AttentionRequest
from server.serialize import Reading, Sinks, dtype_name, serialize_run


@dataclass(frozen=True)
class Plan:
    """A request checked against every limit, with its input tokenised and embedded once: all a run and its answer
    read. `layers` are the layers the answer shows, `last` the last one the forward computes."""

    req: AttentionRequest
    model: AttentionModel
    inp: RunInput
    encoded: Encoded
    shape: InputShape  # what its run will be: the model's layers, heads and widths for this input
    runtime: Runtime  # the device, and the dtype this request computes in
    form: str  # the form the answer goes out in (server/forms.py)
    last: int
    layers: tuple[int, ...]
    include: tuple[str, ...]
    reading: Reading  # how its answer reads the run: precision, rollout, sinks, the bounds (server/serialize.py)

    def run(self, interventions: Interventions = NO_INTERVENTIONS, runtime: Runtime | None = None) -> ModelRun:
        """The forward pass (on the request's compute thread: server/scheduling.py), or the same pass kept in the
        run cache. A pass through every layer also serves a request for one of them. `runtime`: another dtype's
        (the float32 pass a precision is compared with)."""
        return cached_run(self.model, self.inp, runtime or self.runtime, interventions, self.encoded)

    def run_to(self, layer: int, interventions: Interventions = NO_INTERVENTIONS) -> ModelRun:
        """The pass through layers 0..layer only (or a whole pass the run cache holds): what `run_on` goes on from."""
        if layer >= self.last:  # the part is the whole pass
            return self.run(interventions)
        first = replace(self.inp, last_layer=layer)
        return cached_run(self.model, first, self.runtime, interventions, self.encoded, keep=False)

    def run_on(self, part: ModelRun, interventions: Interventions = NO_INTERVENTIONS) -> ModelRun:
        """The request's whole pass, going on from `part` (this input's first layers, from `run_to`): one forward
        in two parts, kept in the run cache as the whole pass."""
        if len(part.layers) > self.last:
            return part
        return cached_run(self.model, self.inp, self.runtime, interventions, self.encoded, after=part)

    def case(self, bug: ClassicBug | None = None) -> Case:
        """The plan's input as the engine's analyses read it (engine/analysis/perturb_kernel.py), with `bug`."""
        return Case(self.model, self.inp, self.encoded, self.runtime.device, self.runtime.dtype, bug)

    def every_layer(self) -> RunInput:
        """The input with no last layer: analyses run the whole model, whatever layer the result shows."""
        return replace(self.inp, last_layer=None)

    def body(self, run: ModelRun) -> dict[str, Any]:
        """The run as /api/attention answers it, for the plan's layers and include, up to its tail."""
        return serialize_run(run, self.reading)


def make_plan(
    req: AttentionRequest,
    settings: Settings,
    models: dict[str, AttentionModel],
    runtime: Runtime,
    *,
    results: int = 1,
    accept: str | None = None,
    own_dtype: bool = False,
) -> Plan:
    """Read the request in order and check every field before any computation starts.

    `results`: how many results of the request's shape the answer holds (an intervention sends before and after).
    `accept`: the request's Accept header, the form whose bytes ATTNLAB_MAX_RESULT_BYTES bounds (JSON when absent).
    `own_dtype`: the endpoint computes in the request's `dtype` (/api/attention, /api/export); every other one
    computes in the server's and refuses another.
    """
    form = form_of(accept)
    # model and dtype: the request's names, resolved by the engine together
    model = choose_model(req, models)
    asked = resolve_dtype(req.dtype) if req.dtype is not None else None
    # the dtype the input's numbers must fit: refused, where it cannot be honoured, at the precision step below
    dtype = asked if own_dtype and asked is not None else runtime.dtype
    # input
    check_input(req, model, settings, dtype)
    # encoding, with the shape of its run: all that the steps below read of the model for this input
    inp = replace(to_run_input(req), pixels=request_pixels(req, model, settings))
    check_token_counts(model, req, inp, settings)
    encoded = model.encode(inp)
    shape = encoded.shape
    assert shape is not None, "encode gives the shape of the input's run"
    field = input_field(req)
    check_tokens(len(encoded.tokens), field, settings)
    if encoded.source is not None:
        where = "source.tokens" if req.source and req.source.tokens is not None else "source.text"
        check_tokens(len(encoded.source.tokens), where, settings)
    # layers
    check_layers(req, shape.n_layers, model.info.name, form)
    last = shape.n_layers - 1 if inp.last_layer is None else inp.last_layer  # the last layer the forward computes
    layers = (req.layer,) if req.layer is not None else tuple(range(shape.n_layers))
    # include
    refuse_given(req)
    check_rollout(req, encoded)
    check_experts(req, shape, model.info.name)
    s_k = len(encoded.source.tokens) if encoded.source is not None else len(encoded.tokens)
    several = encoded.batch_tokens is not None or encoded.source is not None
    sinks = sink_positions(req, s_k, encoded.special, several, model.info.name)
    # precision/dtype
    runtime = request_runtime(req, asked, runtime) if own_dtype else check_dtype(asked, runtime)
    # budgets: what the answer holds and what its passes keep, from the shapes the encoding and the layers gave
    answer = answer_shape(req, shape, encoded, results)
    work = WorkShape(last + 1, encoded.batch or 1, answer.heads, answer.s, answer.s_k, shape.d_model or 0)
    budget = Budget.of(settings)
    check_budgets(req, answer, work, runtime, form, results, budget, settings.max_work_bytes, field)
    case = Case(model, inp, encoded, runtime.device, runtime.dtype, req.demo_bug)
    reading = reading_of(req, layers, runtime, budget, sinks, case)
    return Plan(
        req=req,
        model=model,
        inp=inp,
        encoded=encoded,
        shape=shape,
        runtime=runtime,
        form=form,
        last=last,
        layers=layers,
        include=tuple(req.include),
        reading=reading,
    )


# ---- encoding --------------------------------------------------------------------------------------------------------


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


# ---- running and answering -------------------------------------------------------------------------------------------


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


def run_body(run: ModelRun, req: AttentionRequest, settings: Settings, runtime: Runtime) -> dict[str, Any]:
    """A run of `req` as /api/attention answers it, where no plan was made for it (a patched run's answer)."""
    layers = (req.layer,) if req.layer is not None else tuple(range(len(run.layers)))
    s_k, several = run.eligible.shape[-1], run.batch_tokens is not None or run.source_tokens is not None
    sinks = sink_positions(req, s_k, run.config.special, several, run.model)
    return serialize_run(run, reading_of(req, layers, runtime, Budget.of(settings), sinks))


def reading_of(
    req: AttentionRequest,
    layers: tuple[int, ...],
    runtime: Runtime,
    budget: Budget,
    sinks: Sinks | None,
    case: Case | None = None,
) -> Reading:
    """How the answer reads a run of `req`: its layers, include items, precision, rollout, sinks and limits; with the
    audit's case where the plan made one (/api/attention's)."""
    rollout: tuple[Fuse, bool] = (req.rollout.heads, req.rollout.residual) if req.rollout else ("mean", True)
    return Reading(
        layers=layers,
        include=tuple(req.include),
        scale=req.scale,
        all_masked=req.all_masked,
        device=str(runtime.device),
        dtype=dtype_name(runtime.dtype),
        max_values=budget.values,
        max_flow_work=budget.flow_work,
        precision=req.precision,
        rollout=rollout,
        sinks=sinks,
        case=case,
        max_audit_runs=budget.audit_runs if case is not None else 0,
    )
