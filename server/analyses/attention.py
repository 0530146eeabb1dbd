"""/api/attention, every head's matrices for a sequence, and /api/export, the same run as one HTML file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
from fastapi.responses import HTMLResponse, Response

from engine.analysis.audit import audit
from engine.interventions import Interventions
from engine.models import AttentionModel, ModelRun
from server.budgets import check_flow_work
from server.config import Settings
from server.declare import Analysis, Context, Limit
from server.deps import Runtime
from server.export import build_export
from server.forms import form_of
from server.plan import Plan, make_plan
from server.precision import dtype_name
from server.schemas import AttentionRequest, AttentionResult, ExportRequest
from server.serialize import config_body, layer_bodies
from server.stream import StreamedAnswer
from wire.arrays import STREAM_MEDIA_TYPE

# include items that read the whole pass before any layer can be written: it runs whole, then streams
WHOLE_PASS = frozenset({"final", "rollout", "attention_flow"})


def compute_attention(req: AttentionRequest, ctx: Context) -> dict[str, Any] | Response:
    """JSON by default; `Accept: application/x-npz` for a NumPy archive, `Accept: application/vnd.attnlab.arrays`
    for the arrays form the page reads (a JSON header, then the raw arrays); `precision: "float16"` halves either.
    `Accept: application/vnd.attnlab.arrays-stream` sends the arrays form a layer at a time: `first_layer` (else
    layer 0) as soon as the forward has reached it, then the rest of the same forward and the other layers, then
    what only the whole pass knows (wire/arrays.py: the frames).

    `texts` runs a batch (matrices gain a leading batch axis), `source` cross-attention (S x S_k matrices),
    `demo_bug` one of the chapter's classic bugs on purpose (marked wrong in `demo_bug`), and `include: ["audit"]`
    adds the audit record (measured peak memory and throughput, the engine against torch's SDPA, and the
    perturbation verdicts of the masks in force)."""
    if form_of(ctx.accept) == "stream":
        return StreamedAnswer(attention_frames(req, ctx.settings, ctx.models, ctx.runtime))
    return attention_body(req, ctx.settings, ctx.models, ctx.runtime, ctx.accept)


def attention_body(
    req: AttentionRequest,
    settings: Settings,
    models: dict[str, AttentionModel],
    runtime: Runtime,
    accept: str | None = None,
) -> dict[str, Any]:
    """What /api/attention answers (and attnlab.run returns): the run, serialised, with the audit when asked.
    `accept`: the form it goes out in (server.forms.answer), whose bytes are bounded before anything runs."""
    plan = make_plan(req, settings, models, runtime, accept=accept, own_dtype=True)
    interventions = Interventions(bug=req.demo_bug)
    run = plan.run(interventions)
    body = plan.body(run)
    body.update(whole_pass_fields(plan, run, interventions, settings))
    body["config"].update(body.pop("config_extra"))
    return body


def whole_pass_fields(plan: Plan, run: ModelRun, interventions: Interventions, settings: Settings) -> dict[str, Any]:
    """What the answer adds once the whole pass is done: `config_extra` (into config: max_diff_vs_float32) and the
    audit when asked."""
    runtime = plan.runtime
    if runtime.dtype == torch.float32:
        diff: float | None = 0.0
    elif plan.req.dtype is None:  # the server's own dtype, not asked for: not measured (it would cost a second pass)
        diff = None
    else:  # the same pass in float32 (through the run cache), to show what the precision changed
        reference = plan.run(interventions, replace(runtime, dtype=torch.float32))
        diff = max_weight_difference(run, reference, plan.layers)
    out: dict[str, Any] = {"config_extra": {"max_diff_vs_float32": diff}}
    if "audit" in plan.include:
        bound = settings.limit("max_audit_runs")
        with torch.inference_mode():
            record = audit(plan.case(interventions.bug), run, bound)
        record["perturbation_note"] = unchecked_note(record, bound)
        out["audit"] = record
    return out


def max_weight_difference(run: ModelRun, reference: ModelRun, layers: Sequence[int]) -> float:
    """The largest |weight - weight at float32| over every head of the layers returned."""
    top = 0.0
    for i in layers:
        got = run.layers[i].attn.weights.to(torch.float64)
        ref = reference.layers[i].attn.weights.to(device=got.device, dtype=torch.float64)
        if got.numel():
            top = max(top, float((got - ref).abs().max()))
    return top


def unchecked_note(record: dict[str, Any], bound: int) -> str | None:
    """The sentence that says which texts of a batch have perturbation verdicts and how to check the others."""
    unchecked = record["perturbation_unchecked"]
    if not unchecked:
        return None
    b = record["batch"]
    checked = b - len(unchecked)
    which = "no text" if checked == 0 else (f"texts 0-{checked - 1}" if checked > 1 else "text 0")
    rest = f"texts {unchecked[0]}-{unchecked[-1]}" if len(unchecked) > 1 else f"text {unchecked[0]}"
    return (
        f"verdicts for {which} of {b}; {rest} not checked: their perturbations would pass ATTNLAB_MAX_AUDIT_RUNS "
        f"({bound} forward passes, two a tested position of a text). Check one with /api/perturb on the same body "
        "and its `item` (`position`: its last real one for causal, its first padding one for padding, its middle "
        "for window)."
    )


def attention_frames(
    req: AttentionRequest, settings: Settings, models: dict[str, AttentionModel], runtime: Runtime
) -> Iterator[tuple[str, Any]]:
    """The streamed form's frames: the head (the answer with the first layer), each other layer, the tail. One
    forward, in two parts where it can be: through the first layer, its frame written, then on from there."""
    plan = make_plan(req, settings, models, runtime, accept=STREAM_MEDIA_TYPE, own_dtype=True)
    first = req.layer if req.layer is not None else req.first_layer or 0
    interventions = Interventions(bug=req.demo_bug)
    whole = req.layer is not None or bool(WHOLE_PASS.intersection(plan.include))
    run = plan.run(interventions) if whole else plan.run_to(first, interventions)
    check_flow_work(run, plan.layers, plan.include, plan.rollout, plan.budget.flow_work)
    shown = replace(plan, req=req.model_copy(update={"layer": first}), layers=(first,))
    yield "head", shown.body(run)
    run = plan.run_on(run, interventions)
    rest = [i for i in plan.layers if i != first]
    if rest:
        eligible = run.eligible.cpu()
        for body in layer_bodies(run, rest, plan.include, eligible, plan.precision, *plan.rollout, plan.sinks):
            yield "layer", body
    extra = whole_pass_fields(plan, run, interventions, settings)
    device, dtype = str(plan.runtime.device), dtype_name(plan.runtime.dtype)
    config = config_body(run, scale=req.scale, device=device, dtype=dtype, precision=plan.precision)
    yield "tail", {"config": {**config, **extra.pop("config_extra")}, "timings_ms": dict(run.timings_ms), **extra}


def export_html(req: ExportRequest, ctx: Context) -> Response:
    """The /api/attention body, computed under the same limits, as one HTML file to save and open anywhere: the
    page's own heatmaps, overview and retrieval inlined, every head's weights embedded at float32 up to 65,536 weights
    in all (a small run's numbers stay exact), at float16 above (deflated, base64: about 2.2 bytes per weight at 512
    tokens), no request to any host. It opens on `view` (the heads of a
    layer, all layers, or one head with the retrieval of `query`) and switches views, layers, heads and queries
    without a server. `layer` embeds that layer only; without it every layer is embedded."""
    page, name = build_export(req, lambda attention: attention_body(attention, ctx.settings, ctx.models, ctx.runtime))
    return HTMLResponse(page, headers={"Content-Disposition": f'attachment; filename="{name}"'})


ATTENTION = Analysis(
    name="attention",
    request=AttentionRequest,
    answer=AttentionResult,
    run=compute_attention,
    summary="Every head's scores and weights for a sequence, with masks",
    forms=("json", "arrays", "npz", "stream"),
    tags=("attention",),
    limits=(
        Limit(
            "max_audit_runs",
            16,
            "forward passes the perturbation verdicts of one batch audit (`include: audit` with `texts`) may run, "
            "counted before any runs: two a tested position of a text (the changed batch and the text alone); texts "
            "are checked in order while they fit, the rest listed in `perturbation_unchecked`",
        ),
        Limit(
            "max_flow_work",
            50_000_000,
            "(pair, edge) steps of max-flow one /api/attention with include attention_flow may take, counted after "
            "the forward and before any flow (38,937,600 steps took 3.6 s on 2 CPU cores)",
        ),
    ),
)
EXPORT = Analysis(
    name="export",
    request=ExportRequest,
    answer=None,
    run=export_html,
    summary="One self-contained HTML file of a view, interactive with no server",
    forms=("html",),
    tags=("attention",),
)
ANALYSES = (ATTENTION, EXPORT)
