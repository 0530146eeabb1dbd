"""/api/attention, every head's matrices for a sequence, and /api/export, the same run as one HTML file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from fastapi.responses import HTMLResponse, Response

from engine.interventions import Interventions
from engine.models import AttentionModel, ModelRun
from server.config import Settings
from server.declare import Analysis, Context, Limit
from server.deps import Runtime
from server.export import build_export
from server.forms import form_of
from server.plan import Plan, make_plan
from server.schemas import AttentionRequest, AttentionResult, ExportRequest
from server.serialize import layer_bodies, serialize_run, tail_body
from server.stream import StreamedAnswer

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
        plan = make_plan(req, ctx.settings, ctx.models, ctx.runtime, accept=ctx.accept, own_dtype=True)
        return StreamedAnswer(answer_frames(plan))
    return attention_body(req, ctx.settings, ctx.models, ctx.runtime, ctx.accept)


def attention_body(
    req: AttentionRequest,
    settings: Settings,
    models: dict[str, AttentionModel],
    runtime: Runtime,
    accept: str | None = None,
) -> dict[str, Any]:
    """What /api/attention answers (and attnlab.run returns): the run, serialised, with its tail (the audit when
    asked). `accept`: the form it goes out in (server.forms.answer), whose bytes are bounded before anything runs."""
    plan = make_plan(req, settings, models, runtime, accept=accept, own_dtype=True)
    body, end = (part for _, part in answer_frames(plan))  # every form but the stream: the head holds every layer
    body.update(end)
    return body


def answer_frames(plan: Plan) -> Iterator[tuple[str, Any]]:
    """The answer in the order it is made: the head (every field, with the layers sent first), each other layer,
    the tail (what only the whole pass knows). The streamed form sends its first layer (`layer`, else
    `first_layer`, else 0) in the head, as soon as a forward run through that layer only has made it, then goes on
    from there: one forward in two parts. Every other form sends every layer in the head, from one whole pass."""
    req = plan.req
    interventions = Interventions(bug=req.demo_bug)
    if plan.form != "stream":
        first = plan.layers
        run = plan.run(interventions)
    else:
        first = (req.layer if req.layer is not None else req.first_layer or 0,)
        whole = req.layer is not None or bool(WHOLE_PASS.intersection(plan.include))
        run = plan.run(interventions) if whole else plan.run_to(first[0], interventions)
    yield "head", serialize_run(run, plan.reading, first)
    run = plan.run_on(run, interventions)
    rest = [i for i in plan.layers if i not in first]
    if rest:
        for body in layer_bodies(run, plan.reading, rest):
            yield "layer", body
    yield "tail", tail(plan, run)


def tail(plan: Plan, run: ModelRun) -> dict[str, Any]:
    """The answer's tail (server/serialize.py: tail_body), its config with `max_diff_vs_float32`."""
    out = tail_body(run, plan.reading)
    out["config"]["max_diff_vs_float32"] = float32_difference(plan, run)
    return out


def float32_difference(plan: Plan, run: ModelRun) -> float | None:
    """The largest |weight - weight at float32| over every head of the layers returned: 0 in float32; None in the
    server's own dtype, not asked for (it is not measured: it would cost a second pass)."""
    if plan.runtime.dtype == torch.float32:
        return 0.0
    if plan.req.dtype is None:
        return None
    # the same pass in float32 (through the run cache), to show what the precision changed
    reference = plan.run(run.interventions, replace(plan.runtime, dtype=torch.float32))
    top = 0.0
    for i in plan.layers:
        got = run.layers[i].attn.weights.to(torch.float64)
        ref = reference.layers[i].attn.weights.to(device=got.device, dtype=torch.float64)
        if got.numel():
            top = max(top, float((got - ref).abs().max()))
    return top


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
    examples={
        "textbook": {
            "summary": "The chapter's worked example: one head, 5 positions, causal, the last position padded",
            "value": {"model": "textbook", "include": ["scores", "weights", "stats"]},
        },
        "causal": {
            "summary": "A random 4-head layer on six words with the causal mask",
            "value": {"model": "random", "text": "the cat sat on the mat", "masks": {"causal": True}},
        },
    },
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
            100_000_000,
            "(pair, edge) steps of max-flow one /api/attention with include attention_flow may take, counted after "
            "the forward and before any flow (pycode's every layer at 63 tokens, 81,285,120 steps, took 3.1 s on 2 "
            "CPU cores)",
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
    examples={
        "head": {
            "summary": "The worked example's head large, with the retrieval of its last query",
            "value": {"model": "textbook", "view": "head", "head": 0},
        }
    },
    tags=("attention",),
)
ANALYSES = (ATTENTION, EXPORT)
