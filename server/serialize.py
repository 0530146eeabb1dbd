"""ModelRun -> the result the page and scripts read: matrices as NumPy arrays (float32, float16 or float64), the
rest plain values; server/forms.py writes it as JSON, .npz or the arrays form.

One table, INCLUDE, says for each `include` item what it costs (read by the size estimate before the run) and
which function makes its part (read by the serializer after it); an answer is made as a head, its layers and a
tail (what only the whole pass knows), the parts the streamed form sends one by one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from engine.analysis.attention_flow import attention_flow, flow_work, fused_maps
from engine.analysis.audit import audit
from engine.analysis.flow import Fuse, head_contributions, rollout, value_norms
from engine.analysis.perturb_kernel import Case
from engine.analysis.sinks import hide_keys
from engine.attention import AttentionOutput, AttentionWeights
from engine.models import ModelRun
from engine.stats import HeadStats, head_similarity, head_stats
from server.errors import ApiError
from server.forms import ARRAYS_MEDIA_TYPE, STREAM_MEDIA_TYPE

FLOAT16_MAX = 65504.0
STAT_FIELDS = dataclasses.fields(HeadStats)


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as the answer names it: "float32", "bfloat16"."""
    return str(dtype).removeprefix("torch.")


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


Sinks = tuple[list[int], bool]  # (hidden key positions, renormalise)


@dataclass(frozen=True)
class Reading:
    """How one request reads its run: everything its answer is made with, settled before the run (server/plan.py
    makes it from the checked request). Each include item's maker reads it, and nothing reads the request again."""

    layers: tuple[int, ...]  # the layers the answer shows
    include: tuple[str, ...]
    scale: bool
    all_masked: str
    device: str
    dtype: str
    max_values: int  # ATTNLAB_MAX_RESULT_VALUES
    max_flow_work: int  # ATTNLAB_MAX_FLOW_WORK: attention flow's bound, checked before any max-flow runs
    precision: str = "float32"
    rollout: tuple[Fuse, bool] = ("mean", True)  # how rollout and attention flow fuse the heads; the residual
    sinks: Sinks | None = None  # the keys the weights view hides; None shows the weights as computed
    case: Case | None = None  # the input as the audit runs it again (/api/attention's plan alone gives one)
    max_audit_runs: int = 0  # ATTNLAB_MAX_AUDIT_RUNS: the forward passes the audit's verdicts may run


@dataclass(frozen=True)
class Item:
    """One `include` item, in one row: the answer's fields it fills, where (in each head, each layer, once per
    answer, or once the whole pass is done: the streamed form's tail), the values it adds per layer of one item (or
    per answer), as floats (matrices in the form's encoding) or numbers (JSON numbers in every form), whether it
    brings `eligible` and `reasons` with it, and the function that makes its part. A head's matrices are picked
    from the layer's tensors (HEAD_TENSORS where the field is not the tensor's own name); `layer` makes a layer's
    fields (a list under "heads" is spread over the heads, one each); `stack` makes views of the stack of layers,
    once for the layers written (B x S x S_k each, by layer); `answer` makes the one field of an answer or tail."""

    fields: tuple[str, ...]
    place: str  # "head", "layer", "answer" or "tail"
    floats: Callable[[AnswerShape], int] = lambda n: 0
    numbers: Callable[[AnswerShape], int] = lambda n: 0
    grid: bool = False  # an S x S_k grid per head or layer: read with the cells it masks
    layer: Callable[[ModelRun, Reading, int], dict[str, Any]] | None = None
    stack: Callable[[ModelRun, Reading, Sequence[int]], Any] | None = None
    answer: Callable[[ModelRun, Reading], Any] | None = None


def _audit_numbers(n: AnswerShape) -> int:
    """The audit record: its scalars, each head's projection shapes and scale, the masks it read (S padding flags,
    the blocked cells), at most 8 repeated-row pairs and a perturbation verdict per mask (engine/analysis/audit.py)."""
    return AUDIT_SCALARS + 10 * n.heads + n.s + 2 * n.blocked + 8 * 6 + 3 * 7


def _stat_numbers(n: AnswerShape) -> int:
    per_head = STAT_NUMBERS_PER_QUERY * n.s + n.heads + len(STAT_FIELDS)
    return n.heads * per_head + n.heads * n.heads


# ---- the makers: each include item's part of the answer --------------------------------------------------------------


def _items(run: ModelRun, m: np.ndarray) -> np.ndarray:
    """A batch keeps its leading axis; one sequence sends its only item."""
    return m if run.batch_tokens is not None else m[0]


