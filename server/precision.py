"""`dtype` per request: whether this server's device can compute attention in the dtype a request asks for, and
the runtime the request then runs on (server/plan.py reads it in its precision/dtype step)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import torch

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


def request_runtime(req: AttentionRequest, dtype: torch.dtype | None, runtime: Runtime) -> Runtime:
    """The runtime of this request: the server's, in the request's `dtype` when it gives one (the same run cache,
    keyed on the dtype). A dtype this device cannot compute in is a 422 naming `dtype` and why."""
    if dtype is None or dtype == runtime.dtype:
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


def check_dtype(dtype: torch.dtype | None, runtime: Runtime) -> Runtime:
    """An endpoint that computes in the server's dtype refuses another (`dtype`, the request's) by name
    (request_runtime sets the runtime of the endpoints that honour it)."""
    if dtype is not None and dtype != runtime.dtype:
        raise ApiError(
            422,
            "invalid_request",
            f"this endpoint computes in the server's {dtype_name(runtime.dtype)} (ATTNLAB_DTYPE); dtype per "
            "request comes with /api/attention and /api/export: leave dtype out",
            "dtype",
        )
    return runtime
