"""Multi-head self-attention, step by step, the way the maths writes it.

    Q = X W_Q + b_Q          per head h: (S, d_head)
    K = X W_K + b_K          per K/V group g: (S, d_head)
    V = X W_V + b_V          per K/V group g: (S, d_v)
    Q, K = N_Q(Q), N_K(K)    q/k norms, in layers that have them (engine/norms.py), over one of two spans:
                               per head        q_h = RMSNorm(q_h) with one weight (d_head,) for every head
                                               (Qwen3, Gemma-3; Gemma's scales by 1 + w)
                               per projection  [q_1 | ... | q_H] = RMSNorm([q_1 | ... | q_H]) over H * d_head,
                                               weight (H * d_head,); K over G * d_head (OLMo-2)
    Q, K = R(Q), R(K)        rotary position embeddings, in layers that have them (engine/rotary.py)
    scores  = Q K^T / sqrt(d_head)          (scaling switchable; a layer may declare another factor)
    scores  = c tanh(scores / c)            in a layer that declares a softcap c (Gemma-2): engine/softcap.py
    weights = softmax over keys of scores, with ineligible keys removed   (engine/softmax.py)
              in a layer with learned sink logits z (gpt-oss), z_h joins every row of head h:
              [weights_q, sink_q] = softmax([scores_q, z_h]), so a row's weights sum to 1 - sink_q
              (a layer with a given `pattern` uses those weights instead, as typed)
    (interventions: edge edits change weights here, head ablations change contexts below)
    context = weights V
    output  = concat_h(context_h) W_O + b_O  (the concatenation itself when there is no W_O)

Grouped K/V: `n_kv_heads` divides `n_heads`, and query head h reads K/V group h // (n_heads / n_kv_heads).
A KV cache holds keys already normed and rotated; new positions are normed alone (a norm reads one position) and
rotate from the cache's length on.
Hook points follow TransformerLens (engine/hooks.py): hook_q / hook_k are the projections before the q/k norm,
attn.q_norm.hook_normalized / attn.k_norm.hook_normalized what the norms make, hook_rot_q / hook_rot_k after rotary.
Every intermediate tensor is returned by name in `AttentionOutput`, so nothing is recomputed to show it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from engine import blockwise, unequal
from engine.blockwise import BlockMask
from engine.errors import InputError
from engine.finite import cannot_overflow, is_finite, refuse_first_non_finite, require_finite
from engine.interventions import SOFTMAX_BUGS, LayerInterventions, ablate_contexts, edit_weights, shift_values
from engine.norms import Norm
from engine.softcap import softcap_
from engine.softmax import buggy_softmax, check_policy, masked_softmax, sink_softmax, softmax_contexts
from engine.weights import AttentionWeights, QKNormOver

AllMaskedPolicy = Literal["error", "zero"]


@dataclass(frozen=True)
class AttentionOutput:
    """Every named step of one attention layer. B = batch, S = positions."""

    q: Tensor  # (B, H, S, d_head) what the scores read: after rotary, where the layer has it
    k: Tensor  # (B, G, S_k, d_head) likewise; S_k = S unless keys come from a source or a cache
    v: Tensor  # (B, G, S_k, d_v)
    scores: Tensor  # (B, H, S, S_k) scaled Q K^T for every cell (softcapped where the layer caps), before masking
    eligible: Tensor  # (S, S_k) or (B, S, S_k), True = the query may attend to the key
    weights: Tensor  # (B, H, S, S_k) after mask and softmax; exactly 0 on ineligible keys
    contexts: Tensor  # (B, H, S, d_v)
    concat: Tensor  # (B, S, H * d_v)
    output: Tensor  # (B, S, d_out)
    scale_factor: float  # what Q K^T was multiplied by
    q_pre_rotary: Tensor | None = None  # (B, H, S, d_head) queries before rotary (after any q norm); None without it
    k_pre_rotary: Tensor | None = None  # (B, G, S, d_head) this pass's keys before rotary (not the cache's)
    lse: Tensor | None = None  # (B, H, S) each row's log-sum-exp, in a long run (whose scores and weights are empty)
    q_projected: Tensor | None = None  # (B, H, S, d_head) queries as projected, before the q norm; None without one
    k_projected: Tensor | None = None  # (B, G, S, d_head) this pass's keys before the k norm; None without one
    sink_weight: Tensor | None = None  # (B, H, S) the weight each row gave the head's learned sink; None without


def from_concatenated(
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    w_o: Tensor | None,
    n_heads: int,
    n_kv_heads: int | None = None,
    d_model: int | None = None,
    head_widths: tuple[int, ...] | None = None,
) -> AttentionWeights:
    """Split D x (heads * width) matrices into per-head weights, checking every shape.

    w_q: (D, H * d_head), w_k: (D, G * d_head), w_v: (D, G * d_v), w_o: (H * d_v, d_out). `d_model`, the width
    of the input when the caller knows it, decides which matrix has the wrong number of rows.
    """
    g = n_heads if n_kv_heads is None else n_kv_heads
    if n_heads < 1:
        raise InputError("heads", f"got {n_heads} heads: need at least 1")
    if g < 1 or n_heads % g:
        raise InputError("kv_heads", f"got {g} K/V heads for {n_heads} heads: heads must divide by kv_heads")
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        if w.dim() != 2:
            raise InputError(f"weights.{name}", f"must be a matrix, got {w.dim()} dimensions")
    rows = {w_q.shape[0], w_k.shape[0], w_v.shape[0]}
    if d_model is not None and len(rows) == 1 and d_model not in rows:
        raise InputError("x", f"has width {d_model} but the weights expect d_model = {rows.pop()} (their rows)")
    if d_model is not None:  # the weights disagree: name the one that does not fit x
        for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
            if w.shape[0] != d_model:
                raise InputError(
                    f"weights.{name}", f"has {w.shape[0]} rows but x has width {d_model}: it needs D = {d_model} rows"
                )
    d_model = w_q.shape[0]
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape[0] != d_model:
            raise InputError(
                f"weights.{name}", f"has {w.shape[0]} rows but w_q has {d_model}: all must have D = d_model rows"
            )
    if head_widths is not None:  # heads of unequal widths, d_head^h each
        return unequal.split(w_q, w_k, w_v, w_o, n_heads, n_kv_heads, head_widths)
    if w_q.shape[1] % n_heads:
        raise InputError("weights.w_q", f"got {w_q.shape[1]} columns for {n_heads} heads: columns must divide by heads")
    d_head = w_q.shape[1] // n_heads
    if w_k.shape[1] != g * d_head:
        raise InputError(
            "weights.w_k",
            f"got {w_k.shape[1]} columns: need kv_heads x d_head = {g} x {d_head} = {g * d_head} to match w_q",
        )
    if w_v.shape[1] % g:
        raise InputError("weights.w_v", f"got {w_v.shape[1]} columns for {g} K/V heads: must divide by kv_heads")
    d_v = w_v.shape[1] // g
    W_O = None
    if w_o is not None:
        if w_o.dim() != 2 or w_o.shape[0] != n_heads * d_v:
            raise InputError(
                "weights.w_o",
                f"got shape {tuple(w_o.shape)}: need (heads x d_v, d_out) = ({n_heads * d_v}, d_out)",
            )
        W_O = w_o.reshape(n_heads, d_v, w_o.shape[1])
    # Views, not copies: W_Q[h] is columns h * d_head ... of w_q, so AttentionWeights.linear("W_Q") is w_q itself
    # (transposed) and `project` multiplies by it in one product, as a BERT or GPT layer does.
    return AttentionWeights(
        W_Q=w_q.reshape(d_model, n_heads, d_head).permute(1, 0, 2),
        W_K=w_k.reshape(d_model, g, d_head).permute(1, 0, 2),
        W_V=w_v.reshape(d_model, g, d_v).permute(1, 0, 2),
        W_O=W_O,
    )


def project(x: Tensor, w: AttentionWeights, source: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """x (B, S, D) -> Q (B, H, S, d_head); source (B, S_k, D), x itself unless given -> K (B, G, S_k, d_head),
    V (B, G, S_k, d_v)."""
    kv_in = x if source is None else source
    return (
        per_head_product(x, w.linear("W_Q"), w.flat_bias("b_Q"), w.n_heads),
        per_head_product(kv_in, w.linear("W_K"), w.flat_bias("b_K"), w.n_kv_heads),
        per_head_product(kv_in, w.linear("W_V"), w.flat_bias("b_V"), w.n_kv_heads),
    )


def per_head_product(x: Tensor, M: Tensor, b: Tensor | None, n: int) -> Tensor:
    """x (B, S, D) times M (n * e, D), every head's W in F.linear's form, plus b (n * e) -> (B, n, S, e).

    All heads in one matrix product with the bias added inside it, as a BERT or GPT layer computes it, returned
    as a (B, n, S, e) view of the (B, S, n * e) result.
    """
    y = F.linear(x, M, b)
    return y.view(*y.shape[:-1], n, -1).transpose(1, 2)


def normalise_qk(q: Tensor, k: Tensor, w: AttentionWeights) -> tuple[Tensor, Tensor]:
    """Q (B, H, S, d_head) and K (B, G, S_k, d_head) through the layer's q and k norms, each left as it is where
    the layer has none: over each head's d_head vector, or over each position's whole projection."""
    return norm_heads(q, w.q_norm, w.qk_norm_over), norm_heads(k, w.k_norm, w.qk_norm_over)


def norm_heads(t: Tensor, norm: Norm | None, over: QKNormOver) -> Tensor:
    """(B, n, S, e) through `norm` over each head's e dims ("head"), or over the n * e of a position ("projection",
    the (B, S, n * e) projection as the layer made it, split into heads again after)."""
    if norm is None:
        return t
    if over == "head":
        return norm(t)
    b, n, s, e = t.shape
    whole = norm(t.transpose(1, 2).reshape(b, s, n * e))  # (B, S, n * e)
    return whole.view(b, s, n, e).transpose(1, 2)


def expand_groups(t: Tensor, n_heads: int) -> Tensor:
    """(B, G, S, e) -> (B, H, S, e): each K/V group serves n_heads / G consecutive query heads."""
    groups = t.shape[1]
    assert n_heads % groups == 0, (n_heads, groups)
    return t if groups == n_heads else t.repeat_interleave(n_heads // groups, dim=1)


def scale_factor(d_head: int, scale: bool) -> float:
    return 1.0 / math.sqrt(d_head) if scale else 1.0


def attention_scores(q: Tensor, k: Tensor, factor: float, out: Tensor | None = None) -> Tensor:
    """(B, H, S, d) x (B, H, S_k, d) -> (B, H, S, S_k): every query against every key, times `factor`.

    The factor is applied inside the batched product (its alpha), so the S x S_k result is written once, into
    `out` (contiguous, (B, H, S, S_k)) when given.
    """
    *batch, s, d = q.shape
    s_k = k.shape[-2]
    into = q.new_empty(()).expand(q.shape[:-2].numel(), s, s_k) if out is None else out.view(-1, s, s_k)
    scores = torch.baddbmm(  # beta = 0: the input is not read
        into,
        q.reshape(-1, s, d),
        k.reshape(-1, s_k, d).transpose(1, 2),
        beta=0.0,
        alpha=factor,
        **({} if out is None else {"out": into}),
    )
    return scores.view(*batch, s, s_k) if out is None else out


def merge_heads(contexts: Tensor, w: AttentionWeights) -> tuple[Tensor, Tensor]:
    """contexts (B, H, S, d_v) -> concat (B, S, H * d_v) and output (B, S, d_out)."""
    b, h, s, d_v = contexts.shape
    concat = contexts.transpose(1, 2).reshape(b, s, h * d_v)
    if w.W_O is None:
        output = concat if w.b_O is None else concat + w.b_O
    else:
        output = F.linear(concat, w.linear("W_O"), w.b_O)  # padded contexts x padded W_O: exact for unequal heads
    if w.value_widths is not None:  # unequal heads: the concatenation of each head's real columns
        concat = unequal.concatenation(contexts, w.value_widths)
        output = concat if w.W_O is None else output
    return concat, output


def standardise_over_positions(x: Tensor, eps: float = 1e-5) -> Tensor:
    """The classic bug norm_over_sequence: (B, S, D) with each feature standardised over the S positions (the
    batch-norm axis, where a layer norm standardises over the D features). Position i then depends on every
    position, the ones after it included, through the mean and the spread."""
    mean = x.mean(dim=-2, keepdim=True)
    spread = x.var(dim=-2, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(spread + eps)


def attention(
    x: Tensor,
    w: AttentionWeights,
    eligible: Tensor | BlockMask | None = None,
    *,
    scale: bool = True,
    all_masked: AllMaskedPolicy = "error",
    interventions: LayerInterventions | None = None,
    source: Tensor | None = None,
    past: tuple[Tensor, Tensor] | None = None,
) -> AttentionOutput:
    """One multi-head attention layer on x of shape (S, D) or (B, S, D), with this layer's interventions.

    source (S_k, D) or (B, S_k, D): keys and values come from it instead of x (cross-attention).
    past (K, V) of shapes (B, G, S_past, d_head), (B, G, S_past, d_v): a KV cache; the new keys and values are
    appended after it, so `AttentionOutput.k` and `.v` are the cache after this step. eligible is (S_q, S_k) or
    (B, S_q, S_k), S_k counting the cached keys.
    """
    x = x[None] if x.dim() == 2 else x
    if source is not None and source.dim() == 2:
        source = source[None]
    for name, t in (("x", x), ("source.x", source)):
        if t is not None and t.shape[-1] != w.d_model:
            raise InputError(name, f"has width {t.shape[-1]} but the weights expect d_model = {w.d_model}")

    bug = interventions.bug if interventions is not None else None
    if bug == "norm_over_sequence":
        x = standardise_over_positions(x)
    q, k, v = project(x, w, source)
    if interventions is not None and interventions.value:
        v = shift_values(v, interventions.value)  # only the new positions' values (a cache's are the past's)
    steps = [(q, "Q", "weights.w_q"), (k, "K", "weights.w_k"), (v, "V", "weights.w_v")]
    q_proj, k_proj = (q, k) if w.q_norm is not None or w.k_norm is not None else (None, None)
    q, k = normalise_qk(q, k, w)  # before rotary, this pass's positions only (a cache's keys are normed)
    q_pre, k_pre = (q, k) if w.rotary is not None else (None, None)
    if w.rotary is not None:  # new positions start where the cache ends
        offset = 0 if past is None else past[0].shape[2]
        q, k = w.rotary(q, offset), w.rotary(k, offset)
    if interventions is not None:  # an ablation can replace every context that V fed: look at V itself
        require_finite(v, "V", "weights.w_v")
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    if isinstance(eligible, BlockMask):  # a long run (engine/blockwise.py): no S x S tensor, the normalisers kept
        factor = w.scale if scale and w.scale is not None else scale_factor(w.d_head, scale)
        contexts, lse = blockwise.attend(q, k, v, eligible, factor, all_masked, w.softcap, w.sinks)
        concat, output = merge_heads(contexts, w)
        none = q.new_empty(0)
        return AttentionOutput(
            q, k, v, none, none.bool(), none, contexts, concat, output, factor, q_pre, k_pre, lse, q_proj, k_proj
        )
    if eligible is None:
        eligible = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=x.device)
    every_row_keyed = check_policy(~eligible if bug == "flipped_mask" else eligible, all_masked)
    factor = w.scale if scale and w.scale is not None else scale_factor(w.d_head, scale)  # a declared factor
    per_head = unequal.head_factors(w, scale, q)  # unequal heads: each its own 1 / sqrt(d_head^h)
    k_per_head = expand_groups(k, w.n_heads)
    bounded = cannot_overflow(q, k_per_head, factor if per_head is None else float(per_head.max()))
    # Scores and weights in one block (2, B, H, S, S_k): glibc then keeps it in its heap from call to call, where
    # two blocks of half the size went back to the system and were faulted in again, page by page, on every call.
    # Not where the weights are made elsewhere: a classic bug, half precision (float32 first), edge edits (a copy).
    edits = interventions.edits if interventions is not None else ()
    patch = interventions.patch if interventions is not None else None
    in_one = bug not in SOFTMAX_BUGS and not edits and patch is None and q.dtype not in (torch.float16, torch.bfloat16)
    in_one = in_one and w.pattern is None and w.sinks is None
    both = q.new_empty((2 if in_one else 1, *q.shape[:-1], k_per_head.shape[-2]))
    scores = attention_scores(q, k_per_head, factor if per_head is None else 1.0, out=both[0])
    if per_head is not None:
        factor = scale_factor(w.head_widths[0], scale) if w.head_widths else factor  # head 0's, for the config
        scores.mul_(per_head.view(1, -1, 1, 1))
    if w.softcap is not None:  # bounded to (-c, c) after the scale, before any mask: what the softmax reads
        softcap_(scores, w.softcap)
    steps.append((scores, "scores", "x"))
    if not bounded and not is_finite(scores):
        refuse_first_non_finite(steps)
    sink_weight = None
    if in_one:
        weights, contexts = softmax_contexts(
            scores, eligible, expand_groups(v, w.n_heads), both[1], every_row_keyed=every_row_keyed
        )
    else:
        if bug is not None and bug in SOFTMAX_BUGS:
            weights = buggy_softmax(scores, eligible, bug)
        elif w.sinks is not None:
            weights, sink_weight = sink_softmax(scores, eligible, w.sinks)
        else:
            weights = masked_softmax(scores, eligible, every_row_keyed=every_row_keyed)
        if w.pattern is not None:  # a layer whose weights are given: they replace the softmax's, as typed
            weights = w.pattern.to(weights.dtype).expand_as(weights).contiguous()
        if interventions is not None:
            weights = edit_weights(weights, eligible, interventions.edits)
        if patch is not None and interventions is not None and patch.hook == "pattern":
            weights = patch.apply("pattern", interventions.layer, weights)
        contexts = weights @ expand_groups(v, w.n_heads)
    if interventions is not None:
        contexts = ablate_contexts(contexts, eligible, interventions.ablations)
        if patch is not None and patch.hook == "z":
            contexts = patch.apply("z", interventions.layer, contexts)
    concat, output = merge_heads(contexts, w)
    steps.append((output, "output", "weights.w_o" if w.W_O is not None else "weights.w_v"))
    if not is_finite(output):
        refuse_first_non_finite(steps)
    return AttentionOutput(
        q,
        k,
        v,
        scores,
        eligible,
        weights,
        contexts,
        concat,
        output,
        factor,
        q_pre,
        k_pre,
        None,
        q_proj,
        k_proj,
        sink_weight,
    )
