"""Head-type scores: what kind of head is this?

For one head's weights W (S, S), rows = queries, columns = keys, and tokens t_0 .. t_S-1:

    previous-token   mean over queries q >= 1 of W[q, q-1]
    duplicate-token  mean over queries q whose token occurred before of sum_{k < q, t_k = t_q} W[q, k]
    induction        on L random tokens followed by the same L tokens again (Olsson et al. 2022,
                     "In-context learning and induction heads"): mean over the later copies' queries
                     q of W[q, q-L+1], the key just after the previous occurrence of t_q
    mean distance    mean over queries of sum_k W[q, k] |q - k|
    entropy          mean over queries of -sum_k W[q, k] ln W[q, k], in nats
    bracket match    mean over matched bracket pairs of W[close, open], from the token holding each closing
                     bracket to the token holding its opening one (engine/analysis/brackets.py)

A pure previous-token head scores 1.0 on the first; a head that attends only to itself scores 0 on
the first three. Queries with no eligible key are left out of every mean, and a score with no query
to average over is None (not 0).

Where the numbers come from: each model with free token input (induction, minilm, random) is run on
probes: for each segment length L, L words drawn without replacement from its own vocabulary (`token_pool`),
then the same L words again (`repeats` copies in all), framed as the model needs ([CLS] ... [SEP] for minilm),
with the model's default masks (causal for induction) unless the caller gives masks. A head's induction and
duplicate-token scores are the LOWEST over the lengths (each length's is kept too): a head that attends a fixed
distance d back scores as an induction head on the one length L = d + 1 only (and as a duplicate-token head
on L = d), while an induction head finds the token after the earlier occurrence at every length. The other
scores come from the first length's probe. All come from the probes unless the caller gives text or tokens:
then previous-token, duplicate-token, bracket match, distance and entropy are measured on that input (with
the caller's masks), and induction still on the probes (with the model's default masks), since it needs a
repeat of known length.
The textbook example has 5 fixed positions and no vocabulary: it is scored on its own input, and its
induction score is None (there is no repeated segment to measure it on).

With `permutations`, each score but entropy also gets a shuffled baseline (engine/analysis/head_baseline.py): the
same score on the same weights with each row's weight moved at random among its eligible keys (a local layer's: the
keys its window leaves), and how far the head stands above it.
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

# The default probe: three segment lengths, so that no fixed offset (and no blend of two) scores high on every
# one; 31 is the longest a 64-position model framed with two special tokens takes twice.
DEFAULT_SEGMENT_LENGTHS = (17, 24, 31)
DEFAULT_REPEATS = 2  # copies of each segment in its probe

Baselines = dict[str, dict[str, float | None] | None]  # a score's name -> head_baseline.compare()'s dict, or None
ByLength = dict[str, float | None]  # a segment length (as a JSON key) -> the score on that length's probe
HeadScores = dict[str, float | int | Baselines | ByLength | None]  # layer, head, each score, the by-length scores


@dataclass(frozen=True)
class ProbeSpec:
    """What the head-type probes are: one probe per segment length, each `repeats` copies of L random words."""

    segment_lengths: tuple[int, ...] = DEFAULT_SEGMENT_LENGTHS
    repeats: int = DEFAULT_REPEATS
    seed: int = 0  # seeds each probe's words (with its length)


@dataclass(frozen=True)
class Probe:
    tokens: list[str]  # the whole sequence the model runs on
    start: int  # position of the first copy's first word
    segment_len: int  # L; copy c starts at start + c L
    repeats: int = DEFAULT_REPEATS  # copies of the segment


def probe_sequence(
    model: AttentionModel, segment_len: int = DEFAULT_SEGMENT_LENGTHS[1], seed: int = 0, repeats: int = DEFAULT_REPEATS
) -> Probe | None:
    """L random words from the model's own vocabulary, `repeats` times; None for a model without free token input."""
    pool = model.token_pool()
    if pool is None:
        return None
    if segment_len < 2:
        raise InputError("segment_len", f"got segment length {segment_len}: need at least 2")
    if repeats < 2:
        raise InputError("repeats", f"got {repeats} copies: a repeat needs at least 2")
    rng = random.Random(seed)
    words = rng.sample(pool, segment_len) if segment_len <= len(pool) else rng.choices(pool, k=segment_len)
    tokens, start = model.frame_tokens(words * repeats)
    limit = model.info.max_tokens
    if limit is not None and len(tokens) > limit:
        longest = (limit - (len(tokens) - repeats * segment_len)) // repeats
        raise InputError(
            "segment_len",
            f"got segment length {segment_len}: the probe needs {len(tokens)} positions and "
            f"{model.info.name} takes at most {limit}; use a segment length of at most {longest}",
        )
    return Probe(tokens, start, segment_len, repeats)


