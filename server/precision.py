"""`dtype` per request: the precision one /api/attention (or /api/export) run computes in, and how far its weights
land from float32's.

`dtype` is the compute precision of the forward pass (ATTNLAB_DTYPE by default). It is not `precision`, which only
rounds the matrices as they are sent (float16 halves the bytes) after they were computed in `dtype`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import torch

from engine.device import resolve_dtype
from engine.models import ModelRun
from server.deps import Runtime
from server.errors import ApiError
from server.schemas import AttentionRequest


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@cache
def _cannot_run(device: str, dtype: torch.dtype) -> str | None:
    """Why `device` cannot run attention's steps (a matrix product, a batched product, a softmax) in `dtype`, or
    None where it can: tried once per device and dtype, on a 4 x 8 matrix."""
    try:
        a = torch.linspace(-1, 1, 32).reshape(4, 8).to(device=device, dtype=dtype)
        product = torch.baddbmm(a.new_empty(()).expand(1, 4, 4), a[None], a.t()[None], beta=0.0, alpha=0.5)
        torch.softmax(product @ a[None], dim=-1)
    except (RuntimeError, TypeError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def request_runtime(req: AttentionRequest, runtime: Runtime) -> Runtime:
    """The runtime of this request: the server's, in the request's `dtype` when it gives one (the same run cache,
    keyed on the dtype). A dtype this device cannot compute in is a 422 naming `dtype` and why."""
    if req.dtype is None:
        return runtime
    dtype = resolve_dtype(req.dtype)
    if dtype == runtime.dtype:
        return runtime
    why = _cannot_run(str(runtime.device), dtype)
    if why is not None:
        raise ApiError(
            422,
            "invalid_request",
            f"this server's device ({runtime.device}) cannot compute attention in {req.dtype} ({why}): "
            "ask for float32 or float64",
            "dtype",
        )
    return replace(runtime, dtype=dtype)


def check_how(req: AttentionRequest, runtime: Runtime, model: str) -> None:
    """The fields that say how the run computes, refused by name where they cannot be honoured: `head_widths` with
    a model other than custom, and a `dtype` other than the server's in an endpoint that computes in the server's
    (request_runtime has already set the runtime of the endpoints that honour it)."""
    if req.head_widths is not None and model != "custom":
        why = f"head_widths splits custom weights into heads; {model} has its own: leave head_widths out"
        raise ApiError(422, "invalid_request", why, "head_widths")
    if req.dtype is not None and resolve_dtype(req.dtype) != runtime.dtype:
        raise ApiError(
            422,
            "invalid_request",
            f"this endpoint computes in the server's {dtype_name(runtime.dtype)} (ATTNLAB_DTYPE); dtype per "
            "request comes with /api/attention and /api/export: leave dtype out",
            "dtype",
        )


def float32_runtime(runtime: Runtime) -> Runtime:
    return replace(runtime, dtype=torch.float32)


def max_weight_difference(run: ModelRun, reference: ModelRun, layer: int | None) -> float:
    """The largest |weight - weight at float32| over every head of the layers returned (`layer`, or all)."""
    layers = [layer] if layer is not None else range(len(run.layers))
    top = 0.0
    for i in layers:
        got = run.layers[i].attn.weights.to(torch.float64)
        ref = reference.layers[i].attn.weights.to(device=got.device, dtype=torch.float64)
        if got.numel():
            top = max(top, float((got - ref).abs().max()))
    return top
