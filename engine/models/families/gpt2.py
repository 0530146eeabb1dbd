"""GPT-2 (model_type gpt2): a pre-LN decoder with learned positions, as Hugging Face's GPT2Model lays it out.

    x_0 = wte[id] + wpe[position]
    per layer: a = x + Attention(ln_1(x)); x' = a + MLP(ln_2(a))      MLP: c_proj(act(c_fc(.))), gelu_new = tanh gelu
    logits = ln_f(x) W_U,  W_U = wte^T unless tie_word_embeddings is false (then lm_head)

GPT-2's Conv1D stores its weight as (in, out), so x W needs no transpose; c_attn's (D, 3D) columns are Q, K, V one
after the other, each D wide and split per head. Scores are scaled by 1 / sqrt(d_head), also divided by
layer + 1 where scale_attn_by_inverse_layer_idx is set, and not scaled where scale_attn_weights is false.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import from_concatenated
from engine.feedforward import Activation, FeedForward
from engine.forward import Block, Network, Unembed
from engine.masks import MaskSpec
from engine.models.families import (
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    Sizes,
    activation,
    flag,
    heads_divide,
    need,
    number,
)
from engine.models.families import refuse as refused
from engine.norms import LayerNorm


def sizes(config: Config) -> Sizes:
    d, h = need(config, "n_embd"), need(config, "n_head")
    heads_divide(d, h, h, "n_embd")
    if config.get("add_cross_attention"):
        raise refused("add_cross_attention", "true: attnlab reads GPT-2 as a decoder without cross-attention")
    return Sizes(
        n_layers=need(config, "n_layer"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "n_positions"),
        decoder=True,
    )


def d_mlp(config: Config) -> int:
    inner = config.get("n_inner")
    return 4 * need(config, "n_embd") if inner is None else need(config, "n_inner")


def tied(config: Config) -> bool:
    return flag(config, "tie_word_embeddings", True)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, d_mlp(config)
    out: Shapes = {"wte.weight": (s.vocab_size, d), "wpe.weight": (s.max_positions, d)}
    for i in range(s.n_layers):
        p = f"h.{i}"
        out |= {f"{p}.ln_1.weight": (d,), f"{p}.ln_1.bias": (d,), f"{p}.ln_2.weight": (d,), f"{p}.ln_2.bias": (d,)}
        out |= {f"{p}.attn.c_attn.weight": (d, 3 * d), f"{p}.attn.c_attn.bias": (3 * d,)}
        out |= {f"{p}.attn.c_proj.weight": (d, d), f"{p}.attn.c_proj.bias": (d,)}
        out |= {f"{p}.mlp.c_fc.weight": (d, m), f"{p}.mlp.c_fc.bias": (m,)}
        out |= {f"{p}.mlp.c_proj.weight": (m, d), f"{p}.mlp.c_proj.bias": (d,)}
    out |= {"ln_f.weight": (d,), "ln_f.bias": (d,)}
    if not tied(config):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, d, h = f"h.{i}", s.d_model, s.n_heads
    eps = number(config, "layer_norm_epsilon", 1e-5)
    w_qkv, b_qkv = t[f"{p}.attn.c_attn.weight"], t[f"{p}.attn.c_attn.bias"]  # (D, 3D): Q | K | V, Conv1D (in, out)
    w = from_concatenated(w_qkv[:, :d], w_qkv[:, d : 2 * d], w_qkv[:, 2 * d :], t[f"{p}.attn.c_proj.weight"], h)
    factor: float | None = None
    if config.get("scale_attn_by_inverse_layer_idx"):
        factor = s.d_head**-0.5 / (i + 1)
    if config.get("scale_attn_weights", True) is False:
        factor = 1.0 / (i + 1) if config.get("scale_attn_by_inverse_layer_idx") else 1.0
    w = replace(
        w,
        b_Q=b_qkv[:d].reshape(h, s.d_head),
        b_K=b_qkv[d : 2 * d].reshape(h, s.d_head),
        b_V=b_qkv[2 * d :].reshape(h, s.d_head),
        b_O=t[f"{p}.attn.c_proj.bias"],
        scale=factor,
    )
    return Block(
        attn=w,
        ln_pre=LayerNorm(t[f"{p}.ln_1.weight"], t[f"{p}.ln_1.bias"], eps),
        ln_pre_mlp=LayerNorm(t[f"{p}.ln_2.weight"], t[f"{p}.ln_2.bias"], eps),
        mlp=FeedForward(
            W_in=t[f"{p}.mlp.c_fc.weight"],
            b_in=t[f"{p}.mlp.c_fc.bias"],
            W_out=t[f"{p}.mlp.c_proj.weight"],
            b_out=t[f"{p}.mlp.c_proj.bias"],
            act=act,
        ),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "activation_function")
    eps = number(config, "layer_norm_epsilon", 1e-5)
    W_U = t["wte.weight"].T if tied(config) else t["lm_head.weight"].T
    net = Network(
        tuple(block(config, t, i, s, act) for i in range(s.n_layers)),
        Unembed(LayerNorm(t["ln_f.weight"], t["ln_f.bias"], eps), W_U),  # a view: wte is not copied
    )
    return Mapped(
        embedding=Embedding(W_E=t["wte.weight"], W_pos=t["wpe.weight"]),
        network=net,
        architecture=(
            f"GPT-2 pre-LN decoder: a = x + Attention(LayerNorm(x)); x' = a + MLP(LayerNorm(a)), {act}; "
            "learned positions; logits = LayerNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
    )


FAMILY = Family(model_types=("gpt2",), prefix="transformer.", sizes=sizes, shapes=shapes, build=build)
