"""Head-type scores: what kind of head is this?

For one head's weights W (S, S), rows = queries, columns = keys, and tokens t_0 .. t_S-1:

    previous-token   mean over queries q >= 1 of W[q, q-1]
    duplicate-token  mean over queries q whose token occurred before of sum_{k < q, t_k = t_q} W[q, k]
    induction        on L random tokens followed by the same L tokens again (Olsson et al. 2022,
                     "In-context learning and induction heads"): mean over the second copy's queries
                     q of W[q, q-L+1], the key just after the previous occurrence of t_q
    mean distance    mean over queries of sum_k W[q, k] |q - k|
    entropy          mean over queries of -sum_k W[q, k] ln W[q, k], in nats
    bracket match    mean over matched bracket pairs of W[close, open], from the token holding each closing
                     bracket to the token holding its opening one (engine/analysis/brackets.py)

A pure previous-token head scores 1.0 on the first; a head that attends only to itself scores 0 on
the first three. Queries with no eligible key are left out of every mean, and a score with no query
to average over is None (not 0).

Where the numbers come from: each model with free token input (induction, minilm, random) is run on
a probe: L words drawn without replacement from its own vocabulary (`token_pool`), then the same L
words again, framed as the model needs ([CLS] ... [SEP] for minilm), with the model's default masks
(causal for induction) unless the caller gives masks. All six scores come from the probe unless
the caller gives text or tokens: then previous-token, duplicate-token, bracket match, distance and
entropy are measured on that input (with the caller's masks), and induction still on the probe (with the
model's default masks), since it needs a repeat of known length.
The textbook example has 5 fixed positions and no vocabulary: it is scored on its own input, and its
induction score is None (there is no repeated segment to measure it on).

With `permutations`, each score but entropy also gets a shuffled baseline (engine/analysis/head_baseline.py): the
same score on the same weights with each row's weight moved at random among its eligible keys, and how far the
head stands above it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from engine.analysis.brackets import bracket_match_score, bracket_pairs
from engine.analysis.head_baseline import SHUFFLED, Score, Shuffles, baselines, compare, draw_shuffles
from engine.errors import InputError
from engine.models.base import AttentionModel, ModelRun, RunInput
from engine.stats import row_distance, row_entropy

DEFAULT_SEGMENT_LEN = 24  # L: the probe is 2L tokens (plus any special tokens the model adds)

Baselines = dict[str, dict[str, float | None] | None]  # a score's name -> head_baseline.compare()'s dict, or None
HeadScores = dict[str, float | int | Baselines | None]  # layer, head, each score, and with a baseline `baselines`


@dataclass(frozen=True)
class Probe:
    tokens: list[str]  # the whole sequence the model runs on
    start: int  # position of the first copy's first word
    segment_len: int  # L; the second copy starts at start + L


def probe_sequence(model: AttentionModel, segment_len: int = DEFAULT_SEGMENT_LEN, seed: int = 0) -> Probe | None:
    """L random words from the model's own vocabulary, twice; None for a model without free token input."""
    pool = model.token_pool()
    if pool is None:
        return None
    if segment_len < 2:
        raise InputError("segment_len", f"got segment length {segment_len}: need at least 2")
    rng = random.Random(seed)
    words = rng.sample(pool, segment_len) if segment_len <= len(pool) else rng.choices(pool, k=segment_len)
    tokens, start = model.frame_tokens(words + words)
    limit = model.info.max_tokens
    if limit is not None and len(tokens) > limit:
        longest = (limit - (len(tokens) - 2 * segment_len)) // 2
        raise InputError(
            "segment_len",
            f"got segment length {segment_len}: the probe needs {len(tokens)} positions and "
            f"{model.info.name} takes at most {limit}; use a segment length of at most {longest}",
        )
    return Probe(tokens, start, segment_len)


def live_rows(weights: Tensor, eligible: Tensor | None) -> Tensor:
    """(S,) True for the queries that have at least one eligible key."""
    s = weights.shape[-1]
    if eligible is None:
        return torch.ones(s, dtype=torch.bool, device=weights.device)
    return eligible.any(dim=-1)


