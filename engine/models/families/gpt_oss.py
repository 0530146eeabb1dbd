"""gpt-oss (model_type gpt_oss), shaped on gpt-oss-20b: a pre-RMSNorm decoder whose layers alternate a sliding
window and global attention, each head with a learned sink logit, and whose feed-forward is a mixture of experts.

    per layer l, of kind layer_types[l] ("sliding_attention": local, its own window; "full_attention": global):
        a  = x + Attention_l(input_layernorm(x))
        x' = a + MoE(post_attention_layernorm(a))
    Attention_l: q, k, v, o with biases (attention_bias), grouped K/V, yarn rotary, scores q . k / sqrt(head_dim);
                 [weights_q, sink_q] = softmax([scores_q, sinks_h]): one learned logit per head joins every row
                 and takes weight, with no value (engine/softmax.py sink_softmax)
                 a local layer sees keys with q - k < sliding_window (and the request's masks)
    MoE(u) = sum over the num_experts_per_tok experts e of largest router logit u router.weight^T + router.bias,
             weighted by the softmax over those logits, of GLU_e(u) = down_e(clamped_glu(gate_e(u), up_e(u))),
             gate and up interleaved in experts.gate_up_proj (gate the even columns, up the odd), with biases;
             clamped_glu(g, u) = min(g, limit) sigmoid(alpha min(g, limit)) (clamp(u, -limit, limit) + 1)
             (engine/feedforward.py, alpha = swiglu_alpha, limit = swiglu_limit)
    logits = norm(x) W_U,   W_U = lm_head (gpt-oss does not tie), embed_tokens^T where tie_word_embeddings

Each row's sink weight is part of every run (AttentionOutput.sink_weight, blocks.{l}.attn.sink_weight), and the
experts each position used too (blocks.{l}.mlp.hook_expert_indices, hook_expert_weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.feedforward import CLAMPED_SWIGLU, MixtureOfExperts
from engine.forward import Block, Network, Unembed
from engine.masks import MaskSpec
from engine.models.families import (
    ROTARY_BREAKS,
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    Sizes,
    flag,
    gemma2,
    linear_T,
    llama,
    need,
    number,
    refuse,
    rotary,
)
from engine.norms import RMSNorm

LOCAL, GLOBAL = gemma2.LOCAL, gemma2.GLOBAL


def sizes(config: Config) -> Sizes:
    s = llama.sizes(config)
    experts, top = need(config, "num_local_experts"), need(config, "num_experts_per_tok")
    if not 1 <= top <= experts:
        raise refuse("num_experts_per_tok", f"got {top} for {experts} experts: need 1 to num_local_experts")
    layer_types(config)
    return s


def layer_types(config: Config) -> list[str]:
    """Each layer's kind: config layer_types, else local for even layers and global for odd ones, as transformers
    fills it in."""
    return gemma2.layer_types(config, 2)


def biased(config: Config) -> bool:
    return flag(config, "attention_bias", True)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, dh, e, m = s.d_model, s.d_head, need(config, "num_local_experts"), need(config, "intermediate_size")
    bias = biased(config)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d), "norm.weight": (d,)}
    for i in range(s.n_layers):
        p, a = f"layers.{i}", f"layers.{i}.self_attn"
        out |= {f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,)}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{a}.{name}_proj.weight"] = (r, d)
            if bias:
                out[f"{a}.{name}_proj.bias"] = (r,)
        out[f"{a}.o_proj.weight"] = (d, s.n_heads * dh)
        if bias:
            out[f"{a}.o_proj.bias"] = (d,)
        out[f"{a}.sinks"] = (s.n_heads,)
        out |= {f"{p}.mlp.router.weight": (e, d), f"{p}.mlp.router.bias": (e,)}
        out |= {f"{p}.mlp.experts.gate_up_proj": (e, d, 2 * m), f"{p}.mlp.experts.gate_up_proj_bias": (e, 2 * m)}
        out |= {f"{p}.mlp.experts.down_proj": (e, m, d), f"{p}.mlp.experts.down_proj_bias": (e, d)}
    if not flag(config, "tie_word_embeddings", False):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def experts(config: Config, t: Mapping[str, Tensor], i: int) -> MixtureOfExperts:
    """Layer i's router and experts: gate_up_proj (E, D, 2 d_mlp) split into its gate (even) and up (odd) columns,
    as views of the stored tensor."""
    p = f"layers.{i}.mlp"
    gate_up, gate_up_bias = t[f"{p}.experts.gate_up_proj"], t[f"{p}.experts.gate_up_proj_bias"]
    return MixtureOfExperts(
        W_router=linear_T(t[f"{p}.router.weight"]),
        W_gate=gate_up[..., ::2],
        W_in=gate_up[..., 1::2],
        W_out=t[f"{p}.experts.down_proj"],
        top_k=need(config, "num_experts_per_tok"),
        norm_topk=True,  # the softmax over the top k logits alone
        act=CLAMPED_SWIGLU,
        b_router=t[f"{p}.router.bias"],
        b_gate=gate_up_bias[..., ::2],
        b_in=gate_up_bias[..., 1::2],
        b_out=t[f"{p}.experts.down_proj_bias"],
        alpha=number(config, "swiglu_alpha", 1.702),
        limit=number(config, "swiglu_limit", 7.0),
    )


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, own_window: int | None) -> Block:
    p, eps = f"layers.{i}", number(config, "rms_norm_eps", 1e-5)
    a = f"{p}.self_attn"
    # q, k, v, o as LLaMA's, with their biases where attention_bias (gpt-oss's default: true), and rotary
    w = llama.attention({**config, "model_type": "llama", "attention_bias": biased(config)}, t, i, s)
    return Block(
        attn=replace(w, sinks=t[f"{a}.sinks"]),
        ln_pre=RMSNorm(t[f"{p}.input_layernorm.weight"], eps),
        ln_pre_mlp=RMSNorm(t[f"{p}.post_attention_layernorm.weight"], eps),
        mlp=experts(config, t, i),
        window=own_window,
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    kinds = layer_types(config)
    own = gemma2.window(config, kinds)
    blocks = tuple(block(config, t, i, s, own if k == LOCAL else None) for i, k in enumerate(kinds))
    tied = flag(config, "tie_word_embeddings", False)
    W_U = t["embed_tokens.weight"] if tied else t["lm_head.weight"]
    net = Network(blocks, Unembed(RMSNorm(t["norm.weight"], number(config, "rms_norm_eps", 1e-5)), linear_T(W_U)))
    rot = rotary(config, s.d_head)
    e, k = need(config, "num_local_experts"), need(config, "num_experts_per_tok")
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=net,
        architecture=(
            "gpt-oss pre-norm decoder: a = x + Attention(RMSNorm(x)); x' = a + MoE(RMSNorm(a)), the top "
            f"{k} of {e} experts per position, each gated by a clamped SwiGLU; {s.n_heads} heads over "
            f"{s.n_kv_heads} K/V groups of width {s.d_head}, each head with a learned sink logit in its softmax, "
            f"rotary on {rot.rot_dim} dims (theta {rot.theta:g}"
            + (f", {type(rot.scaling).__name__.lower()} scaling" if rot.scaling is not None else "")
            + f"); layers: {gemma2.kinds_in_words(blocks)}; logits = RMSNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("gpt_oss",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