def probes_for(model: AttentionModel, spec: ProbeSpec) -> list[Probe]:
    """One probe per segment length, in the order given; [] for a model without free token input."""
    found = [probe_sequence(model, length, spec.seed, spec.repeats) for length in spec.segment_lengths]
    return [p for p in found if p is not None]


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


def induction_score(
    weights: Tensor, start: int, segment_len: int, eligible: Tensor | None = None, repeats: int = 2
) -> Tensor | None:
    """weights (H, S, S) -> (H,): mean over the later copies' queries q of W[q, q - L + 1]."""
    q = torch.arange(start + segment_len, start + repeats * segment_len, device=weights.device)
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
    probe: ProbeSpec = ProbeSpec(),
    inp: RunInput | None = None,
    runner: Callable[[RunInput], ModelRun] | None = None,
    permutations: int = 0,
    seed: int = 0,
) -> list[list[HeadScores]]:
    """Every layer's every head: previous_token, duplicate_token, induction, bracket_match, mean_distance, entropy.

    `inp` is the caller's input: its options (random's width and heads, say), scale and all-masked
    policy hold for every run. With text, tokens or x in it, previous-token, duplicate-token,
    bracket match, distance and entropy are scored on that input with its masks, and induction on the probes with
    the model's default masks (the caller's masks were made for another length). Without, all six
    are scored on the probes, with inp.masks (None: the model's defaults). Induction (and duplicate-token, when
    scored on the probes) is the lowest over the probe's segment lengths, with each length's score in
    `induction_by_length` (`duplicate_by_length`); the other scores come from the first length's probe. A model
    with no probe (textbook) is scored on its input alone. Returns layers x heads of plain dicts; a score that
    cannot be measured is None. `runner` runs an input (default: model.run on device in dtype); a caller that
    keeps recent runs passes its own, so scoring the input it has just shown costs no second forward.
    `permutations` > 0: each row also holds `baselines`, per score but entropy its shuffled baseline (seeded by
    `seed`; None where the score is None); a lowest-over-lengths score's baseline is that length's.
    """
    run_on: Callable[[RunInput], ModelRun] = runner or (lambda i: model.run(i, device, dtype))
    inp = inp or RunInput()
    given = inp.text is not None or inp.tokens is not None or inp.x is not None
    probes = probes_for(model, probe)
    masks = None if given else inp.masks
    probe_runs = [run_on(replace(inp, text=None, tokens=p.tokens, x=None, masks=masks)) for p in probes]
    run = probe_runs[0] if probe_runs and not given else run_on(inp)
    special = run.config.special
    pairs = bracket_pairs(run.tokens, list(special) if special is not None else None)
    on_input: dict[str, Score] = {
        "previous_token": lambda w: previous_token_score(w, run.eligible),
        "mean_distance": lambda w: mean_distance(w, run.eligible),
        "entropy": lambda w: mean_entropy(w, run.eligible),
        "bracket_match": lambda w: bracket_match_score(w, pairs, run.eligible),
    }
    if given or not probes:
        on_input["duplicate_token"] = lambda w: duplicate_token_score(w, run.tokens, run.eligible)
    by_length = [probe_scorers(p, r, with_duplicate=not given) for p, r in zip(probes, probe_runs, strict=True)]
    shuffles = draw_shuffles(run.eligible, permutations, seed) if permutations else None
    probe_shuffles = [
        (shuffles if r is run else draw_shuffles(r.eligible, permutations, seed)) if permutations else None
        for r in probe_runs
    ]
    local: dict[tuple[int, int], Shuffles] = {}  # (run, window) -> shuffles within a local layer's window

    def own(i: int, r: ModelRun, shared: Shuffles | None, layer: int) -> Shuffles | None:
        """The shuffles of run r's `layer`: the run's, or a local layer's own, among the keys its window leaves."""
        window = r.layers[layer].window
        if shared is None or window is None:
            return shared
        if (i, window) not in local:
            e = r.layers[layer].attn.eligible
            local[(i, window)] = draw_shuffles(e if e.dim() == 2 else e[0], permutations, seed)
        return local[(i, window)]

    table = []
    for layer, trace in enumerate(run.layers):
        w = trace.attn.weights[0].detach().double()  # (H, S, S)
        sides = [(on_input, w, own(-1, run, shuffles, layer))]
        sides += [
            (scorers, r.layers[layer].attn.weights[0].detach().double(), own(i, r, found, layer))
            for i, (scorers, r, found) in enumerate(zip(by_length, probe_runs, probe_shuffles, strict=True))
        ]
        scores: dict[str, Tensor | None] = {"induction": None}
        scores |= {name: f(w) for name, f in on_input.items()}
        lengths = [{name: f(weights) for name, f in scorers.items()} for scorers, weights, _ in sides[1:]]
        rows = [head_row(layer, h, scores, probes, lengths) for h in range(w.shape[0])]
        if permutations:
            add_baselines(rows, sides)
        table.append(rows)
    return table


