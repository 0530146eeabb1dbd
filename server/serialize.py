"""ModelRun -> the result the page and scripts read: matrices as NumPy arrays (float32, float16 or float64), the
rest plain values; server/forms.py writes it as JSON, .npz or the arrays form."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from engine.analysis.attention_flow import attention_flow
from engine.analysis.flow import Fuse, head_contributions, rollout, value_norms
from engine.analysis.sinks import hide_keys
from engine.attention import AttentionOutput, AttentionWeights
from engine.masks import pair_counts
from engine.models import ModelRun
from engine.stats import HeadStats, head_similarity, head_stats
from engine.unequal import real_width
from server.errors import ApiError
from server.forms import ARRAYS_MEDIA_TYPE, STREAM_MEDIA_TYPE

FLOAT16_MAX = 65504.0
STAT_FIELDS = dataclasses.fields(HeadStats)


def as_numpy(t: torch.Tensor, precision: str = "float32", what: str = "") -> np.ndarray:
    """float64 stays float64; every other float goes out as float32 (bfloat16 and float16 widen), or as float16
    when the request asked for that precision (half the bytes; about 3 significant digits)."""
    if precision == "float16":
        low, high = torch.aminmax(t.detach()) if t.numel() else (torch.tensor(0.0), torch.tensor(0.0))
        top = max(-float(low), float(high))
        if top > FLOAT16_MAX:
            raise ApiError(
                422,
                "out_of_range",
                f"{what or 'a matrix'} reaches {top:.4g}, beyond float16's largest number ({FLOAT16_MAX:g}): "
                "ask for precision float32",
                "precision",
            )
        return np.ascontiguousarray(t.detach().to(device="cpu", dtype=torch.float16).numpy())
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    return np.ascontiguousarray(t.detach().to(device="cpu", dtype=dtype).numpy())  # orjson needs C order


def check_result_size(
    size: int,
    max_values: int,
    field: str = "include",
    advice: str = "ask for one layer, fewer include items, or a shorter sequence",
) -> None:
    """A 422 before any work when the answer would hold more than max_values numbers, naming the field the client
    can change (an endpoint without `include` names its own)."""
    if size > max_values:
        raise ApiError(
            422,
            "too_large",
            f"the result would hold {size:,} numbers, limit {max_values:,} "
            f"(set by ATTNLAB_MAX_RESULT_VALUES on this server): {advice}",
            field,
        )


# Bytes a value takes in each form. JSON: a float32 written out is ~12 characters with its comma, a boolean 5-6;
# the arrays form and .npz: the array's own itemsize (2 at precision float16, 4 at float32, 8 computed in float64),
# a boolean 1. Stats go out as JSON numbers in every form (the arrays form's header).
JSON_NUMBER_BYTES = 12
JSON_BOOL_BYTES = 6
FORM_NAMES = {
    "json": "JSON",
    "arrays": f"the arrays form (Accept: {ARRAYS_MEDIA_TYPE})",
    "stream": f"the streamed arrays form (Accept: {STREAM_MEDIA_TYPE})",
    "npz": ".npz",
}


@dataclass(frozen=True)
class ResultCount:
    """What an answer holds, counted before anything is computed."""

    floats: int  # matrix values (scores, weights, contexts, q/k/v, output): in the form's encoding
    numbers: int  # stats and head similarity: JSON numbers in every form
    booleans: int  # eligible and the reasons grids

    def bytes(self, form: str, precision: str, dtype: str) -> int:
        if form == "json":
            return (self.floats + self.numbers) * JSON_NUMBER_BYTES + self.booleans * JSON_BOOL_BYTES
        itemsize = 2 if precision == "float16" else 8 if dtype == "float64" else 4
        return self.floats * itemsize + self.numbers * JSON_NUMBER_BYTES + self.booleans

    def times(self, k: int) -> ResultCount:
        return ResultCount(self.floats * k, self.numbers * k, self.booleans * k)


@dataclass(frozen=True)
class AnswerShape:
    """What an answer's size depends on: known from the plan before the run (head widths then a lower bound where
    options or custom weights set them), or read from the run itself."""

    layers: int  # layers the answer shows
    items: int  # batch items times results of this shape (an intervention's before and after)
    heads: int
    s: int
    s_k: int
    d_head: int  # query/key width per head
    d_v: int  # value width per head
    d_out: int  # width of a layer's attention output
    final: int  # columns of the model's final output
    reasons: int  # reasons grids: one per mask in force
    blocked: int  # blocked cells the masks name
    top_k: int = 0  # experts each position uses, in a mixture-of-experts model
    local_layers: int = 0  # layers shown with a window of their own, each sending its own eligibility grid
    sink_layers: int = 0  # layers shown with learned sink logits, each head sending its sink weight per query (known
    # from the run: the plan's count before it leaves them out, a lower bound as for widths it cannot know)


# A HeadStats holds four per-query lists at most (entropy, masked_share, masked_weight, zero_rows), one list of the
# other heads, and its scalars; a layer's head similarity is H x H
STAT_NUMBERS_PER_QUERY = 4
AUDIT_SCALARS = 64  # the audit record's own numbers, besides its per-head, per-position and per-mask lists


@dataclass(frozen=True)
class Item:
    """One `include` item: the answer's fields it fills, where (in each head, each layer, or once per answer), the
    values it adds per layer of one item (or per answer), as floats (matrices in the form's encoding) or numbers
    (JSON numbers in every form), and whether it brings `eligible` and `reasons` with it."""

    fields: tuple[str, ...]
    place: str  # "head", "layer" or "answer"
    floats: Callable[[AnswerShape], int] = lambda n: 0
    numbers: Callable[[AnswerShape], int] = lambda n: 0
    grid: bool = False  # an S x S_k grid per head or layer: read with the cells it masks


def _audit_numbers(n: AnswerShape) -> int:
    """The audit record: its scalars, each head's projection shapes and scale, the masks it read (S padding flags,
    the blocked cells), at most 8 repeated-row pairs and a perturbation verdict per mask (engine/analysis/audit.py)."""
    return AUDIT_SCALARS + 10 * n.heads + n.s + 2 * n.blocked + 8 * 6 + 3 * 7


def _stat_numbers(n: AnswerShape) -> int:
    per_head = STAT_NUMBERS_PER_QUERY * n.s + n.heads + len(STAT_FIELDS)
    return n.heads * per_head + n.heads * n.heads


INCLUDE: dict[str, Item] = {
    "scores": Item(("scores",), "head", floats=lambda n: n.heads * n.s * n.s_k, grid=True),
    # weights: and each row's learned sink weight where layers have sink logits (counted as if every shown one had)
    "weights": Item(
        ("weights", "sink"), "head", floats=lambda n: n.heads * n.s * (n.s_k + min(1, n.sink_layers)), grid=True
    ),
    "contexts": Item(("contexts",), "head", floats=lambda n: n.heads * n.s * n.d_v),
    "output": Item(("output",), "layer", floats=lambda n: n.s * n.d_out),
    "stats": Item(("stats", "head_similarity"), "head", numbers=_stat_numbers),
    "qkv": Item(("q", "k", "v"), "head", floats=lambda n: n.heads * n.s * (2 * n.d_head + n.d_v)),
    "audit": Item(("audit",), "answer", numbers=_audit_numbers),
    "final": Item(("final",), "answer", floats=lambda n: n.s * n.final),
    "rollout": Item(("rollout",), "layer", floats=lambda n: n.s * n.s_k, grid=True),
    "attention_flow": Item(("attention_flow",), "layer", floats=lambda n: n.s * n.s_k, grid=True),
    "value_norms": Item(("value_norms",), "head", floats=lambda n: n.heads * n.s * n.s_k, grid=True),
    "head_contributions": Item(("contribution",), "head", floats=lambda n: n.heads * n.s),
    "eligibility": Item(("eligible", "reasons"), "answer", grid=True),
    # the gates as floats, the expert ids and the layer's count and top_k as JSON numbers
    "experts": Item(("experts",), "layer", floats=lambda n: n.s * n.top_k, numbers=lambda n: n.s * n.top_k + 2),
}
# the per-head tensors an answer's field is made from where its name is not the layer's own (AttentionOutput's)
HEAD_TENSORS: dict[str, Callable[[AttentionOutput, AttentionWeights], torch.Tensor | None]] = {
    "contribution": head_contributions,
    "value_norms": value_norms,
    "sink": lambda a, _: a.sink_weight,  # the weight each query gave the head's learned sink
}
KV_FIELDS = ("k", "v")  # sent per head from its K/V group


def sends_eligibility(include: Sequence[str]) -> bool:
    """Whether the answer holds `eligible` and `reasons`: with any item that sends an S x S_k grid, so a grid is
    read with the cells it masks, and with `eligibility` alone; an answer of stats, contexts or `final` only is not
    B x S x S booleans bigger than the rest of it."""
    return any(INCLUDE[item].grid for item in include)


def answer_count(include: Sequence[str], n: AnswerShape) -> tuple[ResultCount, ResultCount]:
    """What the answer holds with every layer it shows, and with one of them: read from INCLUDE, as the serializer
    writes it."""
    per_layer = ResultCount(0, 0, 0)
    once = ResultCount(0, 0, 0)
    for name in include:
        item = INCLUDE[name]
        count = ResultCount(item.floats(n) * n.items, item.numbers(n) * n.items, 0)
        if item.place == "answer":
            once = _add(once, count)
        else:
            per_layer = _add(per_layer, count)
    grid = n.items * n.s * n.s_k if sends_eligibility(include) else 0
    once = _add(once, ResultCount(0, 0, grid * (1 + n.reasons)))
    every_local, one_local = ResultCount(0, 0, grid * n.local_layers), ResultCount(0, 0, grid * min(1, n.local_layers))
    return _add(_add(per_layer.times(n.layers), once), every_local), _add(_add(per_layer, once), one_local)


def _add(a: ResultCount, b: ResultCount) -> ResultCount:
    return ResultCount(a.floats + b.floats, a.numbers + b.numbers, a.booleans + b.booleans)


def run_shape(run: ModelRun, layers: Sequence[int], include: Sequence[str]) -> AnswerShape:
    """The answer's shape as the run computed it (its first shown layer's widths)."""
    a = run.layers[layers[0]].attn
    b, h, s, s_k = a.scores.shape
    final = run.result.final.shape[-1] if "final" in include else 0
    reasons = len(run.reason_grids()) if sends_eligibility(include) else 0
    d_head, d_v, d_out = a.q.shape[-1], a.v.shape[-1], a.output.shape[-1]
    local = sum(run.layers[i].window is not None for i in layers)
    blocked = len(run.masks.blocked)
    sinks = sum(run.layers[i].attn.sink_weight is not None for i in layers)
    shape = AnswerShape(len(layers), b, h, s, s_k, d_head, d_v, d_out, final, reasons, blocked)
    return replace(shape, local_layers=local, sink_layers=sinks)


def check_result_bytes(
    every: ResultCount, one_layer: ResultCount | None, form: str, precision: str, dtype: str, limit: int
) -> None:
    """A 422 naming `include` (the field the page reads as "too large") when the answer in the form asked would pass
    `limit` bytes; the message names the forms that would fit. `one_layer`: the same request for one layer, or None
    when it already asks for one."""
    size = every.bytes(form, precision, dtype)
    if size <= limit:
        return
    options = [
        (every, "arrays", "float16", f"ask for Accept: {ARRAYS_MEDIA_TYPE} with precision float16"),
        (one_layer, form, precision, "ask for one layer with `layer`"),
        (one_layer, "arrays", "float16", f"ask for one layer in Accept: {ARRAYS_MEDIA_TYPE} with precision float16"),
    ]
    fits: list[str] = []
    tried = {(id(every), form, precision)}
    for count, f, p, how in options:
        if count is None or (id(count), f, p) in tried:
            continue
        tried.add((id(count), f, p))
        n = count.bytes(f, p, dtype)
        if n <= limit:
            fits.append(f"{how} ({n:,} bytes)")
    advice = "; or ".join(fits[:2]) if fits else "ask for one layer, fewer include items or a shorter sequence"
    raise ApiError(
        422,
        "too_large",
        f"the answer would be {size:,} bytes as {FORM_NAMES[form]}, limit {limit:,} "
        f"(set by ATTNLAB_MAX_RESULT_BYTES on this server): {advice}",
        "include",
    )


def result_size(run: ModelRun, layers: Sequence[int], include: Sequence[str]) -> int:
    """Numbers the result holds (matrices, stats and `eligible`), counted from INCLUDE on the run's shape."""
    n = run_shape(run, layers, include)
    every, _ = answer_count(include, replace(n, reasons=0))
    return every.floats + every.numbers + every.booleans


