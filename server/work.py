"""The memory a forward pass holds, estimated before it runs, and bounded by ATTNLAB_MAX_WORK_BYTES.

The answer's bytes are bounded elsewhere (server/serialize.py ResultCount), but a run keeps more than it sends: every
layer's scores and weights (B x H x S x S_k each) stay on the run for the views, the cache and the next request,
whatever `include` asks for. A batch of 16 minilm texts of 510 words with `include: []` answered a few kilobytes
and peaked at +9.9 GB in float64 (+2.0 GB in float32). So, per forward pass:

    kept       layers x (2 x B x H x S x S_k  +  ACTIVATIONS x B x S x D) x itemsize
    working    B x H x S x S_k x max(itemsize, 4)    the softmax's copy of one layer (half precision: float32 first)
    masks      B x S x S_k bytes                      the eligibility grid

times the forwards the answer needs: an intervention's before and after, and the float32 pass a request with
another `dtype` is compared with (max_diff_vs_float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from server.errors import ApiError

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