def make_output(run: ModelRun, r: Reading, i: int) -> dict[str, Any]:
    return {"output": _items(run, as_numpy(run.layers[i].attn.output, r.precision, f"layer {i}'s output"))}


def make_stats(run: ModelRun, r: Reading, i: int) -> dict[str, Any]:
    """Each head's stats (per item for a batch) and the layer's head similarity (engine/stats.py)."""
    a, w = run.layers[i].attn, run.layers[i].weights
    own = run.eligible.cpu() if run.layers[i].window is None else a.eligible.cpu()  # a local layer's: its window's
    hidden = r.sinks[0] if r.sinks is not None else [0]
    items = range(a.scores.shape[0])
    sims = [head_similarity(a.weights[b].cpu()) for b in items]
    stats = [
        head_stats(
            a.scores[b].cpu(),
            a.weights[b].cpu(),
            own[b] if own.dim() == 3 else own,
            w,
            sims[b],
            run.breaks,
            hidden,
            None if a.sink_weight is None else a.sink_weight[b].cpu(),
        )
        for b in items
    ]
    batched = run.batch_tokens is not None
    heads = []
    for h in range(a.scores.shape[1]):
        # field by field: dataclasses.asdict deep-copies every list (1.5 s of 7 at 512 tokens)
        per_item = [{f.name: getattr(st[h], f.name) for f in STAT_FIELDS} for st in stats]
        heads.append({"stats": per_item if batched else per_item[0]})
    similarity = [sim.float().numpy() for sim in sims]
    return {"heads": heads, "head_similarity": np.stack(similarity) if batched else similarity[0]}


def make_experts(run: ModelRun, r: Reading, i: int) -> dict[str, Any]:
    """A mixture of experts' routing in the layer: each position's experts and their gates."""
    routing = run.layers[i].routing
    if routing is None:
        return {}
    ids = routing.experts.cpu().tolist()
    gates = as_numpy(routing.weights, r.precision, f"layer {i}'s expert gates")
    return {
        "experts": {
            "count": routing.n_experts,
            "top_k": routing.experts.shape[-1],
            "ids": ids if run.batch_tokens is not None else ids[0],
            "gates": _items(run, gates),
        }
    }


def _stack(run: ModelRun, layers: Sequence[int]) -> list[torch.Tensor]:
    """Every layer's weights up to the last one written: what rollout and attention flow read through."""
    return [run.layers[i].attn.weights for i in range(max(layers) + 1)]


def make_rollout(run: ModelRun, r: Reading, layers: Sequence[int]) -> Sequence[torch.Tensor]:
    return rollout(_stack(run, layers), *r.rollout)


