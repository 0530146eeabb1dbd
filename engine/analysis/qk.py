"""QK attribution: why a query matches a key, as a sum over what wrote the residual stream on each side.

In a pre-norm model the stream that layer L reads is a sum of components, each written once:

    x_L = embedding + sum_{l < L} ( sum_h context_h W_O^h + b_O ) + sum_{l < L} MLP_l

With the norm's scale frozen at its value for this input (LayerNorm: (c - mean c) / sigma * w, its bias b a
component of its own; RMSNorm: c / rms * w), the query and the key are sums too, and so is their product:

    score(q, k) = factor * rot_q(sum_i n_i(x_q) W_Q + b_Q) . rot_k(sum_j n_j(x_k) W_K + b_K)
                = sum_{i, j} factor * rot_q(n_i W_Q) . rot_k(n_j W_K)       (biases are one more i and j)

so every term is one source on the query side times one on the key side, and the terms sum to the score the
layer computed (rotary is linear at a fixed position). "L1H3 attends to 'cat' because L0H1 wrote the previous
token into the key": the largest term names L0H1 on the key side.

A layer with q/k norms (Qwen3: an RMSNorm on each head's query and key before rotary) is frozen the same way, at
the scale the whole query or key had: RMSNorm(sum_i q_i) = sum_i q_i / rms(q) * w, so the terms still sum to the
score.

A post-norm model (BERT, MiniLM) renormalises the stream after every layer, and a block that norms its sublayer's
output before adding it (Gemma-2/3, OLMo-2) adds no sum of its heads' outputs: what a layer reads then is not a
sum of what earlier heads wrote, so it has no such decomposition, and is refused with that reason. A layer that
softcaps its scores (Gemma-2: c tanh(q . k / c)) computes a score that is not the sum of the q . k terms either
(tanh of a sum is not a sum of tanhs), and is refused with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from engine.errors import InputError
from engine.forward import Network
from engine.models.base import ModelRun
from engine.norms import LayerNorm, Norm, RMSNorm
from engine.weights import QKNormOver


@dataclass(frozen=True)
class Term:
    query_source: str
    key_source: str
    value: float


@dataclass(frozen=True)
class QKAttribution:
    layer: int
    head: int
    query: int
    key: int
    score: float  # the layer's own scaled q.k for this cell, before masking
    total: float  # the sum of every term (equal to score up to rounding)
    eligible: bool  # whether the masks let this query attend to this key
    sources: list[str]  # the residual stream's components, in order
    terms: list[Term]  # every (query source, key source) pair, largest |value| first


def post_norm_reason(net: Network) -> str | None:
    for i, b in enumerate(net.held_blocks):
        if b.ln_attn is not None or b.ln_mlp is not None:
            return (
                f"layer {i} normalises the residual stream after adding to it (post-norm, as BERT does), so what a "
                "later layer reads is not a sum of what earlier layers wrote: QK attribution needs a pre-norm model "
                "(induction, pycode, GPT-2, LLaMA-family checkpoints)"
            )
        if b.ln_post_attn is not None or b.ln_post_mlp is not None:
            return (
                f"layer {i} normalises its attention or feed-forward output before adding it to the residual stream "
                "(Gemma-2/3, OLMo-2), so what it adds is not a sum of its heads' outputs: QK attribution needs a "
                "pre-norm model without post-sublayer norms"
            )
        if not b.residual:
            return f"layer {i} has no residual stream (its output is the attention output alone): nothing to sum"
    return None


def frozen_qk_norm(
    terms: Tensor, norm: Norm | None, over: QKNormOver, projected: Tensor | None, n: int, p: int
) -> Tensor:
    """(C, d_head) terms of head (or K/V group) n's query or key at position p through the layer's q or k norm,
    its scale frozen at the value the whole vector had: `projected` (1, H | G, S, d_head) is what the norm read."""
    if norm is None:
        return terms
    if not isinstance(norm, RMSNorm) or projected is None:
        raise InputError("model", f"the q/k norm {type(norm).__name__} has no frozen-scale form")
    every = projected[0, :, p]  # (H | G, d_head) every head's vector at p
    span = every[n] if over == "head" else every.reshape(-1)  # what one RMS is taken over
    rms = torch.sqrt(span.pow(2).mean() + norm.eps)
    scale = norm.weight + 1 if norm.offset else norm.weight
    return terms / rms * (scale if over == "head" else scale.view(every.shape)[n])


def components(run: ModelRun, layer: int) -> tuple[list[str], Tensor]:
    """The names and (C, S, D) vectors of the residual stream's components entering `layer` (batch item 0)."""
    names, parts = ["embedding"], [run.result.embed[0]]
    for trace in run.layers[:layer]:
        a, w = trace.attn, trace.weights
        assert w.W_O is not None
        for h in range(a.contexts.shape[1]):
            names.append(f"L{trace.index}H{h}")
            parts.append(a.contexts[0, h] @ w.W_O[h])
        if w.b_O is not None:
            names.append(f"L{trace.index} attention bias")
            parts.append(w.b_O.expand_as(parts[0]))
        if trace.mlp_out is not None:
            names.append(f"L{trace.index} MLP")
            parts.append(trace.mlp_out[0])
    return names, torch.stack(parts)


