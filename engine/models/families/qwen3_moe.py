"""Qwen3-MoE (model_type qwen3_moe), shaped on Qwen3-30B-A3B: Qwen3's decoder (engine/models/families/qwen3.py)
whose feed-forward is a mixture of experts with top-k routing (engine/feedforward.py MixtureOfExperts).

    per layer: a = x + Attention(input_layernorm(x)); x' = a + MoE(post_attention_layernorm(a))
    Attention: Qwen3's, q and k RMSNorm-ed per head before rotary
    MoE(u)   = sum over the num_experts_per_tok experts e of largest p = softmax(u gate^T) of p_e GLU_e(u),
               p renormalised over those experts where norm_topk_prob; GLU_e = experts.e.down_proj(silu(
               experts.e.gate_proj(u)) * experts.e.up_proj(u)), of width moe_intermediate_size
    logits = norm(x) W_U,   W_U = lm_head (Qwen3-30B-A3B does not tie), embed_tokens^T where tie_word_embeddings

A layer listed in mlp_only_layers, or off the decoder_sparse_step, runs a dense GLU of width intermediate_size
instead (Qwen3-30B-A3B has none). Which experts each position used, and their weights, are part of every run:
blocks.{l}.mlp.hook_expert_indices and hook_expert_weights (engine/hooks.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from engine.feedforward import MLP, Activation, GatedFeedForward, MixtureOfExperts
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
    activation,
    flag,
    linear_T,
    llama,
    need,
    number,
    qwen3,
    refuse,
    rotary,
)
from engine.norms import RMSNorm


def sizes(config: Config) -> Sizes:
    s = qwen3.sizes(config)
    experts, top = n_experts(config), need(config, "num_experts_per_tok")
    if top > experts:
        raise refuse("num_experts_per_tok", f"got {top} for {experts} experts: at most num_experts")
    for i in dense_layers(config, s.n_layers):
        if not 0 <= i < s.n_layers:
            raise refuse("mlp_only_layers", f"got layer {i}: the model has layers 0..{s.n_layers - 1}")
    return s


def n_experts(config: Config) -> int:
    """num_experts, as Qwen3-30B-A3B's config.json says it; transformers 5 writes num_local_experts."""
    return int(need(config, "num_local_experts" if config.get("num_experts") is None else "num_experts"))


def dense_layers(config: Config, n_layers: int) -> set[int]:
    """The layers whose feed-forward is one dense GLU: mlp_only_layers, and those off the decoder_sparse_step."""
    listed = config.get("mlp_only_layers") or []
    if not isinstance(listed, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
        raise refuse("mlp_only_layers", f"got {listed!r}: need a list of layer numbers")
    step = need(config, "decoder_sparse_step") if config.get("decoder_sparse_step") is not None else 1
    return set(listed) | {i for i in range(n_layers) if (i + 1) % step}


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, dh = s.d_model, s.d_head
    e, m = n_experts(config), need(config, "moe_intermediate_size")
    bias = flag(config, "attention_bias", False)
    dense = dense_layers(config, s.n_layers)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p, a = f"layers.{i}", f"layers.{i}.self_attn"
        out |= {f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,)}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{a}.{name}_proj.weight"] = (r, d)
            if bias:
                out[f"{a}.{name}_proj.bias"] = (r,)
        out |= {f"{a}.o_proj.weight": (d, s.n_heads * dh), f"{a}.q_norm.weight": (dh,), f"{a}.k_norm.weight": (dh,)}
        if bias:
            out[f"{a}.o_proj.bias"] = (d,)
        if i in dense:
            w = need(config, "intermediate_size")
            out |= {f"{p}.mlp.{n}.weight": (w, d) for n in ("gate_proj", "up_proj")}
            out[f"{p}.mlp.down_proj.weight"] = (d, w)
            continue
        out[f"{p}.mlp.gate.weight"] = (e, d)
        for j in range(e):
            out |= {f"{p}.mlp.experts.{j}.{n}.weight": (m, d) for n in ("gate_proj", "up_proj")}
            out[f"{p}.mlp.experts.{j}.down_proj.weight"] = (d, m)
    out["norm.weight"] = (d,)
    if not llama.tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def experts(config: Config, t: Mapping[str, Tensor], i: int, act: Activation) -> MixtureOfExperts:
    """Layer i's router and experts, each expert's (out, in) matrices stacked as (E, in, out)."""
    p, e = f"layers.{i}.mlp", n_experts(config)

    def stacked(name: str) -> Tensor:
        return torch.stack([linear_T(t[f"{p}.experts.{j}.{name}.weight"]) for j in range(e)])

    return MixtureOfExperts(
        W_router=linear_T(t[f"{p}.gate.weight"]),
        W_gate=stacked("gate_proj"),
        W_in=stacked("up_proj"),
        W_out=stacked("down_proj"),
        top_k=need(config, "num_experts_per_tok"),
        norm_topk=flag(config, "norm_topk_prob", False),
        act=act,
    )


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, eps = f"layers.{i}", number(config, "rms_norm_eps", 1e-6)
    mlp: MLP
    if i in dense_layers(config, s.n_layers):
        W_gate, W_in, W_out = (linear_T(t[f"{p}.mlp.{n}.weight"]) for n in ("gate_proj", "up_proj", "down_proj"))
        mlp = GatedFeedForward(W_gate=W_gate, W_in=W_in, W_out=W_out, act=act)
    else:
        mlp = experts(config, t, i, act)
    return Block(
        attn=qwen3.attention(config, t, i, s),
        ln_pre=RMSNorm(t[f"{p}.input_layernorm.weight"], eps),
        ln_pre_mlp=RMSNorm(t[f"{p}.post_attention_layernorm.weight"], eps),
        mlp=mlp,
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    W_U = t["embed_tokens.weight"] if llama.tied(config) else t["lm_head.weight"]
    net = Network(
        tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
        Unembed(RMSNorm(t["norm.weight"], number(config, "rms_norm_eps", 1e-6)), linear_T(W_U)),
    )
    rot = rotary(config, s.d_head)
    e, k = n_experts(config), need(config, "num_experts_per_tok")
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=net,
        architecture=(
            f"Qwen3-MoE pre-norm decoder: a = x + Attention(RMSNorm(x)); x' = a + MoE(RMSNorm(a)), the top {k} of "
            f"{e} {act}-gated experts per position; {s.n_heads} heads over {s.n_kv_heads} K/V groups of width "
            f"{s.d_head}, queries and keys RMSNorm-ed per head before rotary on {rot.rot_dim} dims (theta "
            f"{rot.theta:g}); logits = RMSNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("qwen3_moe",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
