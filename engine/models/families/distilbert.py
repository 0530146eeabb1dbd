"""DistilBERT (model_type distilbert: distilbert-base-uncased and its fine-tunes): a post-LN encoder with learned
(or sinusoidal) positions and no token types, as Hugging Face's DistilBertModel lays it out.

    x_0 = LayerNorm(word_embeddings[id] + position_embeddings[p])
    per layer (LayerNorm after each residual sum):
        a  = sa_layer_norm(x + Attention(x))                          q_lin, k_lin, v_lin, out_lin, all with biases
        x' = output_layer_norm(a + lin2(act(lin1(a))))                exact gelu
    final = the last layer's hidden state (DistilBertModel's last_hidden_state)

Every LayerNorm has eps 1e-12 (fixed in the model, not in the config). sinusoidal_pos_embds only says how the
position table was first filled: the table is in the weights either way, and is read as it is. Attention is
bidirectional: no default mask. As for BERT and RoBERTa, the masked-LM head (DistilBertForMaskedLM's
vocab_transform, vocab_layer_norm, vocab_projector) is not read: its logits predict the token at each position,
not the next one, which is what attnlab's predictions (config.next_word, generation) mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import from_concatenated
from engine.feedforward import Activation, FeedForward
from engine.forward import Block, Network
from engine.models.families import (
    Config,
    Embedding,
    Family,
    Mapped,
    Shapes,
    Sizes,
    activation,
    linear_T,
    need,
    refuse,
)
from engine.norms import LayerNorm

EPS = 1e-12  # every LayerNorm of DistilBERT's, fixed in the model


def sizes(config: Config) -> Sizes:
    d, h = need(config, "dim"), need(config, "n_heads")
    if d % h:
        raise refuse("n_heads", f"got {h} heads for dim {d}: dim must divide by heads")
    return Sizes(
        n_layers=need(config, "n_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=need(config, "max_position_embeddings"),
        decoder=False,
    )


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, need(config, "hidden_dim")
    e = "embeddings"
    out: Shapes = {
        f"{e}.word_embeddings.weight": (s.vocab_size, d),
        f"{e}.position_embeddings.weight": (s.max_positions, d),
        f"{e}.LayerNorm.weight": (d,),
        f"{e}.LayerNorm.bias": (d,),
    }
    for i in range(s.n_layers):
        p = f"transformer.layer.{i}"
        for name in ("q_lin", "k_lin", "v_lin", "out_lin"):
            out |= {f"{p}.attention.{name}.weight": (d, d), f"{p}.attention.{name}.bias": (d,)}
        out |= {f"{p}.ffn.lin1.weight": (m, d), f"{p}.ffn.lin1.bias": (m,)}
        out |= {f"{p}.ffn.lin2.weight": (d, m), f"{p}.ffn.lin2.bias": (d,)}
        for norm in ("sa_layer_norm", "output_layer_norm"):
            out |= {f"{p}.{norm}.weight": (d,), f"{p}.{norm}.bias": (d,)}
    return out


def block(t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, dh = f"transformer.layer.{i}", s.n_heads, s.d_head
    a = f"{p}.attention"
    w = from_concatenated(
        linear_T(t[f"{a}.q_lin.weight"]),
        linear_T(t[f"{a}.k_lin.weight"]),
        linear_T(t[f"{a}.v_lin.weight"]),
        linear_T(t[f"{a}.out_lin.weight"]),
        h,
    )
    w = replace(
        w,
        b_Q=t[f"{a}.q_lin.bias"].reshape(h, dh),
        b_K=t[f"{a}.k_lin.bias"].reshape(h, dh),
        b_V=t[f"{a}.v_lin.bias"].reshape(h, dh),
        b_O=t[f"{a}.out_lin.bias"],
    )
    return Block(
        attn=w,
        residual=True,
        ln_attn=LayerNorm(t[f"{p}.sa_layer_norm.weight"], t[f"{p}.sa_layer_norm.bias"], EPS),
        mlp=FeedForward(
            W_in=linear_T(t[f"{p}.ffn.lin1.weight"]),
            b_in=t[f"{p}.ffn.lin1.bias"],
            W_out=linear_T(t[f"{p}.ffn.lin2.weight"]),
            b_out=t[f"{p}.ffn.lin2.bias"],
            act=act,
        ),
        ln_mlp=LayerNorm(t[f"{p}.output_layer_norm.weight"], t[f"{p}.output_layer_norm.bias"], EPS),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "activation")
    e = "embeddings"
    positions = "sinusoidal positions (as stored)" if config.get("sinusoidal_pos_embds") else "learned positions"
    return Mapped(
        embedding=Embedding(
            W_E=t[f"{e}.word_embeddings.weight"],
            W_pos=t[f"{e}.position_embeddings.weight"],
            ln=LayerNorm(t[f"{e}.LayerNorm.weight"], t[f"{e}.LayerNorm.bias"], EPS),
        ),
        network=Network(tuple(block(t, i, s, act) for i in range(s.n_layers))),
        architecture=(
            f"DistilBERT post-LN encoder: a = LayerNorm(x + Attention(x)); x' = LayerNorm(a + FeedForward(a)), "
            f"{act}; {positions}, no token types; bidirectional"
        ),
    )


FAMILY = Family(model_types=("distilbert",), prefix="distilbert.", sizes=sizes, shapes=shapes, build=build)