BUG_NOTES = {
    "softmax_over_queries": "WRONG ON PURPOSE: the softmax ran over queries (down each column), so columns sum to 1 "
    "and rows do not; a query's weights no longer form a distribution over keys",
    "flipped_mask": "WRONG ON PURPOSE: the mask was read as True = blocked, so every eligible key was removed and "
    "every masked key attended to",
    "norm_over_sequence": "WRONG ON PURPOSE: every layer's attention input was standardised over the sequence axis "
    "(each feature's mean and spread over all positions) instead of over its features, so each position reads the "
    "ones after it through those statistics; the causal map still looks perfectly triangular, and only a "
    "perturbation (/api/perturb) shows the leak",
}


def serialize_run(
    run: ModelRun,
    *,
    layer: int | None,
    include: Sequence[str],
    scale: bool,
    all_masked: str,
    device: str,
    dtype: str,
    max_values: int,
    precision: str = "float32",
    rollout_heads: Fuse = "mean",
    rollout_residual: bool = True,
    sinks: tuple[list[int], bool] | None = None,
) -> dict[str, Any]:
    """`sinks`: (hidden key positions, renormalise) for the weights view; None shows the weights as computed
    (sink_mass is then the weight on position 0, the first token)."""
    layers = [layer] if layer is not None else list(range(len(run.layers)))
    size = result_size(run, layers, include)
    check_result_size(size, max_values)
    eligible = run.eligible.cpu()
    out_layers = list(layer_bodies(run, layers, include, eligible, precision, rollout_heads, rollout_residual, sinks))
    a0 = run.layers[layers[0]].attn
    s = len(run.tokens)
    batched = run.batch_tokens is not None
    axis = 0 if batched else 1  # a batch keeps the leading axis in shapes
    bug = run.interventions.bug
    single = not batched and run.source_tokens is None
    grids = sends_eligibility(include)
    final = None
    if "final" in include:
        final = as_numpy(run.result.final, precision, "the model's final output")
        final = final if batched else final[0]
    return {
        "model": run.model,
        "tokens": run.tokens,
        "config": config_body(run, scale=scale, device=device, dtype=dtype, precision=precision),
        "masks": run.masks.to_dict(),
        "all_masked": all_masked,
        "eligible": eligible.numpy() if grids else None,
        "layers": out_layers,
        "shapes": {
            "x": list(run.layers[layers[0]].resid_in.shape[axis:]),
            "q": list(a0.q.shape[axis:]),
            "k": list(a0.k.shape[axis:]),
            "v": list(a0.v.shape[axis:]),
            "scores": list(a0.scores.shape[axis:]),
            "weights": list(a0.weights.shape[axis:]),
            "contexts": list(a0.contexts.shape[axis:]),
            "concat": list(a0.concat.shape[axis:]),
            "output": list(a0.output.shape[axis:]),
        },
        "timings_ms": dict(run.timings_ms),
        "pairs": pair_counts(run.masks, s) if single else None,
        "reasons": {k: g.numpy() for k, g in run.reason_grids().items()} if grids else None,
        "batch_tokens": [list(t) for t in run.batch_tokens] if run.batch_tokens is not None else None,
        "batch_padding": [list(p) for p in run.batch_padding] if run.batch_padding is not None else None,
        "source_tokens": run.source_tokens,
        "demo_bug": bug_body(bug),
        "sinks": {"hidden": sinks[0], "renormalised": sinks[1]} if sinks is not None else None,
        "final": final,
    }


