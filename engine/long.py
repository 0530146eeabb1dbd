"""A long run: the one forward over a sequence of any length, keeping per layer what its weights are made from.

The masks are a `BlockMask` (engine/blockwise.py), which engine.attention reads a block at a time: every layer's
attention is the online-softmax pass, so no S x S tensor exists at any point. Per layer the run keeps Q and K
(after rotary), each row's log-sum-exp and the fine pyramid (engine/tiles.py), from which a tile or a row is
recomputed exactly on demand, and it makes each head's summary (grid x grid block maxima and means) as it goes.
A local layer keeps its own mask (the run's narrowed by its window) and a softcapped one its cap, so what is
recomputed from it is what that layer computed.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine import stop
from engine.blockwise import BlockMask, weights
from engine.forward import forward
from engine.masks import MaskSpec, validate_masks
from engine.models.base import AttentionModel, Encoded, RunInput
from engine.tiles import HeadKeep, deepest, fine_cell, keep


@dataclass
class LongRun:
    model: str
    tokens: list[str]
    layers: list[HeadKeep]
    summaries: list[tuple[Tensor, Tensor]]  # per layer: block maxima and means (H, n, n)
    block: int  # positions per summary block
    grid: int
    n_heads: int
    d_head: int
    serial: str = field(default_factory=lambda: uuid.uuid4().hex)  # this making of the run (a name can be reused)

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes for k in self.layers) + sum(a.nbytes + b.nbytes for a, b in self.summaries)

    @property
    def levels(self) -> int:
        """zmax: the deepest tile level, whose cells are single weights."""
        return deepest(len(self.tokens))


@dataclass(frozen=True)
class RunShape:
    """What a long run's cost follows from, known before it runs: its length and its network's attention."""

    s: int  # tokens
    layers: int  # layers computed
    heads: int  # query heads per layer
    kv_heads: int  # K/V groups per layer
    d_head: int

    def work(self) -> int:
        """q.k products of one pass over every layer's S x S (the forward; the summaries' pass makes as many again)."""
        return self.layers * self.heads * self.s * self.s * self.d_head

    def kept_bytes(self, grid: int, pyramid_bytes: int) -> int:
        """LongRun.nbytes of the run it would make: per layer Q and K in float32, each row's log-sum-exp, the fine
        pyramid's maxima and sums (engine/tiles.py keep) and each head's summary, the maxima and the means."""
        s, h = self.s, self.heads
        fine = fine_cell(s, h * self.layers, pyramid_bytes)
        block = fine
        while math.ceil(s / block) > grid:
            block *= 2
        per_layer = h * s * self.d_head + self.kv_heads * s * self.d_head + h * s
        per_layer += 2 * h * math.ceil(s / fine) ** 2 + 2 * h * math.ceil(s / block) ** 2
        return 4 * self.layers * per_layer


def run_shape(model: AttentionModel, inp: RunInput, s: int, device: torch.device, dtype: torch.dtype) -> RunShape:
    """The shape of a long run of `model` on `inp` at `s` tokens, read from its network before anything runs."""
    net = model.network(inp, device, dtype)
    w = net.held(0).attn
    return RunShape(s, model.last_layer(inp) + 1, w.n_heads, w.n_kv_heads, w.d_head)


def sink_mass(layer: HeadKeep) -> list[float]:
    """Per head, the mean over queries that have a key of the weight on key 0, from Q, K and the normalisers."""
    s = layer.q.shape[1]
    on_first = weights(layer.q, layer.k, layer.lse, layer.mask, layer.scale, (0, s), (0, 1), layer.softcap)[..., 0]
    keyed = torch.isfinite(layer.lse)
    count = keyed.sum(dim=-1).clamp_min(1)
    return [float(v) for v in (on_first * keyed).sum(dim=-1) / count]


def block_mask(model: AttentionModel, inp: RunInput, s: int) -> BlockMask:
    """The run's masks as a BlockMask: the request's own, else the model's defaults."""
    spec = (inp.masks if inp.masks is not None else model.info.default_masks or MaskSpec()).with_length(s)
    validate_masks(spec, s)  # the same refusals, naming the same fields, as a run of /api/attention
    padding = None if spec.padding is None else torch.tensor(list(spec.padding), dtype=torch.bool)
    blocked = tuple((int(q), int(k)) for q, k in spec.blocked)
    return BlockMask(s, s, causal=spec.causal, window=spec.window, key_padding=padding, blocked=blocked)


def long_run(
    model: AttentionModel,
    inp: RunInput,
    device: torch.device,
    dtype: torch.dtype,
    grid: int,
    pyramid_bytes: int,
    encoded: Encoded | None = None,
) -> LongRun:
    """Every layer of `model` on `inp` (`encoded`: its encoding, when the caller has it), blockwise; what each
    layer keeps is moved to the CPU as it is made."""
    stop.check()
    enc = encoded if encoded is not None else model.encode(inp)
    s = len(enc.tokens)
    mask = block_mask(model, inp, s)
    net = model.network(inp, device, dtype)
    x = enc.x.to(device=device, dtype=dtype)
    x = x[None] if x.dim() == 2 else x
    fwd = forward(x, net, mask, scale=inp.scale, all_masked=inp.all_masked, last_layer=model.last_layer(inp))
    heads = net.held(0).attn.n_heads
    fine = fine_cell(s, heads * len(fwd.layers), pyramid_bytes)
    kept, summaries = [], []
    block = 1
    for trace in fwd.layers:
        stop.check()
        a, b = trace.attn, net.held(trace.index)  # its window and softcap
        assert a.lse is not None  # a BlockMask run: attention made the row normalisers, not the weights
        own = mask.within(b.window)  # a local layer's own window: the mask its weights were made under
        q, k, lse = a.q[0].float().cpu(), a.k[0].float().cpu(), a.lse[0].float().cpu()
        layer, smax, smean, block = keep(q, k, lse, own, a.scale_factor, fine, grid, b.attn.softcap)
        kept.append(layer)
        summaries.append((smax, smean))
    w = net.held(0).attn
    return LongRun(model.name, list(enc.tokens), kept, summaries, block, grid, w.n_heads, w.d_head)