def probe_scorers(probe: Probe, run: ModelRun, *, with_duplicate: bool) -> dict[str, Score]:
    """The scores one length's probe gives: induction, and duplicate-token when the head is scored on the probes."""
    found = run.eligible
    scorers: dict[str, Score] = {
        "induction": lambda w: induction_score(w, probe.start, probe.segment_len, found, probe.repeats)
    }
    if with_duplicate:
        scorers["duplicate_token"] = lambda w: duplicate_token_score(w, run.tokens, found)
    return scorers


BY_LENGTH = {"induction": "induction_by_length", "duplicate_token": "duplicate_by_length"}


def lowest(values: list[float | None]) -> tuple[float | None, int | None]:
    """The lowest measured value and its index; (None, None) where none is measured."""
    measured = [(v, i) for i, v in enumerate(values) if v is not None]
    if not measured:
        return None, None
    v, i = min(measured)
    return v, i


def add_baselines(rows: list[HeadScores], sides: list[tuple[dict[str, Score], Tensor, Shuffles | None]]) -> None:
    """Each row's `baselines`: per shuffled score (SHUFFLED), compare()'s dict, or None where it is not measured.
    A score that is the lowest over the probe's lengths is compared with the baseline of the length it came from."""
    found: dict[str, tuple[Tensor, Tensor] | None] = dict.fromkeys(SHUFFLED)
    scorers, weights, shuffles = sides[0]
    if shuffles is not None:
        found |= baselines({name: f for name, f in scorers.items() if name in found}, weights, shuffles)
    per_length = [
        baselines(scorers, weights, shuffles) if shuffles is not None else {}
        for scorers, weights, shuffles in sides[1:]
    ]
    for h, row in enumerate(rows):
        measured: Baselines = {}
        for name, got in found.items():
            score = row[name]
            value = float(score) if isinstance(score, int | float) else None
            by = row.get(BY_LENGTH.get(name, ""))
            if isinstance(by, dict) and per_length:
                _, at = lowest([v if isinstance(v, float) else None for v in by.values()])
                got = None if at is None else per_length[at].get(name)
            measured[name] = None if got is None else compare(value, float(got[0][h]), float(got[1][h]))
        row["baselines"] = measured


def head_row(
    layer: int,
    head: int,
    scores: dict[str, Tensor | None],
    probes: list[Probe] | None = None,
    lengths: list[dict[str, Tensor | None]] | None = None,
) -> HeadScores:
    """One head's scores; with probes, each by-length score's lowest and every length's own value."""
    row: HeadScores = {"layer": layer, "head": head}
    for name, values in scores.items():
        row[name] = None if values is None else float(values[head])
    for name, key in BY_LENGTH.items():
        if not probes or not lengths or name not in lengths[0]:
            row[key] = None
            continue
        each: ByLength = {}
        for p, got in zip(probes, lengths, strict=True):
            values = got[name]
            each[str(p.segment_len)] = None if values is None else float(values[head])
        row[key] = each
        row[name] = lowest(list(each.values()))[0]
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
