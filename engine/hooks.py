"""A forward pass's intermediates by TransformerLens's hook names, with TransformerLens's meanings and shapes, so a
person who knows its ActivationCache reads attnlab's without a dictionary. B = batch, S = positions, S_k = key
positions, H = query heads, G = K/V groups, D = d_model.

    hook_full_embed                  x_0 as layer 0 reads it, after any InputShift      (B, S, D)
    blocks.{l}.hook_resid_pre        what layer l reads                                 (B, S, D)
    blocks.{l}.ln1.hook_normalized   the norm before attention (pre-LN), or after the   (B, S, D)
                                     attention residual (post-LN, BERT's ln1)
    blocks.{l}.attn.hook_q           queries as projected (before any q norm and       (B, S, H, d_head)
                                     before rotary, where the layer has them)
    blocks.{l}.attn.hook_k / hook_v  keys likewise (this pass's positions only when     (B, S_k, G, d_head | d_v)
                                     a q/k norm or rotary meets a KV cache), values
    blocks.{l}.attn.q_norm.hook_normalized,   queries and keys after the q/k norm,      (B, S | S_k, ., d_head)
      k_norm.hook_normalized         before rotary (layers with q/k norms only; per
                                     head or over the projection, the same shape)
    blocks.{l}.attn.hook_rot_q,      queries and keys after rotary, what the scores     (B, S | S_k, ., d_head)
      hook_rot_k                     read (layers with rotary only)
    blocks.{l}.attn.hook_attn_scores scaled Q K^T after the mask (-inf where a key is   (B, H, S, S_k)
                                     masked), before the softmax
    blocks.{l}.attn.hook_pattern     weights after mask, softmax and edge edits         (B, H, S, S_k)
    blocks.{l}.attn.hook_z           contexts after head ablations                      (B, S, H, d_v)
    blocks.{l}.attn.hook_result      each head's output, z_h W_O[h], without b_O        (B, S, H, d_out)
    blocks.{l}.hook_attn_out         what the attention adds to the residual:            (B, S, d_out)
                                     hook_result summed over heads, plus b_O, through
                                     the post-attention norm where the block has one
    blocks.{l}.ln1_post.hook_normalized   that post-attention norm's output (Gemma-2/3,  (B, S, D)
                                     OLMo-2), the same tensor as hook_attn_out there
    blocks.{l}.hook_resid_mid        hook_resid_pre + hook_attn_out (the attention      (B, S, D)
                                     output alone in a block without a residual)
    blocks.{l}.ln2.hook_normalized   the norm before the feed-forward (pre-LN decoders) (B, S, D)
    blocks.{l}.hook_mlp_out          what the feed-forward adds to the residual (models (B, S, D)
                                     with one), through the post-feed-forward norm
                                     where the block has one
    blocks.{l}.ln2_post.hook_normalized   that post-feed-forward norm's output, the     (B, S, D)
                                     same tensor as hook_mlp_out there
    blocks.{l}.mlp.hook_expert_indices   the k experts each position used (a mixture    (B, S, k)
                                     of experts), the most probable first
    blocks.{l}.mlp.hook_expert_weights   their weights in the feed-forward's sum        (B, S, k)
    blocks.{l}.hook_resid_post       after the feed-forward residual                    (B, S, D)
    blocks.{l}.ln2.hook_normalized,  the norm after the feed-forward residual (post-LN: (B, S, D)
    blocks.{l}.hook_normalized_resid_post   what the block passes on)

and attnlab's own, named without `hook_` since TransformerLens has no such hook:

    blocks.{l}.attn.scores_unmasked  scaled Q K^T for every cell, before the mask (what the page draws)
    blocks.{l}.attn.sink_weight      the weight each row gave its head's learned sink   (B, H, S)
                                     logit (gpt-oss; layers with sinks only): hook_pattern's
                                     row sums to 1 minus it
    logits                           next-token logits (models that predict tokens)    (B, S, V)

Most are the pass's own tensors (q, k, v, z as transposed views of them); hook_attn_scores and hook_result are
worked out from them when the cache is read (TransformerLens too makes hook_result only when asked). `stored`
lists what a pass holds, for whoever counts its bytes; `patch_source` is the part of the cache a patch reads.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.attention import AttentionOutput
from engine.forward import ForwardResult
from engine.interventions import PatchHook, hook_name
from engine.weights import AttentionWeights


def masked_scores(a: AttentionOutput) -> Tensor:
    """(B, H, S, S_k): the scores with -inf on every key a query may not attend to, as the softmax reads them."""
    eligible = a.eligible if a.eligible.dim() == 2 else a.eligible[:, None]  # (S, S_k) or (B, 1, S, S_k)
    return a.scores.masked_fill(~eligible, float("-inf"))


def per_head_result(a: AttentionOutput, w: AttentionWeights) -> Tensor:
    """(B, S, H, d_out): head h's context through its rows of W_O; without W_O, the context in head h's slot of
    the concatenation (zeros elsewhere). Summed over heads, plus b_O, it is the attention output."""
    z = a.contexts.transpose(1, 2)  # (B, S, H, d_v)
    if w.W_O is not None:
        return torch.einsum("bshd,hde->bshe", z, w.W_O)
    b, s, h, d_v = z.shape
    out = z.new_zeros(b, s, h, h, d_v)
    out.diagonal(dim1=2, dim2=3).copy_(z.permute(0, 1, 3, 2))  # out[:, :, i, i] = z[:, :, i]
    return out.reshape(b, s, h, h * d_v)


def cache(result: ForwardResult) -> dict[str, Tensor]:
    """Every intermediate of `result` by hook name (the module docstring's table)."""
    out = {"hook_full_embed": result.embed}
    for t in result.layers:
        p, a = f"blocks.{t.index}", t.attn
        out[f"{p}.hook_resid_pre"] = t.resid_in
        normalized = t.attn_in if t.attn_in is not None else t.mlp_in
        if normalized is not None:
            out[f"{p}.ln1.hook_normalized"] = normalized
        q, k = (a.q, a.k) if a.q_pre_rotary is None or a.k_pre_rotary is None else (a.q_pre_rotary, a.k_pre_rotary)
        if a.q_pre_rotary is not None:
            out[f"{p}.attn.hook_rot_q"] = a.q.transpose(1, 2)
            out[f"{p}.attn.hook_rot_k"] = a.k.transpose(1, 2)
        if a.q_projected is not None and a.k_projected is not None:  # TransformerLens's q_norm / k_norm
            out[f"{p}.attn.q_norm.hook_normalized"] = q.transpose(1, 2)
            out[f"{p}.attn.k_norm.hook_normalized"] = k.transpose(1, 2)
            q, k = a.q_projected, a.k_projected
        out.update(
            {
                f"{p}.attn.hook_q": q.transpose(1, 2),
                f"{p}.attn.hook_k": k.transpose(1, 2),
                f"{p}.attn.hook_v": a.v.transpose(1, 2),
                f"{p}.attn.scores_unmasked": a.scores,
                f"{p}.attn.hook_attn_scores": masked_scores(a),
                f"{p}.attn.hook_pattern": a.weights,
                f"{p}.attn.hook_z": a.contexts.transpose(1, 2),
                f"{p}.attn.hook_result": per_head_result(a, t.weights),
                f"{p}.hook_attn_out": a.output if t.attn_post is None else t.attn_post,
                f"{p}.hook_resid_mid": t.resid_mid,
            }
        )
        if a.sink_weight is not None:
            out[f"{p}.attn.sink_weight"] = a.sink_weight
        if t.mlp_norm is not None:
            out[f"{p}.ln2.hook_normalized"] = t.mlp_norm
        if t.attn_post is not None:
            out[f"{p}.ln1_post.hook_normalized"] = t.attn_post
        if t.mlp_out is not None:
            out[f"{p}.hook_mlp_out"] = t.mlp_out if t.mlp_post is None else t.mlp_post
        if t.mlp_post is not None:
            out[f"{p}.ln2_post.hook_normalized"] = t.mlp_post
        if t.routing is not None:
            out[f"{p}.mlp.hook_expert_indices"] = t.routing.experts
            out[f"{p}.mlp.hook_expert_weights"] = t.routing.weights
        out[f"{p}.hook_resid_post"] = t.resid_post if t.resid_post is not None else t.resid_out
        if t.resid_post is not None:
            out[f"{p}.ln2.hook_normalized"] = t.resid_out
            out[f"{p}.hook_normalized_resid_post"] = t.resid_out
    if result.logits is not None:
        out["logits"] = result.logits
    return out


def patch_source(result: ForwardResult, hook: PatchHook) -> dict[str, Tensor]:
    """A clean pass's activations that a patch at `hook` reads, one per layer, by hook name: what
    engine.interventions.Patches takes as `clean` (a layer without that activation, no MLP for mlp_out, has
    none). The same tensors as `cache` holds under those names, without working out the rest."""
    out = {}
    for t in result.layers:
        by_hook = {
            "resid_pre": t.resid_in,
            "attn_out": t.attn.output if t.attn_post is None else t.attn_post,
            "mlp_out": t.mlp_out if t.mlp_post is None else t.mlp_post,
            "z": t.attn.contexts.transpose(1, 2),
            "pattern": t.attn.weights,
        }
        activation = by_hook[hook]
        if activation is not None:
            out[hook_name(hook, t.index)] = activation
    return out


def stored(result: ForwardResult) -> list[Tensor]:
    """The tensors the pass holds (views of one another included; nothing worked out)."""
    held = [result.embed]
    for t in result.layers:
        a = t.attn
        held += [t.resid_in, a.q, a.k, a.v, a.scores, a.weights, a.contexts, a.concat, a.output, t.resid_mid]
        held += [x for x in (a.q_pre_rotary, a.k_pre_rotary, a.q_projected, a.k_projected) if x is not None]
        held += [] if a.sink_weight is None else [a.sink_weight]
        held += [x for x in (t.attn_in, t.mlp_in, t.mlp_norm, t.mlp_out, t.resid_post) if x is not None]
        held += [x for x in (t.attn_post, t.mlp_post) if x is not None]
        held += [] if t.routing is None else [t.routing.experts, t.routing.weights]
        held.append(t.resid_out)
    if result.logits is not None:
        held.append(result.logits)
    return held
