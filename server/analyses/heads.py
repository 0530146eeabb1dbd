"""Head-type scores (previous-token, duplicate-token, induction, bracket match, distance, entropy); top heads."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import torch
from pydantic import AfterValidator, BaseModel, Field

from engine.analysis.ablation import ablation_effects, spearman
from engine.analysis.head_baseline import DEFAULT_PERMUTATIONS
from engine.analysis.heads import (
    DEFAULT_REPEATS,
    DEFAULT_SEGMENT_LENGTHS,
    Probe,
    ProbeSpec,
    head_type_scores,
    pair_mask_reasons,
    probes_for,
    top_heads_for_pair,
)
from engine.models import AttentionModel, RunInput
from server.config import Settings
from server.declare import Analysis, Context, Limit
from server.errors import ApiError
from server.plan import cached_run, make_plan, to_run_input
from server.refusals import ONE_SEQUENCE, check_limits, choose_model, refuse_fields
from server.schemas.attention import AttentionRequest, Strict, Text
from server.schemas.ints import INT64_MAX, Index

MAX_PROBE_LENGTHS = 8  # segment lengths one probe may have: one forward pass each


def _distinct(lengths: list[int]) -> list[int]:
    for i, length in enumerate(lengths):
        if length in lengths[:i]:
            raise ValueError(f"gives segment length {length} twice (at {lengths.index(length)} and {i})")
    return lengths


class ProbeRequest(Strict):
    """The head-type probes: for each segment length L, L random words of the model's vocabulary, `repeats` times."""

    segment_lengths: Annotated[
        list[Annotated[int, Field(ge=2, le=INT64_MAX)]],
        Field(min_length=1, max_length=MAX_PROBE_LENGTHS),
        AfterValidator(_distinct),
    ] = Field(
        default_factory=lambda: list(DEFAULT_SEGMENT_LENGTHS),
        description="the segment lengths, one probe each; induction and duplicate-token are the lowest over them",
    )
    repeats: int = Field(DEFAULT_REPEATS, ge=2, le=8, description="copies of each segment in its probe")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds the probes' random words")


class ProbeUsed(BaseModel):
    segment_lengths: list[int]
    repeats: int
    seed: int


class HeadTypesRequest(AttentionRequest):
    """The /api/attention body (text, tokens or x are optional here) plus the induction probe's settings."""

    model: Text | None = Field(None, description="a name from GET /api/models")
    probe: ProbeRequest | None = Field(
        None,
        description="the probes induction (and, without text, every score) is measured on; default: segment lengths "
        f"{list(DEFAULT_SEGMENT_LENGTHS)} (shorter where the model takes fewer positions), {DEFAULT_REPEATS} copies, "
        "seed `seed`",
    )
    segment_len: int | None = Field(
        None,
        ge=2,
        le=INT64_MAX,
        description="the older form of probe {segment_lengths: [segment_len]}: one probe of L tokens twice",
    )
    seed: int = Field(
        0,
        ge=0,
        le=2**32 - 1,
        description="seeds the baseline's shuffles, and the probe's words when `probe` is not given",
    )
    include: list[Literal["ablation_effect", "baseline"]] = Field(  # type: ignore[assignment]
        default_factory=list,
        description="`ablation_effect`: each head's effect when zero-ablated alone (one more forward per head), on "
        "the input the scores are measured on, with its rank correlation to each score; `baseline`: each score's "
        "shuffled baseline (`baselines`: the score on the head's own weights moved at random among each row's "
        "eligible keys, `permutations` times, seeded by `seed`) and how far the head stands above it",
    )
    permutations: int = Field(
        DEFAULT_PERMUTATIONS, ge=2, le=1000, description="with include baseline: how many shuffles the baseline takes"
    )


class Baseline(BaseModel):
    mean: float = Field(description="the score's mean over the shuffles")
    std: float = Field(description="its standard deviation over the shuffles")
    above: float = Field(description="the head's score minus the mean")
    z: float | None = Field(description="above / std; null where every shuffle scores the same (std 0)")


class HeadTypeRow(BaseModel):
    layer: int
    head: int
    previous_token: float | None
    duplicate_token: float | None
    induction: float | None = Field(description="the lowest of induction_by_length")
    induction_by_length: dict[str, float | None] | None = Field(
        None, description="the induction score on each segment length's probe (keys: the lengths); null: no probe"
    )
    duplicate_by_length: dict[str, float | None] | None = Field(
        None,
        description="scored on the probes: the duplicate-token score on each length's probe, duplicate_token their "
        "lowest; null when scored on your input",
    )
    bracket_match: float | None = Field(
        description="mean weight from each closing bracket's token to its opening bracket's token; null: no pair"
    )
    mean_distance: float | None
    entropy: float | None
    ablation_effect: float | None = Field(
        None,
        description="with include ablation_effect: the change in mean next-token loss (nats; decoders) or the mean "
        "L2 change of the final output (encoders) when this head alone is zero-ablated",
    )
    baselines: dict[str, Baseline | None] | None = Field(
        None,
        description="with include baseline: per score but entropy (which a shuffle leaves unchanged), its shuffled "
        "baseline; null where the score is null",
    )


