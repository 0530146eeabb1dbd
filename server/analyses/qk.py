"""/api/qk-attribution: one score decomposed over the residual stream's components (engine/analysis/qk.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from pydantic import Field

from engine.analysis.qk import QKAttribution, Term, qk_attribution
from server.declare import Analysis, Context, answer_of
from server.plan import cached_run, make_plan
from server.refusals import ONE_SEQUENCE, refuse_fields
from server.schemas.attention import AttentionRequest
from server.schemas.ints import Index

REPEAT = "red ball king river frog red ball king"


class QKRequest(AttentionRequest):
    layer: Index = Field(description="the layer whose score is decomposed")
    head: Index = Field(description="the query head")
    query: Index = Field(description="query position (a row)")
    key: Index = Field(description="key position (a column)")


TermOut = answer_of(Term, "QKTerm")
QKResult = answer_of(
    QKAttribution,
    "QKAttributionResult",
    terms=(list[TermOut], Field(description="every (query source, key source) term, largest |value| first")),  # type: ignore[valid-type]
    score=Field(description="the layer's own scaled q.k at (query, key), before masking"),
    total=Field(description="the sum of every term: the score, up to rounding"),
    sources=Field(description="the residual stream's components entering the layer, in order"),
    model=(str, ...),
    tokens=(list[str], ...),
)


def qk_route(req: QKRequest, ctx: Context) -> dict[str, Any]:
    """Decomposes the score of `head` in `layer` at (`query`, `key`) over what wrote the residual stream on each
    side: the embedding, every earlier head's output, every attention bias and MLP, the norm's bias and the
    query and key biases, with the norm's scale frozen at its value for this input. The terms sum to the score.
    Pre-norm models only: a post-norm one (minilm) is a 422 that says why."""
    refuse_fields(req, ("include", "precision", *ONE_SEQUENCE), "QK attribution decomposes one score of one sequence")
    prepared = make_plan(req.model_copy(update={"include": []}), ctx.settings, ctx.models, ctx.runtime)
    runtime = ctx.runtime
    with torch.inference_mode():
        run = cached_run(prepared.model, prepared.inp, runtime, encoded=prepared.encoded)
        net = prepared.model.network(prepared.inp, runtime.device, runtime.dtype)
        result = qk_attribution(run, net, req.layer, req.head, req.query, req.key)
    return {**dataclasses.asdict(result), "model": prepared.model.info.name, "tokens": run.tokens}


QK = Analysis(
    name="qk-attribution",
    request=QKRequest,
    answer=QKResult,
    run=qk_route,
    summary="Why a query matches a key: its score as a sum over the residual stream's components on each side",
    examples={
        "induction": {
            "summary": "Induction head L1H2 at 'king' (7) looking at 'river' (3): L0H1 wrote 'king' there",
            "value": {"model": "induction", "text": REPEAT, "layer": 1, "head": 2, "query": 7, "key": 3},
        }
    },
)
ANALYSES = (QK,)