def make_attention_flow(run: ModelRun, r: Reading, layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """Attention flow of `layers`, after its declared bound is checked over every layer the answer shows: the
    pairs times the edges they run over, within ATTNLAB_MAX_FLOW_WORK, before any max-flow runs."""
    maps = fused_maps(_stack(run, r.layers), *r.rollout)
    work = flow_work(maps, list(r.layers))
    if work > r.max_flow_work:
        raise ApiError(
            422,
            "too_large",
            f"attention flow here is {work:,} (pair, edge) steps of max-flow; limit {r.max_flow_work:,} (set by "
            "ATTNLAB_MAX_FLOW_WORK on this server): ask for one `layer`, fewer tokens, or use rollout",
            "include",
        )
    return attention_flow(_stack(run, layers), *r.rollout, list(layers))


def make_final(run: ModelRun, r: Reading) -> np.ndarray:
    return _items(run, as_numpy(run.result.final, r.precision, "the model's final output"))


def make_audit(run: ModelRun, r: Reading) -> dict[str, Any]:
    """The chapter's audit of the run (engine/analysis/audit.py), with the sentence on texts left unchecked."""
    assert r.case is not None, "only /api/attention's plan gives the case an audit runs again"
    with torch.inference_mode():
        record = audit(r.case, run, r.max_audit_runs)
    record["perturbation_note"] = unchecked_note(record, r.max_audit_runs)
    return record


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


INCLUDE: dict[str, Item] = {
    "scores": Item(("scores",), "head", floats=lambda n: n.heads * n.s * n.s_k, grid=True),
    # weights: and each row's learned sink weight where layers have sink logits (counted as if every shown one had)
    "weights": Item(
        ("weights", "sink"), "head", floats=lambda n: n.heads * n.s * (n.s_k + min(1, n.sink_layers)), grid=True
    ),
    "contexts": Item(("contexts",), "head", floats=lambda n: n.heads * n.s * n.d_v),
    "output": Item(("output",), "layer", floats=lambda n: n.s * n.d_out, layer=make_output),
    "stats": Item(("stats", "head_similarity"), "layer", numbers=_stat_numbers, layer=make_stats),
    "qkv": Item(("q", "k", "v"), "head", floats=lambda n: n.heads * n.s * (2 * n.d_head + n.d_v)),
    "audit": Item(("audit",), "tail", numbers=_audit_numbers, answer=make_audit),
    "final": Item(("final",), "answer", floats=lambda n: n.s * n.final, answer=make_final),
    "rollout": Item(("rollout",), "layer", floats=lambda n: n.s * n.s_k, grid=True, stack=make_rollout),
    "attention_flow": Item(
        ("attention_flow",), "layer", floats=lambda n: n.s * n.s_k, grid=True, stack=make_attention_flow
    ),
    "value_norms": Item(("value_norms",), "head", floats=lambda n: n.heads * n.s * n.s_k, grid=True),
    "head_contributions": Item(("contribution",), "head", floats=lambda n: n.heads * n.s),
    "eligibility": Item(("eligible", "reasons"), "answer", grid=True),
    # the gates as floats, the expert ids and the layer's count and top_k as JSON numbers
    "experts": Item(
        ("experts",),
        "layer",
        floats=lambda n: n.s * n.top_k,
        numbers=lambda n: n.s * n.top_k + 2,
        layer=make_experts,
    ),
}
# the per-head tensors an answer's field is made from where its name is not the layer's own (AttentionOutput's)
HEAD_TENSORS: dict[str, Callable[[AttentionOutput, AttentionWeights, Reading], torch.Tensor | None]] = {
    # the weights view: with the keys `sinks` names hidden (engine/analysis/sinks.py), else as computed
    "weights": lambda a, _, r: a.weights if r.sinks is None else hide_keys(a.weights, *r.sinks),
    "contribution": lambda a, w, _: head_contributions(a, w),
    "value_norms": lambda a, w, _: value_norms(a, w),
    "sink": lambda a, _, r: a.sink_weight,  # the weight each query gave the head's learned sink
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
        if item.place in ("answer", "tail"):
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


def serialize_run(run: ModelRun, r: Reading, layers: Sequence[int] | None = None) -> dict[str, Any]:
    """The run as the answer sends it, read as `r` says, up to what only the whole pass knows (`tail_body`).
    `layers`: the ones written (the streamed form's head writes its first layer alone); every one shown if None."""
    layers = list(r.layers if layers is None else layers)
    check_result_size(result_size(run, layers, r.include), r.max_values)
    eligible = run.eligible.cpu()
    out_layers = list(layer_bodies(run, r, layers))
    a0 = run.layers[layers[0]].attn
    batched = run.batch_tokens is not None
    axis = 0 if batched else 1  # a batch keeps the leading axis in shapes
    grids = sends_eligibility(r.include)
    body: dict[str, Any] = {
        "model": run.model,
        "tokens": run.tokens,
        "config": config_body(run, r),
        "masks": run.mask_values,
        "all_masked": r.all_masked,
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
        "pairs": run.pairs,
        "reasons": {k: g.numpy() for k, g in run.reason_grids().items()} if grids else None,
        "batch_tokens": [list(t) for t in run.batch_tokens] if run.batch_tokens is not None else None,
        "batch_padding": [list(p) for p in run.batch_padding] if run.batch_padding is not None else None,
        "source_tokens": run.source_tokens,
        "demo_bug": bug_body(run.interventions.bug),
        "sinks": {"hidden": r.sinks[0], "renormalised": r.sinks[1]} if r.sinks is not None else None,
        "final": None,
    }
    body.update(_answer_parts(run, r, "answer"))
    return body


def tail_body(run: ModelRun, r: Reading) -> dict[str, Any]:
    """What only the whole pass knows: its config and timings, and the include items made once it is done (the
    audit). The streamed form sends it last; the other forms lay it over the answer."""
    return {"config": config_body(run, r), "timings_ms": dict(run.timings_ms), **_answer_parts(run, r, "tail")}


def _answer_parts(run: ModelRun, r: Reading, place: str) -> dict[str, Any]:
    """The fields that the include items at `place` ("answer" or "tail") make once for the answer."""
    parts = {}
    for name in r.include:
        item = INCLUDE[name]
        if item.place == place and item.answer is not None:
            parts[item.fields[0]] = item.answer(run, r)
    return parts


def config_body(run: ModelRun, r: Reading) -> dict[str, Any]:
    """The answer's `config`: the run's RunConfig and how it was computed and sent."""
    config = dataclasses.asdict(run.config)
    config.update(scale=r.scale, device=r.device, dtype=r.dtype, seq_len=len(run.tokens), precision=r.precision)
    return config


def layer_bodies(run: ModelRun, r: Reading, layers: Sequence[int]) -> Iterator[dict[str, Any]]:
    """The answer's `layers`, one layer's heads at a time in the order of `layers` (the streamed form sends each
    as it is made). The views of the stack (rollout, attention flow) are made once, for every layer written."""
    eligible = run.eligible.cpu()
    stacks = {}
    for name in r.include:
        item = INCLUDE[name]
        if item.stack is not None:
            stacks[item.fields[0]] = item.stack(run, r, layers)
    for i in layers:
        yield _layer(run, r, i, eligible, {k: v[i] for k, v in stacks.items()})


def _layer(run: ModelRun, r: Reading, i: int, eligible: torch.Tensor, views: dict[str, torch.Tensor]) -> dict[str, Any]:
    """One layer's heads. For a batch every array keeps its leading batch axis and stats come per item.
    `views`: the layer's views of the stack up to it (rollout, attention_flow: B x S x S) that include asks for."""
    a = run.layers[i].attn
    window = run.layers[i].window
    own = eligible if window is None else a.eligible.cpu()  # a local layer's: the masks narrowed by its window
    batched = run.batch_tokens is not None
    n_heads, n_groups = a.scores.shape[1], a.k.shape[1]
    per_group = n_heads // n_groups

    converted: dict[str, np.ndarray] = {}

    def pick(name: str, index: int) -> np.ndarray:
        """Head (or K/V group) `index` of the layer's tensor `name`: the whole tensor is converted once, then
        each head is a view of it (C-contiguous, as orjson needs)."""
        if name not in converted:
            t = HEAD_TENSORS[name](a, run.layers[i].weights, r) if name in HEAD_TENSORS else getattr(a, name)
            assert t is not None, name  # a layer without the tensor sends null before it is picked
            converted[name] = as_numpy(t, r.precision, f"layer {i}'s {name}")
        per_head = converted[name][:, index]
        width = own_width(run.layers[i].weights, name, index)  # heads of unequal widths: the head's own columns
        if width is not None:
            per_head = np.ascontiguousarray(per_head[..., :width])
        return np.ascontiguousarray(per_head) if batched else per_head[0]

    # the per-head matrices include asks for, in INCLUDE's order
    head_fields = [f for name in INCLUDE if name in r.include for f in _head_fields(name)]
    heads = []
    for h in range(n_heads):
        g = h // per_group
        head: dict[str, Any] = {"index": h, "kv_group": g}
        for f in head_fields:
            if f == "sink" and a.sink_weight is None:
                continue  # a layer without sinks: the field stays null
            head[f] = pick(f, g if f in KV_FIELDS else h)
        heads.append(head)
    layer: dict[str, Any] = {"index": i, "heads": heads, "window": window, "eligible": None}
    if window is not None and sends_eligibility(r.include):
        layer["eligible"] = own.numpy()
    for name, m in views.items():
        layer[name] = _items(run, as_numpy(m, r.precision, f"layer {i}'s {name}"))
    for name in INCLUDE:
        item = INCLUDE[name]
        if name in r.include and item.layer is not None:
            made = item.layer(run, r, i)
            for head, part in zip(heads, made.pop("heads", ()), strict=False):
                head.update(part)
            layer.update(made)
    return layer


def own_width(w: AttentionWeights, name: str, index: int) -> int | None:
    """Head `index`'s own width of the tensor `name` (q, k: d_k; v, contexts: d_v), or None where heads are of one
    width: what a head's padded columns are cut to before they are sent (engine/unequal.py pads them)."""
    if w.head_widths is None or w.value_widths is None:
        return None
    if name in ("q", "k", "q_pre_rotary", "k_pre_rotary"):
        return w.head_widths[index]
    return w.value_widths[index] if name in ("v", "contexts") else None


def _head_fields(name: str) -> tuple[str, ...]:
    item = INCLUDE[name]
    return item.fields if item.place == "head" else ()


# ---- analyses ------------------------------------------------------------------------------------------------------


def layer_delta_list(deltas: list[list[float]]) -> list[dict[str, Any]]:
    return [{"index": i, "delta": d} for i, d in enumerate(deltas)]


def bug_body(bug: str | None) -> dict[str, Any] | None:
    return {"name": bug, "wrong": True, "note": BUG_NOTES[bug]} if bug is not None else None
