"""Qwen3 (model_type qwen3), shaped on Qwen3-0.6B: LLaMA's pre-RMSNorm decoder (engine/models/families/llama.py)
with an RMSNorm on each head's queries and keys before rotary.

    x_0 = embed_tokens[id]
    per layer: a = x + Attention(input_layernorm(x)); x' = a + GLU(post_attention_layernorm(a))
    Attention: q_h = q_norm(x W_Q^h + b_Q^h), k_g = k_norm(x W_K^g + b_K^g), each an RMSNorm over the head's
               head_dim with one weight (head_dim,) for every head; then rotary, grouped K/V, 1 / sqrt(head_dim)
    GLU(u) = down_proj(silu(gate_proj(u)) * up_proj(u))
    logits = norm(x) W_U,   W_U = embed_tokens^T where tie_word_embeddings (Qwen3-0.6B ties), else lm_head

head_dim is the config's and need not be hidden_size / heads (Qwen3-0.6B: 16 heads of 128 over a width of 1024).
Biases on q, k, v and o where attention_bias (Qwen3's are off), none in the MLP. use_sliding_window slides a window
only in the layers from max_window_layers on, which one mask for every layer cannot say, so it is refused, as for
qwen2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import AttentionWeights
from engine.feedforward import Activation
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
    linear_T,
    llama,
    number,
    refuse,
    rotary,
)
from engine.norms import RMSNorm


def sizes(config: Config) -> Sizes:
    if config.get("use_sliding_window"):
        raise refuse(
            "use_sliding_window",
            "true: qwen3 slides its window only in the layers from max_window_layers on, and attnlab's masks are "
            "one for every layer; set it false to run every layer without the window",
        )
    return llama.sizes(config)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    norms = {f"layers.{i}.self_attn.{n}.weight": (s.d_head,) for i in range(s.n_layers) for n in ("q_norm", "k_norm")}
    return llama.shapes(config) | norms


def attention(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes) -> AttentionWeights:
    """LLaMA's attention (engine/models/families/llama.py) with Qwen3's q and k norms."""
    return qk_normed(config, t, i, llama.attention(config, t, i, s))


def qk_normed(config: Config, t: Mapping[str, Tensor], i: int, w: AttentionWeights) -> AttentionWeights:
    """w with layer i's q_norm and k_norm, each over a head's head_dim (AttentionWeights.qk_norm_over "head")."""
    eps, a = number(config, "rms_norm_eps", 1e-6), f"layers.{i}.self_attn"
    q_norm, k_norm = RMSNorm(t[f"{a}.q_norm.weight"], eps), RMSNorm(t[f"{a}.k_norm.weight"], eps)
    return replace(w, q_norm=q_norm, k_norm=k_norm, qk_norm_over="head")


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    """LLaMA's block, its attention with Qwen3's q and k norms."""
    base = llama.block(config, t, i, s, act)
    return replace(base, attn=qk_normed(config, t, i, base.attn))


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    tied = llama.tied(config)
    W_U = t["embed_tokens.weight"] if tied else t["lm_head.weight"]
    net = Network(
        tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
        Unembed(RMSNorm(t["norm.weight"], number(config, "rms_norm_eps", 1e-6)), linear_T(W_U)),
    )
    rot = rotary(config, s.d_head)
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"]),
        network=net,
        architecture=(
            f"Qwen3 pre-norm decoder: a = x + Attention(RMSNorm(x)); x' = a + GLU(RMSNorm(a)), {act} gate; "
            f"{s.n_heads} heads over {s.n_kv_heads} K/V groups of width {s.d_head}, queries and keys each "
            f"RMSNorm-ed per head before rotary on {rot.rot_dim} dims (theta {rot.theta:g}); logits = RMSNorm(x) W_U"
            f"{' (tied)' if tied else ''}; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("qwen3",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
