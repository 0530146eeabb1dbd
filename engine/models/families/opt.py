"""OPT (model_type opt: OPT-125m ... OPT-66b, OPT-350m): a decoder with learned positions from row 2, pre-LN or
post-LN by do_layer_norm_before, as Hugging Face's OPTDecoder lays it out.

    x_0 = embed_tokens[id] W_in + embed_positions[position + 2]      W_in = project_in^T, where word embeddings are
                                                                     narrower than the residual (word_embed_proj_dim)
    do_layer_norm_before (OPT-125m and most):
        a = x + Attention(self_attn_layer_norm(x)); x' = a + MLP(final_layer_norm(a))     the layer's own norms
    and otherwise (OPT-350m), post-LN:
        a = self_attn_layer_norm(x + Attention(x)); x' = final_layer_norm(a + MLP(a))
    MLP(u) = fc2(act(fc1(u))), relu
    logits = project_out(final_layer_norm(x)) W_U,   W_U = embed_tokens^T (tied) or lm_head; the decoder's final
             norm only in a pre-LN model (and not where _remove_final_layer_norm), project_out only with project_in

OPT's learned position table has max_position_embeddings + 2 rows: position p reads row p + 2 (the first two rows
are a relic of fairseq's padding). q_proj, k_proj, v_proj and out_proj are separate Linears, with biases where
enable_bias (fc1 and fc2 too); the norms have no weight and bias where layer_norm_elementwise_affine is false.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch
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
    linear_T,
    need,
)
from engine.norms import LayerNorm

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding.offset: position p is row p + 2
EPS = 1e-5  # nn.LayerNorm's default: OPT's config has no epsilon


@dataclass(frozen=True)
class FinalOut:
    """What OPT's decoder does after its last layer, before lm_head: its final LayerNorm (a pre-LN model's), then
    project_out (word embeddings narrower than the residual). Either may be absent; with neither, x itself."""

    ln: LayerNorm | None
    W_out: Tensor | None  # (D, E) project_out^T

    def __call__(self, x: Tensor) -> Tensor:
        x = x if self.ln is None else self.ln(x)
        return x if self.W_out is None else x @ self.W_out

    def to(self, device: torch.device | str, dtype: torch.dtype) -> FinalOut:
        W_out = None if self.W_out is None else self.W_out.to(device=device, dtype=dtype)
        return FinalOut(None if self.ln is None else self.ln.to(device, dtype), W_out)


def sizes(config: Config) -> Sizes:
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    heads_divide(d, h, h)
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "max_position_embeddings"),
        decoder=True,
    )


def embed_width(config: Config) -> int:
    """word_embed_proj_dim: the word embeddings' width (hidden_size where the config leaves it out)."""
    return (
        need(config, "hidden_size")
        if config.get("word_embed_proj_dim") is None
        else need(config, "word_embed_proj_dim")
    )


def projected(config: Config) -> bool:
    return embed_width(config) != need(config, "hidden_size")


def pre_ln(config: Config) -> bool:
    return flag(config, "do_layer_norm_before", True)


def final_norm(config: Config) -> bool:
    return pre_ln(config) and not flag(config, "_remove_final_layer_norm", False)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, e = s.d_model, need(config, "ffn_dim"), embed_width(config)
    bias, affine = flag(config, "enable_bias", True), flag(config, "layer_norm_elementwise_affine", True)
    p = "decoder"
    out: Shapes = {f"{p}.embed_tokens.weight": (s.vocab_size, e)}
    out[f"{p}.embed_positions.weight"] = (s.max_positions + POSITION_OFFSET, d)
    if projected(config):
        out |= {f"{p}.project_in.weight": (d, e), f"{p}.project_out.weight": (e, d)}
    for i in range(s.n_layers):
        q = f"{p}.layers.{i}"
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{q}.self_attn.{name}.weight"] = (d, d)
            if bias:
                out[f"{q}.self_attn.{name}.bias"] = (d,)
        out |= {f"{q}.fc1.weight": (m, d), f"{q}.fc2.weight": (d, m)}
        if bias:
            out |= {f"{q}.fc1.bias": (m,), f"{q}.fc2.bias": (d,)}
        if affine:
            for norm in ("self_attn_layer_norm", "final_layer_norm"):
                out |= {f"{q}.{norm}.weight": (d,), f"{q}.{norm}.bias": (d,)}
    if final_norm(config) and affine:
        out |= {f"{p}.final_layer_norm.weight": (d,), f"{p}.final_layer_norm.bias": (d,)}
    if not flag(config, "tie_word_embeddings", True):
        out["lm_head.weight"] = (s.vocab_size, e)
    return out