class HeadTypesResult(BaseModel):
    model: str
    scored_on: Literal["probe", "input"]
    probe: ProbeUsed | None = Field(description="the probes the scores were measured on; null: a model without one")
    probe_tokens: list[str] | None = Field(description="the first segment length's probe, the other scores' input")
    segment_len: int = Field(description="the first segment length")
    seed: int
    n_layers: int
    n_heads: int
    heads: list[HeadTypeRow]
    ablation_metric: Literal["loss", "output"] | None = Field(
        None, description="what ablation_effect measures: loss (decoders on their own tokens) or output"
    )
    ablation_baseline: float | None = Field(None, description="the unablated loss (nats); 0 for output")
    permutations: int | None = Field(None, description="with include baseline: the shuffles each baseline took")
    ablation_rank_correlation: dict[str, float | None] | None = Field(
        None,
        description="Spearman's rank correlation between ablation_effect and each head-type score over the heads; "
        "null where a score is missing or constant",
    )


class TopHeadsRequest(AttentionRequest):
    query: Index = Field(description="query position (a row)")
    key: Index = Field(description="key position (a column)")
    k: int = Field(10, ge=1, le=1000, description="how many heads to return")


class TopHead(BaseModel):
    layer: int
    head: int
    weight: float


class TopHeadsResult(BaseModel):
    model: str
    tokens: list[str]
    query: int
    key: int
    masked: bool = Field(False, description="true: the masks exclude this cell, so every head gives it exactly 0")
    reasons: list[str] = Field(
        default_factory=list, description="the masks that exclude the cell (causal, window, padding, blocked)"
    )
    heads: list[TopHead] = Field(description="highest weight first; empty when the pair is masked")


def head_types(req: HeadTypesRequest, ctx: Context) -> HeadTypesResult:
    """Every layer's every head: previous-token, duplicate-token, induction and bracket-match scores, mean
    attention distance and entropy. Induction is measured on a seeded probe (L random tokens from the model's
    vocabulary, twice); the others on `text`/`tokens`/`x` when given, else on the probe too. Options (random's
    width and heads), custom weights and `scale` hold for every run, so the scores describe the heads the page shows."""
    settings, models, runtime = ctx.settings, ctx.models, ctx.runtime
    refuse_fields(req, ONE_SEQUENCE, "head types are scored on one sequence")
    refuse_fields(req, ("layer", "precision", "sinks"), "head types score every layer and return scores, not matrices")
    as_attention = AttentionRequest.model_validate(
        req.model_dump(exclude={"probe", "segment_len", "seed", "include", "permutations"})
        | {"layer": None, "include": []}
    )
    given = any(getattr(req, f) is not None for f in ("text", "tokens", "x", "image", "sample"))
    model = choose_model(as_attention, models)
    spec = probe_spec(req, model, settings)
    if given:
        prepared = make_plan(as_attention, settings, models, runtime)  # the same limits as /api/attention
        model, inp = prepared.model, prepared.inp
    else:
        check_limits(as_attention, settings, runtime.dtype)
        inp = to_run_input(as_attention)
    probes = probes_for(model, spec)
    probe = probes[0] if probes else None
    permutations = req.permutations if "baseline" in req.include else 0
    if permutations:
        check_baseline_work(model, inp, probes, permutations, settings)
    with torch.inference_mode():
        table = head_type_scores(
            model,
            runtime.device,
            runtime.dtype,
            probe=spec,
            inp=inp,
            runner=lambda i: cached_run(model, i, runtime),
            permutations=permutations,
            seed=req.seed,
        )
    rows = [HeadTypeRow.model_validate(row) for layer in table for row in layer]
    extra: dict[str, object] = {}
    if "ablation_effect" in req.include:
        limit = settings.limit("max_ablation_heads")
        n = len(rows)
        if n > limit:
            raise ApiError(
                422,
                "too_large",
                f"ablating {n} heads one at a time is {n} forward passes; limit {limit} (set by "
                "ATTNLAB_MAX_ABLATION_HEADS on this server)",
                "include",
            )
        scored = inp if given or probe is None else replace(inp, text=None, tokens=probe.tokens, x=None)
        with torch.inference_mode():
            base = cached_run(model, scored, runtime)
            found = ablation_effects(model, scored, base, runtime.device, runtime.dtype)
        for row in rows:
            row.ablation_effect = found.effects[row.layer][row.head]
        effect = [r.ablation_effect for r in rows]
        scores = ("previous_token", "duplicate_token", "induction", "bracket_match", "mean_distance", "entropy")
        extra = {
            "ablation_metric": found.metric,
            "ablation_baseline": found.baseline,
            "ablation_rank_correlation": {k: spearman(effect, [getattr(r, k) for r in rows]) for k in scores},
        }
    return HeadTypesResult(
        model=model.info.name,
        scored_on="input" if given or probe is None else "probe",
        probe=ProbeUsed(segment_lengths=list(spec.segment_lengths), repeats=spec.repeats, seed=spec.seed)
        if probe is not None
        else None,
        probe_tokens=probe.tokens if probe is not None else None,
        segment_len=spec.segment_lengths[0],
        seed=spec.seed,
        n_layers=len(table),
        n_heads=len(table[0]) if table else 0,
        heads=rows,
        permutations=permutations or None,
        **extra,
    )


