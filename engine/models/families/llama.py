"""LLaMA and its close kin (model_types llama, mistral, qwen2, gemma): pre-RMSNorm decoders with rotary, grouped
K/V and a gated feed-forward, as Hugging Face lays them out.

    x_0 = embed_tokens[id]                       (Gemma: times sqrt(hidden_size), rounded to the model's dtype)
    per layer: a = x + Attention(input_layernorm(x)); x' = a + GLU(post_attention_layernorm(a))
    GLU(u) = down_proj(act(gate_proj(u)) * up_proj(u))      silu (SwiGLU); Gemma: tanh gelu (GeGLU)
    logits = norm(x) W_U,   W_U = embed_tokens^T where tie_word_embeddings, else lm_head

RMSNorm scales by w (Gemma by 1 + w). head_dim is the config's where it gives one (Gemma's is not
hidden_size / heads). Biases: llama and gemma on q, k, v, o where attention_bias (llama's MLP where mlp_bias),
qwen2 on q, k, v always and never on o, mistral none. Mistral's sliding_window becomes the model's default window
mask (a query sees itself and the window - 1 keys before it, as Hugging Face's sliding window does); qwen2 with
use_sliding_window slides only in some layers, which one mask for every layer cannot say, so it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import AttentionWeights, from_concatenated
from engine.feedforward import Activation, GatedFeedForward
from engine.forward import Block, Network, Unembed
from engine.masks import MaskSpec
from engine.models.families import (
    ACTIVATIONS,
    ROTARY_BREAKS,
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    Sizes,
    activation,
    decoder_sizes,
    flag,
    linear_T,
    need,
    number,
    refuse,
    rope_positions,
    rotary,
)
from engine.norms import RMSNorm

NAMES = {"llama": "LLaMA", "mistral": "Mistral", "qwen2": "Qwen2", "gemma": "Gemma"}


def kind(config: Config) -> str:
    return str(config["model_type"])


def sizes(config: Config) -> Sizes:
    s = decoder_sizes(config, max_positions=rope_positions(config))
    if kind(config) == "qwen2" and config.get("use_sliding_window"):
        raise refuse(
            "use_sliding_window",
            "true: qwen2 slides its window only in the layers from max_window_layers on, and attnlab's masks are "
            "one for every layer; set it false to run every layer without the window",
        )
    rotary(config, s.d_head)  # the rotary embedding and its scaling checked before any tensor is read
    return s


def biases(config: Config) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o bias, MLP bias) for this model type."""
    t = kind(config)
    if t == "qwen2":
        return True, False, False
    if t == "mistral":
        return False, False, False
    attn = flag(config, "attention_bias", False)
    return attn, attn, t == "llama" and flag(config, "mlp_bias", False)


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", kind(config) == "gemma")


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, dh = s.d_model, need(config, "intermediate_size"), s.d_head
    qkv_bias, o_bias, mlp_bias = biases(config)
    out: Shapes = {"embed_tokens.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"layers.{i}"
        out |= {f"{p}.input_layernorm.weight": (d,), f"{p}.post_attention_layernorm.weight": (d,)}
        rows = {"q": s.n_heads * dh, "k": s.n_kv_heads * dh, "v": s.n_kv_heads * dh}
        for name, r in rows.items():
            out[f"{p}.self_attn.{name}_proj.weight"] = (r, d)
            if qkv_bias:
                out[f"{p}.self_attn.{name}_proj.bias"] = (r,)
        out[f"{p}.self_attn.o_proj.weight"] = (d, s.n_heads * dh)
        if o_bias:
            out[f"{p}.self_attn.o_proj.bias"] = (d,)
        out |= {f"{p}.mlp.gate_proj.weight": (m, d), f"{p}.mlp.up_proj.weight": (m, d)}
        out[f"{p}.mlp.down_proj.weight"] = (d, m)
        if mlp_bias:
            out |= {f"{p}.mlp.gate_proj.bias": (m,), f"{p}.mlp.up_proj.bias": (m,), f"{p}.mlp.down_proj.bias": (d,)}
    out["norm.weight"] = (d,)
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def attention(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes) -> AttentionWeights:
    """Layer i's self_attn: q, k, v, o projections per head, their biases where the model type has them, rotary."""
    h, g, dh, a = s.n_heads, s.n_kv_heads, s.d_head, f"layers.{i}.self_attn"
    w = from_concatenated(
        linear_T(t[f"{a}.q_proj.weight"]),
        linear_T(t[f"{a}.k_proj.weight"]),
        linear_T(t[f"{a}.v_proj.weight"]),
        linear_T(t[f"{a}.o_proj.weight"]),
        h,
        g,
    )
    qkv_bias, o_bias, _ = biases(config)
    if qkv_bias:
        w = replace(
            w,
            b_Q=t[f"{a}.q_proj.bias"].reshape(h, dh),
            b_K=t[f"{a}.k_proj.bias"].reshape(g, dh),
            b_V=t[f"{a}.v_proj.bias"].reshape(g, dh),
        )
    return replace(w, b_O=t[f"{a}.o_proj.bias"] if o_bias else None, rotary=rotary(config, dh))


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p = f"layers.{i}"
    eps, offset = number(config, "rms_norm_eps", 1e-6), kind(config) == "gemma"
    w = attention(config, t, i, s)
    mlp_bias = biases(config)[2]

    def bias(name: str) -> Tensor | None:
        return t[f"{p}.mlp.{name}.bias"] if mlp_bias else None

    return Block(
        attn=w,
        ln_pre=RMSNorm(t[f"{p}.input_layernorm.weight"], eps, offset),
        ln_pre_mlp=RMSNorm(t[f"{p}.post_attention_layernorm.weight"], eps, offset),
        mlp=GatedFeedForward(
            W_gate=linear_T(t[f"{p}.mlp.gate_proj.weight"]),
            W_in=linear_T(t[f"{p}.mlp.up_proj.weight"]),
            W_out=linear_T(t[f"{p}.mlp.down_proj.weight"]),
            b_gate=bias("gate_proj"),
            b_in=bias("up_proj"),
            b_out=bias("down_proj"),
            act=act,
        ),
    )


def window(config: Config) -> int | None:
    if kind(config) != "mistral" or config.get("sliding_window") is None:
        return None
    return int(need(config, "sliding_window"))


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    gemma = kind(config) == "gemma"
    known = {**ACTIVATIONS, "gelu": "gelu_tanh"} if gemma else ACTIVATIONS  # Gemma's "gelu" means the tanh one
    act = activation(config, "hidden_act", known)
    eps = number(config, "rms_norm_eps", 1e-6)
    W_U = t["embed_tokens.weight"] if tied(config) else t["lm_head.weight"]
    net = Network(
        tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
        Unembed(RMSNorm(t["norm.weight"], eps, gemma), linear_T(W_U)),
    )
    w = window(config)
    rot = rotary(config, s.d_head)
    norm = "RMSNorm (1 + w)" if gemma else "RMSNorm"
    return Mapped(
        embedding=Embedding(W_E=t["embed_tokens.weight"], scale=s.d_model**0.5 if gemma else None),
        network=net,
        architecture=(
            f"{NAMES[kind(config)]} pre-norm decoder: a = x + Attention({norm}(x)); x' = a + GLU({norm}(a)), "
            f"{act} gate; {s.n_heads} heads over {s.n_kv_heads} K/V groups of width {s.d_head}; {rot.describe()}; "
            f"logits = {norm}(x) W_U; causal" + (f", sliding window {w}" if w is not None else "")
        ),
        default_masks=MaskSpec(causal=True, window=w),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(
    model_types=("llama", "mistral", "qwen2", "gemma"), prefix="model.", sizes=sizes, shapes=shapes, build=build
)
