"""What attention costs: score elements and bytes, KV-cache bytes, projection parameters and FLOPs.

For B sequences of S tokens, H query heads, G K/V groups, width D, d_head = D / H, per layer:

    score elements  B H S^2                      (and the same again for the weights)
    score bytes     B H S^2 x bytes(dtype)       doubling S quadruples it: 1024 -> 8192 is 64x
    KV cache        2 B layers G S d_head x bytes(dtype)
    parameters      W_Q D x H d_head, W_K and W_V D x G d_head, W_O H d_head x D  = 2 D^2 + 2 D G d_head;
                    one head of width D has 4 D^2: H heads cost the same as one (with G = H)
    FLOPs           projections 2 B S D (H + 2 G) d_head + output 2 B S D^2 + scores 2 B H S^2 d_head
                    + weights x V 2 B H S^2 d_head   (a multiply-add counts 2)

`measure_cost` also runs one layer here (three times: warm-up, timed, memory). A CPU has no fast half-precision
matmul (float16 is ~50x slower than float32 there), so on a CPU float16 and bfloat16 are measured in float32 and
the answer says so; the run stops between repetitions when nobody waits for it (engine.stop). How large a layer
may be measured is the caller's limit: `Cost.flops["total"]` counts it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from engine import stop
from engine.attention import AttentionWeights, attention
from engine.errors import InputError
from engine.measure import measure

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class CostQuery:
    batch: int = 1
    heads: int = 12
    kv_heads: int | None = None  # None: one per head
    seq_len: int = 128
    d_model: int = 384
    layers: int = 6
    dtype: str = "float32"

    @property
    def groups(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads


@dataclass(frozen=True)
class CurvePoint:
    seq_len: int
    score_bytes: int  # all layers
    kv_cache_bytes: int


@dataclass(frozen=True)
class MeasuredLayer:
    peak_bytes: int  # what the layer allocated above what was allocated before
    ms: float  # one run of the layer
    method: str  # how peak_bytes was measured, in words
    tokens_per_s: float | None  # B x S / (ms x layers)
    measured_dtype: str  # the dtype the layer ran in: the query's, or float32 for half precision on a CPU
    note: str | None  # why measured_dtype differs from the query's


@dataclass(frozen=True)
class Cost:
    d_head: int
    bytes_per_value: int
    score_elements: int  # per layer
    score_bytes: int  # per layer
    score_bytes_all_layers: int
    kv_cache_bytes: int
    params_one_head: int  # per layer: one head of width D
    params_heads: int  # per layer: H heads (G K/V groups)
    params_all_layers: int
    flops: dict[str, int]  # per layer: projections, scores, weights_v, output, total; and all_layers
    curve: list[CurvePoint]  # memory against S, powers of 2
    measured: MeasuredLayer | None = None
    tokens_per_s: float | None = None


def validate(q: CostQuery) -> torch.dtype:
    for name in ("batch", "heads", "seq_len", "d_model", "layers"):
        if getattr(q, name) < 1:
            raise InputError(name, f"got {getattr(q, name)}: must be at least 1")
    if q.d_model % q.heads:
        raise InputError("heads", f"got {q.heads} heads for width {q.d_model}: width must divide by heads")
    if q.groups < 1 or q.heads % q.groups:
        raise InputError("kv_heads", f"got {q.groups} K/V heads for {q.heads} heads: heads must divide by kv_heads")
    if q.dtype not in DTYPES:
        raise InputError("dtype", f"got {q.dtype!r}: one of {', '.join(DTYPES)}")
    return DTYPES[q.dtype]


def score_bytes(q: CostQuery, seq_len: int, size: int) -> int:
    return q.batch * q.heads * seq_len**2 * size


def kv_bytes(q: CostQuery, seq_len: int, size: int) -> int:
    return 2 * q.batch * q.layers * q.groups * seq_len * q.d_head * size


def cost(q: CostQuery) -> Cost:
    dtype = validate(q)
    size = torch.empty((), dtype=dtype).element_size()
    b, h, g, s, d, dh = q.batch, q.heads, q.groups, q.seq_len, q.d_model, q.d_head
    flops = {
        "projections": 2 * b * s * d * (h + 2 * g) * dh,
        "scores": 2 * b * h * s * s * dh,
        "weights_v": 2 * b * h * s * s * dh,
        "output": 2 * b * s * (h * dh) * d,
    }
    flops["total"] = sum(flops.values())
    flops["all_layers"] = flops["total"] * q.layers
    top = max(8192, 4 * s)
    lengths = [2**i for i in range(4, top.bit_length()) if 2**i <= top]
    params = 2 * d * h * dh + 2 * d * g * dh
    return Cost(
        d_head=dh,
        bytes_per_value=size,
        score_elements=b * h * s * s,
        score_bytes=score_bytes(q, s, size),
        score_bytes_all_layers=score_bytes(q, s, size) * q.layers,
        kv_cache_bytes=kv_bytes(q, s, size),
        params_one_head=4 * d * d,
        params_heads=params,
        params_all_layers=params * q.layers,
        flops=flops,
        curve=[CurvePoint(n, score_bytes(q, n, size) * q.layers, kv_bytes(q, n, size)) for n in lengths],
    )


HALF = (torch.float16, torch.bfloat16)


def measured_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a layer is measured in: the query's, except half precision on a CPU, which runs in float32."""
    return torch.float32 if device.type == "cpu" and dtype in HALF else dtype


def measure_cost(q: CostQuery, device: torch.device, seed: int = 0) -> Cost:
    """The formulas, plus one attention layer (B, S, D) of the engine measured on `device`: peak bytes, time, and
    tokens per second for all layers (the layer's time x layers)."""
    asked = validate(q)
    dtype = measured_dtype(asked, device)
    base = cost(q)
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        """N(0, 1/fan_in) entries, so every product stays near unit scale (and finite in half precision)."""
        return (torch.randn(*shape, generator=gen) / shape[-2] ** 0.5).to(device=device, dtype=dtype)

    stop.check()
    d, h, g, dh = q.d_model, q.heads, q.groups, q.d_head
    w = AttentionWeights(
        W_Q=draw(h, d, dh) / d**0.5,
        W_K=draw(g, d, dh) / d**0.5,
        W_V=draw(g, d, dh) / d**0.5,
        W_O=draw(h, dh, d) / d**0.5,
    )
    x = (torch.randn(q.batch, q.seq_len, d, generator=gen)).to(device=device, dtype=dtype)

    def layer() -> object:
        stop.check()  # the client has gone: no more repetitions
        return attention(x, w)

    with torch.inference_mode():
        _, m = measure(layer, device)
    tokens_per_s = q.batch * q.seq_len / (m.ms * q.layers / 1000.0) if m.ms > 0 else None
    name = str(dtype).removeprefix("torch.")
    note = None
    if dtype != asked:
        note = (
            f"measured in {name}, not {q.dtype}: a CPU has no fast {q.dtype} matmul (~50x slower than {name}), "
            f"so the time is {name}'s; the formulas above are {q.dtype}'s"
        )
    measured = MeasuredLayer(m.peak_bytes, m.ms, m.method, tokens_per_s, name, note)
    return replace(base, measured=measured, tokens_per_s=tokens_per_s)
