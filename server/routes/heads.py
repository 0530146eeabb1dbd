"""Head-type scores (previous-token, duplicate-token, induction, distance, entropy) and top heads for a pair."""

from __future__ import annotations

import torch
from fastapi import APIRouter

from engine.analysis.heads import head_type_scores, probe_sequence, top_heads_for_pair
from server.compute import check_limits, choose_model, execute, prepare, to_run_input
from server.deps import ModelsDep, RuntimeDep, SettingsDep
from server.errors import ApiError
from server.schemas import (
    AttentionRequest,
    HeadTypeRow,
    HeadTypesRequest,
    HeadTypesResult,
    TopHead,
    TopHeadsRequest,
    TopHeadsResult,
)

router = APIRouter(prefix="/api/heads", tags=["analysis"])


@router.post("", response_model=HeadTypesResult, summary="Score every head of a model by type")
def head_types(req: HeadTypesRequest, settings: SettingsDep, models: ModelsDep, runtime: RuntimeDep) -> HeadTypesResult:
    """Every layer's every head: previous-token, duplicate-token and induction scores, mean attention distance
    and entropy. Induction is measured on a seeded probe (L random tokens from the model's vocabulary, twice);
    the others on `text`/`tokens`/`x` when given, else on the probe too. Options (random's width and heads),
    custom weights and `scale` hold for every run, so the scores describe the heads the page shows."""
    as_attention = AttentionRequest.model_validate(req.model_dump(exclude={"segment_len", "seed"}) | {"layer": None})
    given = req.text is not None or req.tokens is not None or req.x is not None
    probe_len = 2 * req.segment_len + 2  # the probe twice, plus any [CLS]/[SEP] the model adds
    if probe_len > settings.max_tokens:
        raise ApiError(
            422,
            "too_large",
            f"a probe of 2 x {req.segment_len} tokens exceeds the limit of {settings.max_tokens} "
            "(ATTNLAB_MAX_TOKENS): choose a smaller segment_len",
            "segment_len",
        )
    if given:
        model, inp = prepare(as_attention, settings, models, runtime)  # the same limits as /api/attention
    else:
        model = choose_model(as_attention, models)
        check_limits(as_attention, settings, runtime.dtype)
        inp = to_run_input(as_attention)
    probe = probe_sequence(model, req.segment_len, req.seed)
    with runtime.slot(), torch.inference_mode():
        table = head_type_scores(
            model, runtime.device, runtime.dtype, segment_len=req.segment_len, seed=req.seed, inp=inp
        )
    rows = [HeadTypeRow.model_validate(row) for layer in table for row in layer]
    return HeadTypesResult(
        model=model.info.name,
        scored_on="input" if given or probe is None else "probe",
        probe_tokens=probe.tokens if probe is not None else None,
        segment_len=req.segment_len,
        seed=req.seed,
        n_layers=len(table),
        n_heads=len(table[0]) if table else 0,
        heads=rows,
    )


@router.post("/top", response_model=TopHeadsResult, summary="The heads that put the most weight from a query on a key")
def top_heads(req: TopHeadsRequest, settings: SettingsDep, models: ModelsDep, runtime: RuntimeDep) -> TopHeadsResult:
    """Rank every (layer, head) by weight[query, key] on your sequence and masks: "which heads make 'it' look at
    'animal'?". Positions count the model's own tokens (for minilm, [CLS] is position 0)."""
    as_attention = AttentionRequest.model_validate(req.model_dump(exclude={"query", "key", "k"}) | {"layer": None})
    model, inp = prepare(as_attention, settings, models, runtime)
    run = execute(model, inp, runtime)
    ranked = top_heads_for_pair(run, req.query, req.key, req.k)
    return TopHeadsResult(
        model=run.model,
        tokens=run.tokens,
        query=req.query,
        key=req.key,
        heads=[TopHead.model_validate(r) for r in ranked],
    )