def previous_token_score(weights: Tensor, eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over live queries q >= 1 of W[q, q-1]."""
    q = torch.arange(1, weights.shape[-1], device=weights.device)
    q = q[live_rows(weights, eligible)[q]]
    if q.numel() == 0:
        return None
    return weights[:, q, q - 1].mean(dim=-1)


def duplicate_token_score(weights: Tensor, tokens: list[str], eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): weight on earlier copies of the query's token, mean over queries that have one."""
    s = weights.shape[-1]
    assert len(tokens) == s, (len(tokens), s)
    index: dict[str, int] = {}
    ids = torch.tensor([index.setdefault(t, len(index)) for t in tokens], device=weights.device)
    earlier = torch.ones(s, s, dtype=torch.bool, device=weights.device).tril(-1)  # k < q
    same = (ids[:, None] == ids[None, :]) & earlier  # (S, S)
    rows = same.any(dim=-1) & live_rows(weights, eligible)
    if not bool(rows.any()):
        return None
    mass = (weights * same).sum(dim=-1)  # (H, S)
    return mass[:, rows].mean(dim=-1)


def induction_score(weights: Tensor, start: int, segment_len: int, eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over second-copy queries q of W[q, q - L + 1]."""
    q = torch.arange(start + segment_len, start + 2 * segment_len, device=weights.device)
    assert int(q[-1]) < weights.shape[-1], (start, segment_len, weights.shape)
    q = q[live_rows(weights, eligible)[q]]
    if q.numel() == 0:
        return None
    return weights[:, q, q - segment_len + 1].mean(dim=-1)


def mean_distance(weights: Tensor, eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over live queries of sum_k W[q, k] |q - k|."""
    rows = live_rows(weights, eligible)
    if not bool(rows.any()):
        return None
    return row_distance(weights)[:, rows].mean(dim=-1)


def mean_entropy(weights: Tensor, eligible: Tensor | None = None) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over live queries of the row's entropy in nats."""
    rows = live_rows(weights, eligible)
    if not bool(rows.any()):
        return None
    return row_entropy(weights)[:, rows].mean(dim=-1)  # (H,)


def head_type_scores(
    model: AttentionModel,
    device: torch.device,
    dtype: torch.dtype,
    *,
    segment_len: int = DEFAULT_SEGMENT_LEN,
    seed: int = 0,
    inp: RunInput | None = None,
    runner: Callable[[RunInput], ModelRun] | None = None,
    permutations: int = 0,
) -> list[list[HeadScores]]:
    """Every layer's every head: previous_token, duplicate_token, induction, bracket_match, mean_distance, entropy.

    `inp` is the caller's input: its options (random's width and heads, say), scale and all-masked
    policy hold for every run. With text, tokens or x in it, previous-token, duplicate-token,
    bracket match, distance and entropy are scored on that input with its masks, and induction on the probe with
    the model's default masks (the caller's masks were made for another length). Without, all six
    are scored on the probe, with inp.masks (None: the model's defaults). A model with no probe
    (textbook) is scored on its input alone. Returns layers x heads of plain dicts; a score that
    cannot be measured is None. `runner` runs an input (default: model.run on device in dtype); a caller that
    keeps recent runs passes its own, so scoring the input it has just shown costs no second forward.
    `permutations` > 0: each row also holds `baselines`, per score but entropy its shuffled baseline (seeded by
    `seed`; None where the score is None).
    """
    run_on: Callable[[RunInput], ModelRun] = runner or (lambda i: model.run(i, device, dtype))
    inp = inp or RunInput()
    given = inp.text is not None or inp.tokens is not None or inp.x is not None
    probe = probe_sequence(model, segment_len, seed)
    probe_run = None
    if probe is not None:
        probe_inp = replace(inp, text=None, tokens=probe.tokens, x=None, masks=None if given else inp.masks)
        probe_run = run_on(probe_inp)
    run = probe_run if probe_run is not None and not given else run_on(inp)
    special = run.config.special
    pairs = bracket_pairs(run.tokens, list(special) if special is not None else None)
    on_input: dict[str, Score] = {
        "previous_token": lambda w: previous_token_score(w, run.eligible),
        "duplicate_token": lambda w: duplicate_token_score(w, run.tokens, run.eligible),
        "mean_distance": lambda w: mean_distance(w, run.eligible),
        "entropy": lambda w: mean_entropy(w, run.eligible),
        "bracket_match": lambda w: bracket_match_score(w, pairs, run.eligible),
    }
    on_probe: dict[str, Score] = {}
    if probe is not None and probe_run is not None:
        found = probe_run.eligible
        on_probe["induction"] = lambda w: induction_score(w, probe.start, probe.segment_len, found)
    shuffles = draw_shuffles(run.eligible, permutations, seed) if permutations else None
    probe_shuffles = shuffles if probe_run is run else None
    if permutations and probe_run is not None and probe_run is not run:
        probe_shuffles = draw_shuffles(probe_run.eligible, permutations, seed)
    table = []
    for layer, trace in enumerate(run.layers):
        w = trace.attn.weights[0].detach().double()  # (H, S, S)
        pw = probe_run.layers[layer].attn.weights[0].detach().double() if on_probe and probe_run else w
        sides = [(on_input, w, shuffles), (on_probe, pw, probe_shuffles)]
        scores: dict[str, Tensor | None] = {"induction": None}
        for scorers, weights, _ in sides:
            scores |= {name: f(weights) for name, f in scorers.items()}
        rows = [head_row(layer, h, scores) for h in range(w.shape[0])]
        if permutations:
            add_baselines(rows, sides)
        table.append(rows)
    return table


def add_baselines(rows: list[HeadScores], sides: list[tuple[dict[str, Score], Tensor, Shuffles | None]]) -> None:
    """Each row's `baselines`: per shuffled score (SHUFFLED), compare()'s dict, or None where it is not measured."""
    found: dict[str, tuple[Tensor, Tensor] | None] = dict.fromkeys(SHUFFLED)
    for scorers, weights, shuffles in sides:
        shuffled_scores = {name: f for name, f in scorers.items() if name in found}
        if shuffles is not None and shuffled_scores:
            found |= baselines(shuffled_scores, weights, shuffles)
    for h, row in enumerate(rows):
        measured: Baselines = {}
        for name, got in found.items():
            score = row[name]
            value = float(score) if isinstance(score, int | float) else None
            measured[name] = None if got is None else compare(value, float(got[0][h]), float(got[1][h]))
        row["baselines"] = measured


def head_row(layer: int, head: int, scores: dict[str, Tensor | None]) -> HeadScores:
    row: HeadScores = {"layer": layer, "head": head}
    for name, values in scores.items():
        row[name] = None if values is None else float(values[head])
    return row


def pair_mask_reasons(run: ModelRun, query: int, key: int) -> list[str]:
    """The masks that exclude the (query, key) cell, in REASONS order; [] when the cell is eligible."""
    return [name for name, grid in run.reason_grids().items() if bool(grid[query, key])]


def top_heads_for_pair(run: ModelRun, query: int, key: int, k: int = 10) -> list[HeadScores]:
    """The (layer, head) pairs that put the most weight from `query` onto `key`, highest first.

    For "does 'it' attend to 'animal'?": query = position of "it", key = position of "animal".
    A masked cell holds exactly 0 in every head, so there is nothing to rank: [] (pair_mask_reasons says why).
    """
    s = len(run.tokens)
    for name, pos in (("query", query), ("key", key)):
        if not 0 <= pos < s:
            raise InputError(name, f"got position {pos}: the sequence has {s} positions, 0..{s - 1}")
    if k < 1:
        raise InputError("k", f"got k = {k}: ask for at least 1 head")
    if pair_mask_reasons(run, query, key):
        return []
    ranked = sorted(
        (
            (float(w), trace.index, h)
            for trace in run.layers
            for h, w in enumerate(trace.attn.weights[0, :, query, key].detach().double().tolist())
        ),
        key=lambda row: -row[0],
    )
    return [{"layer": layer, "head": h, "weight": w} for w, layer, h in ranked[:k]]