def check_baseline_work(
    model: AttentionModel, inp: RunInput, probes: list[Probe], permutations: int, settings: Settings
) -> None:
    """permutations x layers x heads x (S^2 of the input, or of the first probe, plus S^2 of every probe) shuffled
    weights within ATTNLAB_MAX_BASELINE_VALUES, checked before any shuffle."""
    sizes = [len(p.tokens) for p in probes]
    given = inp.text is not None or inp.tokens is not None or inp.x is not None
    if given or not probes:
        sizes = [model.count_tokens(inp), *sizes]
    cells = sum(s * s for s in sizes)
    work = permutations * model.n_layers(inp) * model.n_heads(inp) * cells
    limit = settings.limit("max_baseline_values")
    if work > limit:
        raise ApiError(
            422,
            "too_large",
            f"a baseline of {permutations} shuffles x {model.n_layers(inp)} layers x {model.n_heads(inp)} heads x "
            f"{' + '.join(f'{s}^2' for s in sizes)} cells = {work:,} weights, limit {limit:,} (set by "
            "ATTNLAB_MAX_BASELINE_VALUES on this server): ask for fewer permutations, a shorter text or fewer "
            "probe lengths",
            "permutations",
        )


def default_lengths(longest: int) -> tuple[int, ...]:
    """DEFAULT_SEGMENT_LENGTHS where the model takes them; else three lengths spread up to the longest it takes."""
    if longest >= max(DEFAULT_SEGMENT_LENGTHS):
        return DEFAULT_SEGMENT_LENGTHS
    top = max(DEFAULT_SEGMENT_LENGTHS)
    spread = sorted({max(2, longest * length // top) for length in DEFAULT_SEGMENT_LENGTHS})
    return tuple(spread)


def probe_spec(req: HeadTypesRequest, model: AttentionModel, settings: Settings) -> ProbeSpec:
    """The probes asked for (`probe`, or the older `segment_len`, or the default fitted to the model), checked
    against the model's positions, ATTNLAB_MAX_TOKENS and ATTNLAB_MAX_PROBE_TOKENS before any is drawn."""
    if req.probe is not None and req.segment_len is not None:
        raise ApiError(422, "invalid_request", "give probe or segment_len (its older form), not both", "segment_len")
    extra = len(model.frame_tokens([])[0]) if model.token_pool() is not None else 0
    repeats = req.probe.repeats if req.probe is not None else DEFAULT_REPEATS
    own = model.info.max_tokens
    limit = min(settings.max_tokens, own) if own is not None else settings.max_tokens
    if req.probe is not None:
        spec = ProbeSpec(tuple(req.probe.segment_lengths), repeats, req.probe.seed)
    elif req.segment_len is not None:
        spec = ProbeSpec((req.segment_len,), repeats, req.seed)
    else:
        spec = ProbeSpec(default_lengths((limit - extra) // repeats), repeats, req.seed)
    if model.token_pool() is None:
        return spec  # a model without a probe (textbook, custom) is scored on its own input
    for i, length in enumerate(spec.segment_lengths):
        field = "segment_len" if req.segment_len is not None else f"probe.segment_lengths[{i}]"
        check_probe_length(model, length, repeats, extra, settings, field)
    total = sum(repeats * length + extra for length in spec.segment_lengths)
    most = settings.limit("max_probe_tokens")
    if total > most:
        raise ApiError(
            422,
            "too_large",
            f"probes of {' + '.join(f'{repeats} x {n}' for n in spec.segment_lengths)} tokens"
            f"{f' (+ {extra} special tokens each)' if extra else ''} = {total:,} positions in all, limit {most:,} (set "
            "by ATTNLAB_MAX_PROBE_TOKENS on this server): ask for fewer or shorter segment lengths",
            "probe.segment_lengths",
        )
    return spec


def check_probe_length(
    model: AttentionModel, length: int, repeats: int, extra: int, settings: Settings, field: str
) -> None:
    """One probe (`length` words `repeats` times, plus the special tokens the model adds) within ATTNLAB_MAX_TOKENS
    and the model's own positions. Checked before the probe is drawn, so a huge length never builds a huge list."""
    positions = repeats * length + extra
    framing = f" + {extra} special tokens" if extra else ""
    own = model.info.max_tokens
    if positions > settings.max_tokens:
        raise ApiError(
            422,
            "too_large",
            f"a probe of {repeats} x {length} tokens{framing} = {positions} positions exceeds the limit of "
            f"{settings.max_tokens} (set by ATTNLAB_MAX_TOKENS on this server): use a segment length of at most "
            f"{(settings.max_tokens - extra) // repeats}",
            field,
        )
    if own is not None and positions > own:
        raise ApiError(
            422,
            "too_large",
            f"a probe of {repeats} x {length} tokens{framing} = {positions} positions exceeds the {own} positions "
            f"{model.info.name} takes: use a segment length of at most {(own - extra) // repeats}",
            field,
        )


def top_heads(req: TopHeadsRequest, ctx: Context) -> TopHeadsResult:
    """Rank every (layer, head) by weight[query, key] on your sequence and masks: "which heads make 'it' look at
    'animal'?". Positions count the model's own tokens (for minilm, [CLS] is position 0). A pair the masks exclude
    holds 0 in every head: `masked` is true, `reasons` names the masks, and `heads` is empty."""
    refuse_fields(req, ONE_SEQUENCE, "top heads are ranked on one sequence")
    refuse_fields(
        req, ("layer", "include", "precision"), "top heads rank every layer's heads and return weights, not matrices"
    )
    as_attention = AttentionRequest.model_validate(
        req.model_dump(exclude={"query", "key", "k"}) | {"layer": None, "include": []}
    )
    run = make_plan(as_attention, ctx.settings, ctx.models, ctx.runtime).run()
    ranked = top_heads_for_pair(run, req.query, req.key, req.k)
    reasons = pair_mask_reasons(run, req.query, req.key)
    return TopHeadsResult(
        model=run.model,
        tokens=run.tokens,
        query=req.query,
        key=req.key,
        masked=bool(reasons),
        reasons=reasons,
        heads=[TopHead.model_validate(r) for r in ranked],
    )


HEADS = Analysis(
    name="heads",
    request=HeadTypesRequest,
    answer=HeadTypesResult,
    run=head_types,
    summary="Score every head of a model by type",
    examples={
        "induction": {
            "summary": "The induction model's heads, scored on a repeated sequence and on one probe of 6 words twice",
            "value": {
                "model": "induction",
                "text": "red ball king river frog red ball king",
                "probe": {"segment_lengths": [6], "repeats": 2},
            },
        }
    },
    panel="headTypes",
    limits=(
        Limit(
            "max_ablation_heads",
            1024,
            "heads one `/api/heads` with include ablation_effect may ablate, one forward pass each",
        ),
        Limit(
            "max_probe_tokens",
            2048,
            "positions the probes of one `/api/heads` may hold together (each segment length x repeats, plus the "
            "model's special tokens), one forward pass per length",
        ),
        Limit(
            "max_baseline_values",
            100_000_000,
            "shuffled weights one `/api/heads` with include baseline may score (permutations x layers x heads x "
            "S^2): 20 shuffles of every minilm head at 256 tokens pass",
        ),
    ),
)
TOP_HEADS = Analysis(
    name="heads/top",
    request=TopHeadsRequest,
    answer=TopHeadsResult,
    run=top_heads,
    summary="The heads that put the most weight from a query on a key",
    examples={
        "it": {
            "summary": "Which minilm heads make 'it' (10) look at 'animal' (2)? ([CLS] is position 0)",
            "value": {
                "model": "minilm",
                "text": "The animal didn't cross the street because it was too tired",
                "query": 10,
                "key": 2,
                "k": 5,
            },
        }
    },
    panel="top",
    client="top_heads",
)
ANALYSES = (HEADS, TOP_HEADS)
