"""Causal decoding with a KV cache: one position at a time, each new query attending over every cached key.

At step t the model reads only x_0[t]; every layer projects its query, key and value, appends the key
and value to that layer's cache, and attends from the one new query over the t + 1 cached keys. Under
causal masking this is the same computation as the full pass's row t, so `max_diff_vs_full` (largest
|difference| of any weight or layer output between the two) must be ~0. The cache grows by

    bytes per token = layers x kv_heads x (d_head + d_v) x bytes(dtype)
                    = 2 x layers x kv_heads x d_head x bytes(dtype)   when d_v = d_head

which is why grouped K/V (fewer kv_heads than heads) shrinks it. A rotary whose angles follow the run's length
(dynamic NTK, longrope) is pinned to the input's length for every step (`at_length`); tokens generated after the
input rotate at their own length, position + 1, as transformers' generate reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.analysis.generate import GeneratedToken, Sampling, check_generation, generate
from engine.errors import InputError
from engine.forward import KVCache, Network, forward
from engine.models.base import AttentionModel, Encoded, ModelRun, RunInput, top_predictions
from engine.models.declare import able
from engine.stored import StoredBlocks


@dataclass(frozen=True)
class DecodeStep:
    position: int
    token: str
    weights: list[list[list[float]]]  # per layer, per head: the new query's weights over the t + 1 cached keys
    cache_length: int  # positions in the cache after this step
    cache_bytes: int  # bytes of every layer's K and V after this step
    next_token: dict[str, Any] | None  # the most likely next token, for models that predict tokens


@dataclass(frozen=True)
class CacheFormula:
    bytes_per_token: int
    formula: str  # the arithmetic, with this model's numbers


@dataclass(frozen=True)
class DecodeResult:
    full: ModelRun  # the same input computed at once, for comparison
    steps: list[DecodeStep]
    max_diff_vs_full: float
    cache: CacheFormula
    generated: list[GeneratedToken] | None = None  # the tokens generated after the input, when asked


def cache_formula(net: Network, dtype: torch.dtype) -> CacheFormula:
    w = net.held(0).attn
    n, size = len(net.blocks), torch.empty((), dtype=dtype).element_size()
    per_token = n * w.n_kv_heads * (w.d_head + w.d_v) * size
    name = str(dtype).removeprefix("torch.")
    if w.d_head == w.d_v:
        formula = (
            f"2 (K and V) x {n} layer{'s' if n != 1 else ''} x {w.n_kv_heads} kv_heads x {w.d_head} d_head x "
            f"{size} bytes ({name}) = {per_token} bytes per token"
        )
    else:
        formula = (
            f"{n} layer{'s' if n != 1 else ''} x {w.n_kv_heads} kv_heads x ({w.d_head} d_k + {w.d_v} d_v) x "
            f"{size} bytes ({name}) = {per_token} bytes per token"
        )
    return CacheFormula(per_token, formula)


def at_length(net: Network, s: int) -> Network:
    """`net` with every layer's rotary pinned to the run's length s, so that each decoded step rotates as the full
    pass over the s positions does: a dynamic (NTK) base and longrope's factors follow the run's length, which a
    step at position t would otherwise read as t + 1 (engine/rotary.py)."""
    blocks = tuple(
        b if b.attn.rotary is None else replace(b, attn=replace(b.attn, rotary=b.attn.rotary.at_length(s)))
        for b in net.held_blocks  # a checkpoint's as stored, still converted a block at a time as they run
    )
    held = net.blocks
    return replace(net, blocks=held.holding(blocks) if isinstance(held, StoredBlocks) else blocks)


def decode(
    model: AttentionModel,
    inp: RunInput,
    enc: Encoded,
    device: torch.device,
    dtype: torch.dtype,
    sampling: Sampling | None = None,
) -> DecodeResult:
    """Decode `enc` position by position with a KV cache, and compare every step with the full pass; then generate
    `sampling.tokens` more through the same cache when asked (engine/analysis/generate.py)."""
    if not model.capabilities.decode:
        field = "model" if sampling is None else "generate"
        raise InputError(
            field,
            f"{model.name} does not decode token by token: it reads the whole sequence at once (an encoder, or "
            f"matrices typed in whole); decode with {able('decode')}",
        )
    s = len(enc.tokens)
    if sampling is not None:
        check_generation(model, sampling, s)
    masks = model.resolve_masks(inp, s)
    if not masks.causal:
        raise InputError(
            "masks.causal",
            "decoding adds one position at a time, so a query can only see keys already in the cache: set causal",
        )
    full = model.run(inp, device, dtype, encoded=enc)  # also checks the all-masked policy on every row
    net = model.network(inp, device, dtype)
    steps_net = at_length(net, s)
    x = enc.x.to(device=device, dtype=dtype)[None]  # (1, S, D)
    cache = KVCache.empty(len(net.blocks))
    vocab = model.info.vocab
    steps, worst = [], 0.0
    for t in range(s):
        step = forward(
            x[:, t : t + 1],
            steps_net,
            full.eligible[t : t + 1, : t + 1],
            scale=inp.scale,
            all_masked=inp.all_masked,
            cache=cache,
        )
        assert step.kv is not None
        cache = step.kv
        rows = [layer.attn.weights[0, :, 0, :] for layer in step.layers]  # per layer (H, t + 1)
        for i, (row, layer) in enumerate(zip(rows, step.layers, strict=True)):
            ref = full.layers[i]
            worst = max(
                worst,
                float((row.double() - ref.attn.weights[0, :, t, : t + 1].double()).abs().max()),
                float((layer.resid_out[0, 0].double() - ref.resid_out[0, t].double()).abs().max()),
            )
        next_token = None
        if step.logits is not None and vocab is not None:
            next_token = top_predictions(step.logits[0], vocab, 1)[0][0]
        steps.append(
            DecodeStep(
                position=t,
                token=enc.tokens[t],
                weights=[r.float().tolist() for r in rows],
                cache_length=cache.length,
                cache_bytes=cache.nbytes,
                next_token=next_token,
            )
        )
    generated = None
    if sampling is not None:
        assert step.logits is not None  # check_generation: the model predicts tokens
        generated, _ = generate(model, inp, enc, net, cache, step.logits[0, -1], sampling, device, dtype)
    return DecodeResult(full, steps, worst, cache_formula(net, dtype), generated)