def config_body(run: ModelRun, *, scale: bool, device: str, dtype: str, precision: str) -> dict[str, Any]:
    """The answer's `config`: the run's RunConfig and how it was computed and sent."""
    config = dataclasses.asdict(run.config)
    config.update(scale=scale, device=device, dtype=dtype, seq_len=len(run.tokens), precision=precision)
    return config


def layer_bodies(
    run: ModelRun,
    layers: Sequence[int],
    include: Sequence[str],
    eligible: torch.Tensor,
    precision: str,
    rollout_heads: Fuse = "mean",
    rollout_residual: bool = True,
    sinks: tuple[list[int], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """The answer's `layers`, one layer's heads at a time in the order of `layers` (the streamed form sends each
    as it is made). Rollout and attention flow run through every layer up to the last one shown, once."""
    whole: dict[str, Sequence[torch.Tensor] | dict[int, torch.Tensor]] = {}  # per layer: S x S views of the stack
    maps = [run.layers[i].attn.weights for i in range(max(layers) + 1)]
    if "rollout" in include:
        whole["rollout"] = rollout(maps, rollout_heads, rollout_residual)
    if "attention_flow" in include:
        whole["attention_flow"] = attention_flow(maps, rollout_heads, rollout_residual, list(layers))
    for i in layers:
        yield _layer(run, i, include, eligible, precision, {k: v[i] for k, v in whole.items()}, sinks)


def _layer(
    run: ModelRun,
    i: int,
    include: Sequence[str],
    eligible: torch.Tensor,
    precision: str,
    whole: dict[str, torch.Tensor] | None = None,
    sinks: tuple[list[int], bool] | None = None,
) -> dict[str, Any]:
    """One layer's heads. For a batch every array keeps its leading batch axis and stats come per item.
    `whole`: the layer's views of the stack up to it (rollout, attention_flow: B x S x S) that include asks for;
    `sinks`: see serialize_run."""
    a = run.layers[i].attn
    window = run.layers[i].window
    own = eligible if window is None else a.eligible.cpu()  # a local layer's: the masks narrowed by its window
    batched = run.batch_tokens is not None
    n_items, n_heads, n_groups = a.scores.shape[0], a.scores.shape[1], a.k.shape[1]
    per_group = n_heads // n_groups

    converted: dict[str, np.ndarray] = {}
    hidden = sinks[0] if sinks is not None else [0]

    def pick(name: str, index: int) -> np.ndarray:
        """Head (or K/V group) `index` of the layer's tensor `name`: the whole tensor is converted once, then
        each head is a view of it (C-contiguous, as orjson needs)."""
        if name not in converted:
            t = HEAD_TENSORS[name](a, run.layers[i].weights) if name in HEAD_TENSORS else getattr(a, name)
            assert t is not None, name  # a layer without the tensor sends null before it is picked
            if name == "weights" and sinks is not None:
                t = hide_keys(t, sinks[0], sinks[1])
            converted[name] = as_numpy(t, precision, f"layer {i}'s {name}")
        per_head = converted[name][:, index]
        width = real_width(run.layers[i].weights, name, index)  # heads of unequal widths: the head's own columns
        if width is not None:
            per_head = np.ascontiguousarray(per_head[..., :width])
        return np.ascontiguousarray(per_head) if batched else per_head[0]

    def item_eligible(b: int) -> torch.Tensor:
        return own[b] if own.dim() == 3 else own

    stats = None
    sims: list[torch.Tensor] = []
    if "stats" in include:
        w = run.layers[i].weights
        sims = [head_similarity(a.weights[b].cpu()) for b in range(n_items)]
        stats = [
            head_stats(
                a.scores[b].cpu(),
                a.weights[b].cpu(),
                item_eligible(b),
                w,
                sims[b],
                run.breaks,
                hidden,
                None if a.sink_weight is None else a.sink_weight[b].cpu(),
            )
            for b in range(n_items)
        ]
    # the per-head matrices include asks for, in INCLUDE's order (stats come per head below)
    head_fields = [f for name in INCLUDE if name in include and name != "stats" for f in _head_fields(name)]
    heads = []
    for h in range(n_heads):
        g = h // per_group
        head: dict[str, Any] = {"index": h, "kv_group": g}
        for f in head_fields:
            if f == "sink" and a.sink_weight is None:
                continue  # a layer without sinks: the field stays null
            head[f] = pick(f, g if f in KV_FIELDS else h)
        if stats is not None:
            # field by field: dataclasses.asdict deep-copies every list (1.5 s of 7 at 512 tokens)
            per_item = [{f.name: getattr(st[h], f.name) for f in STAT_FIELDS} for st in stats]
            head["stats"] = per_item if batched else per_item[0]
        heads.append(head)
    layer: dict[str, Any] = {"index": i, "heads": heads, "window": window, "eligible": None}
    if window is not None and sends_eligibility(include):
        layer["eligible"] = own.numpy()
    if "output" in include:
        out = as_numpy(a.output, precision, f"layer {i}'s output")
        layer["output"] = out if batched else out[0]
    for name, m in (whole or {}).items():
        r = as_numpy(m, precision, f"layer {i}'s {name}")
        layer[name] = r if batched else r[0]
    routing = run.layers[i].routing
    if "experts" in include and routing is not None:
        gates = as_numpy(routing.weights, precision, f"layer {i}'s expert gates")
        ids = routing.experts.cpu().tolist()
        layer["experts"] = {
            "count": routing.n_experts,
            "top_k": routing.experts.shape[-1],
            "ids": ids if batched else ids[0],
            "gates": gates if batched else gates[0],
        }
    if "stats" in include:
        similarity = [sim.float().numpy() for sim in sims]
        layer["head_similarity"] = np.stack(similarity) if batched else similarity[0]
    return layer


def _head_fields(name: str) -> tuple[str, ...]:
    item = INCLUDE[name]
    return item.fields if item.place == "head" else ()


# ---- analyses ------------------------------------------------------------------------------------------------------


def layer_delta_list(deltas: list[list[float]]) -> list[dict[str, Any]]:
    return [{"index": i, "delta": d} for i, d in enumerate(deltas)]


def bug_body(bug: str | None) -> dict[str, Any] | None:
    return {"name": bug, "wrong": True, "note": BUG_NOTES[bug]} if bug is not None else None