def frozen_norm(norm: object | None, x: Tensor, parts: Tensor) -> tuple[Tensor, Tensor | None]:
    """(C, S, D) components through the norm with its scale frozen at its value on x (S, D); and the norm's own
    bias as one more component (LayerNorm), else None."""
    if norm is None:
        return parts, None
    if isinstance(norm, LayerNorm):
        sigma = torch.sqrt(x.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)  # (S, 1)
        centred = parts - parts.mean(dim=-1, keepdim=True)
        return centred / sigma * norm.weight, norm.bias.expand_as(x)
    if isinstance(norm, RMSNorm):
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + norm.eps)
        scale = norm.weight + 1 if norm.offset else norm.weight
        return parts / rms * scale, None
    raise InputError("layer", f"the norm {type(norm).__name__} has no frozen-scale form")


def qk_attribution(run: ModelRun, net: Network, layer: int, head: int, query: int, key: int) -> QKAttribution:
    """Every (query source, key source) term of the score of `head` in `layer` at (query, key); see the module
    docstring. `run` is a pass of one sequence through `net` (without interventions)."""
    cap = net.held(layer).attn.softcap if 0 <= layer < len(net.blocks) else None
    if cap is not None:
        raise InputError(
            "layer",
            f"layer {layer} softcaps its scores ({cap:g} tanh(q . k / {cap:g}), as Gemma-2 does), so a score is not "
            "the sum of the q . k terms of its sources: QK attribution needs a layer whose scores are the plain "
            "scaled q . k",
        )
    why = post_norm_reason(net)
    if why is not None:
        raise InputError("model", why)
    if run.batch_tokens is not None or run.source_tokens is not None:
        raise InputError("texts", "QK attribution reads one sequence's own residual stream")
    if not 0 <= layer < len(run.layers):
        raise InputError("layer", f"got layer {layer}: the model has layers 0..{len(run.layers) - 1}")
    trace, block = run.layers[layer], net.blocks[layer]
    w, a = trace.weights, trace.attn
    n_heads, s = a.weights.shape[1], a.weights.shape[2]
    if not 0 <= head < n_heads:
        raise InputError("head", f"got head {head}: layer {layer} has heads 0..{n_heads - 1}")
    for name, p in (("query", query), ("key", key)):
        if not 0 <= p < s:
            raise InputError(name, f"got position {p}: the sequence has {s} positions, 0..{s - 1}")
    names, parts = components(run, layer)
    x = trace.resid_in[0]
    gap = float((parts.sum(dim=0) - x).abs().max())
    if gap > 1e-3 * max(1.0, float(x.abs().max())):
        raise InputError("model", f"the residual stream is not the sum of its components here (off by {gap:.3g})")
    normed, norm_bias = frozen_norm(block.ln_pre, x, parts)
    sources_q, sources_k = list(names), list(names)
    q_in, k_in = normed[:, query], normed[:, key]  # (C, D)
    if norm_bias is not None:
        sources_q.append("norm bias")
        sources_k.append("norm bias")
        q_in = torch.cat([q_in, norm_bias[query][None]])
        k_in = torch.cat([k_in, norm_bias[key][None]])
    g = head // (n_heads // w.n_kv_heads)
    qv, kv = q_in @ w.W_Q[head], k_in @ w.W_K[g]  # (C', d_head)
    if w.b_Q is not None:
        sources_q.append("query bias")
        qv = torch.cat([qv, w.b_Q[head][None]])
    if w.b_K is not None:
        sources_k.append("key bias")
        kv = torch.cat([kv, w.b_K[g][None]])
    qv = frozen_qk_norm(qv, w.q_norm, w.qk_norm_over, a.q_projected, head, query)
    kv = frozen_qk_norm(kv, w.k_norm, w.qk_norm_over, a.k_projected, g, key)
    if w.rotary is not None:
        cos, sin = w.rotary.cos_sin(s, 0, qv.device, qv.dtype)
        qv = rotate_at(qv, cos[query], sin[query], w.rotary.rot_dim)
        kv = rotate_at(kv, cos[key], sin[key], w.rotary.rot_dim)
    table = (qv @ kv.T) * a.scale_factor  # (C'q, C'k)
    flat = table.flatten()
    order = flat.abs().argsort(descending=True).tolist()
    terms = [Term(sources_q[i // table.shape[1]], sources_k[i % table.shape[1]], float(flat[i])) for i in order]
    eligible = a.eligible if a.eligible.dim() == 2 else a.eligible[0]
    return QKAttribution(
        layer=layer,
        head=head,
        query=query,
        key=key,
        score=float(a.scores[0, head, query, key]),
        total=float(table.double().sum()),
        eligible=bool(eligible[query, key]),
        sources=names,
        terms=terms,
    )


def rotate_at(v: Tensor, cos: Tensor, sin: Tensor, r: int) -> Tensor:
    """(C, d_head) vectors all at one position, rotated as engine/rotary.py rotates that position."""
    half = r // 2
    head = v[:, :r]
    turned = head * cos + torch.cat((-head[:, half:], head[:, :half]), dim=-1) * sin
    return turned if r == v.shape[-1] else torch.cat((turned, v[:, r:]), dim=-1)