def layer_norm(config: Config, t: Mapping[str, Tensor], name: str, d: int) -> LayerNorm:
    """The LayerNorm `name`, or one that only standardises (weight 1, bias 0) where the norms have no affine part."""
    if flag(config, "layer_norm_elementwise_affine", True):
        return LayerNorm(t[f"{name}.weight"], t[f"{name}.bias"], EPS)
    return LayerNorm(torch.ones(d), torch.zeros(d), EPS)


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, dh = f"decoder.layers.{i}", s.n_heads, s.d_head
    a = f"{p}.self_attn"
    w = from_concatenated(
        linear_T(t[f"{a}.q_proj.weight"]),
        linear_T(t[f"{a}.k_proj.weight"]),
        linear_T(t[f"{a}.v_proj.weight"]),
        linear_T(t[f"{a}.out_proj.weight"]),
        h,
    )
    bias = flag(config, "enable_bias", True)
    if bias:
        w = replace(
            w,
            b_Q=t[f"{a}.q_proj.bias"].reshape(h, dh),
            b_K=t[f"{a}.k_proj.bias"].reshape(h, dh),
            b_V=t[f"{a}.v_proj.bias"].reshape(h, dh),
            b_O=t[f"{a}.out_proj.bias"],
        )
    ln_attn = layer_norm(config, t, f"{p}.self_attn_layer_norm", s.d_model)
    ln_mlp = layer_norm(config, t, f"{p}.final_layer_norm", s.d_model)
    mlp = FeedForward(
        W_in=linear_T(t[f"{p}.fc1.weight"]),
        b_in=t[f"{p}.fc1.bias"] if bias else None,
        W_out=linear_T(t[f"{p}.fc2.weight"]),
        b_out=t[f"{p}.fc2.bias"] if bias else None,
        act=act,
    )
    if pre_ln(config):
        return Block(attn=w, ln_pre=ln_attn, ln_pre_mlp=ln_mlp, mlp=mlp)
    return Block(attn=w, ln_attn=ln_attn, mlp=mlp, ln_mlp=ln_mlp)


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "activation_function")
    W_E = t["decoder.embed_tokens.weight"]
    W_U = W_E if flag(config, "tie_word_embeddings", True) else t["lm_head.weight"]
    proj = projected(config)
    final = FinalOut(
        layer_norm(config, t, "decoder.final_layer_norm", s.d_model) if final_norm(config) else None,
        linear_T(t["decoder.project_out.weight"]) if proj else None,
    )
    flow = (
        "a = x + Attention(LayerNorm(x)); x' = a + MLP(LayerNorm'(a))"
        if pre_ln(config)
        else "a = LayerNorm(x + Attention(x)); x' = LayerNorm'(a + MLP(a)) (post-LN)"
    )
    e = embed_width(config)
    return Mapped(
        embedding=Embedding(
            W_E=W_E,
            W_pos=t["decoder.embed_positions.weight"],
            position_offset=POSITION_OFFSET,
            W_in=linear_T(t["decoder.project_in.weight"]) if proj else None,
        ),
        network=Network(tuple(block(config, t, i, s, act) for i in range(s.n_layers)), Unembed(final, linear_T(W_U))),
        architecture=(
            f"OPT decoder: {flow}, {act}; learned positions from row {POSITION_OFFSET}"
            + (f"; word embeddings of width {e} projected to {s.d_model} and back" if proj else "")
            + f"; logits = {'LayerNorm(x)' if final_norm(config) else 'x'}{' W_out' if proj else ''} W_U"
            + "; causal"
        ),
        default_masks=MaskSpec(causal=True),
    )


FAMILY = Family(model_types=("opt",), prefix="model.", sizes=sizes, shapes=shapes, build=build)
