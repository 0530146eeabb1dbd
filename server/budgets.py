"""What an answer may hold and a run may keep, counted before anything runs: the answer's shape (what
server/serialize.py's INCLUDE counts read), its numbers and bytes against the server's limits, the memory the
forward passes hold (server/plan.py reads it in its budgets step)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.masks import MaskSpec
from engine.models.base import Encoded, InputShape
from server.config import Settings
from server.deps import Runtime
from server.errors import ApiError
from server.schemas import AttentionRequest
from server.serialize import AnswerShape, answer_count, check_result_bytes, check_result_size, dtype_name


@dataclass(frozen=True)
class Budget:
    """What this server lets one answer hold: its numbers and its bytes, checked before the run; and the bounds
    its include items declare, checked by their makers before their work (server/serialize.py): the max-flow steps
    of attention flow and the forward passes of the audit's verdicts."""

    values: int  # ATTNLAB_MAX_RESULT_VALUES
    bytes: int  # ATTNLAB_MAX_RESULT_BYTES
    flow_work: int  # ATTNLAB_MAX_FLOW_WORK
    audit_runs: int  # ATTNLAB_MAX_AUDIT_RUNS

    @classmethod
    def of(cls, settings: Settings) -> Budget:
        return cls(
            settings.max_result_values,
            settings.max_result_bytes,
            settings.limit("max_flow_work"),
            settings.limit("max_audit_runs"),
        )


# The memory a forward pass holds, estimated before it runs, and bounded by ATTNLAB_MAX_WORK_BYTES.
#
# The answer's bytes are counted from server/serialize.py's INCLUDE, but a run keeps more than it sends: every
# layer's scores and weights (B x H x S x S_k each) stay on the run for the views, the cache and the next request,
# whatever `include` asks for. A batch of 16 minilm texts of 510 words with `include: []` answered a few kilobytes
# and peaked at +9.9 GB in float64 (+2.0 GB in float32). So, per forward pass:
#
#     kept       layers x (2 x B x H x S x S_k  +  ACTIVATIONS x B x S x D) x itemsize
#     working    B x H x S x S_k x max(itemsize, 4)    the softmax's copy of one layer (half precision: float32 first)
#     masks      B x S x S_k bytes                      the eligibility grid
#
# times the forwards the answer needs: an intervention's before and after, and the float32 pass a request with
# another `dtype` is compared with (max_diff_vs_float32).

ACTIVATIONS = 12  # B x S x D tensors a layer keeps: q, k, v, contexts, output, the residual stream, norms, the MLP


@dataclass(frozen=True)
class WorkShape:
    """What sets a forward pass's memory, known once the input is tokenised."""

    layers: int  # layers the pass computes
    batch: int
    heads: int
    s: int
    s_k: int
    d_model: int  # 0 where the model's width is not known before the run (its activations are then left out)

    def bytes(self, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        grid = self.batch * self.heads * self.s * self.s_k
        kept = self.layers * (2 * grid + ACTIVATIONS * self.batch * self.s * self.d_model) * itemsize
        return kept + grid * max(itemsize, 4) + self.batch * self.s * self.s_k


def work_bytes(shape: WorkShape, dtype: torch.dtype, forwards: int, compared: bool) -> int:
    """Bytes the answer's forward passes hold at once: `forwards` in `dtype`, and one more in float32 when the
    answer is `compared` with it."""
    return shape.bytes(dtype) * forwards + (shape.bytes(torch.float32) if compared else 0)


def check_work_bytes(
    shape: WorkShape, dtype: torch.dtype, forwards: int, compared: bool, limit: int, field: str
) -> None:
    """A 413 before the run when its passes would hold more than `limit` bytes, naming `dtype` where float32 alone
    would fit, else the input (`field`) to shorten."""
    size = work_bytes(shape, dtype, forwards, compared)
    if size <= limit:
        return
    name = str(dtype).removeprefix("torch.")
    in_float32 = work_bytes(shape, torch.float32, forwards, False)
    fits = compared and in_float32 <= limit
    advice = f"ask for float32 ({in_float32:,} bytes)" if fits else "send fewer or shorter texts, or ask for one layer"
    raise ApiError(
        413,
        "too_large",
        f"this run would hold about {size:,} bytes in {name} ({shape.layers} layers x {shape.batch} x {shape.heads} "
        f"heads x {shape.s} x {shape.s_k} scores and weights), limit {limit:,} (set by ATTNLAB_MAX_WORK_BYTES on "
        f"this server): {advice}",
        "dtype" if fits else field,
    )


def check_budgets(
    req: AttentionRequest,
    n: AnswerShape,
    work: WorkShape,
    runtime: Runtime,
    form: str,
    results: int,
    budget: Budget,
    max_work_bytes: int,
    field: str,
) -> None:
    """Refuse before computing what could not be sent: the numbers the answer holds (shape `n`), what they weigh in
    the form asked, and what the passes hold while they run (`work`), whatever the answer sends."""
    every, one_layer = answer_count(req.include, n)
    check_result_size(every.floats, budget.values)
    dtype = dtype_name(runtime.dtype)
    check_result_bytes(every, None if n.layers == 1 else one_layer, form, req.precision, dtype, budget.bytes)
    compared = req.dtype is not None and runtime.dtype != torch.float32  # max_diff_vs_float32's float32 pass
    check_work_bytes(work, runtime.dtype, results, compared, max_work_bytes, field)


def answer_shape(req: AttentionRequest, shape: InputShape, encoded: Encoded, results: int) -> AnswerShape:
    """The answer's shape, known once the input is encoded (`shape`: its run's layers, heads and widths): what
    INCLUDE's counts read before the run."""
    s = len(encoded.tokens)
    s_k = len(encoded.source.tokens) if encoded.source is not None else s
    # the model's own widths; where options or custom weights set them they are not known before the run, and the
    # count is a lower bound (1 each) that serialize_run's own count, exact, completes after it
    d_head, d_v = shape.d_head or 1, shape.d_v or 1
    heads = shape.n_heads
    d_out = max(shape.d_model or 1, heads * d_v) if shape.d_model is not None else heads  # after W_O, else concat
    shown = [req.layer] if req.layer is not None else range(shape.n_layers)
    return AnswerShape(
        layers=len(shown),
        items=(encoded.batch or 1) * results,
        heads=heads,
        s=s,
        s_k=s_k,
        d_head=d_head,
        d_v=d_v,
        d_out=d_out,
        final=shape.final if "final" in req.include else 0,
        top_k=shape.top_k,
        reasons=reason_grids(shape.masks, encoded),
        blocked=len(shape.masks.blocked),
        local_layers=sum(shape.local[i] for i in shown if i < len(shape.local)),
    )


def reason_grids(m: MaskSpec, encoded: Encoded) -> int:
    """How many reasons grids the answer holds (one per mask in force), at most: counted from the masks asked for."""
    if encoded.source is not None:
        return (encoded.source_padding is not None) + bool(m.blocked)
    padding = m.padding is not None or m.padded is not None or encoded.batch is not None
    return m.causal + (m.window is not None) + padding + bool(m.blocked)
