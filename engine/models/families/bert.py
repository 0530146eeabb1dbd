"""BERT and RoBERTa (model_type bert, roberta): post-LN encoders with learned positions, as BertModel lays them out.

    x_0 = LayerNorm(word[id] + position[p + offset] + token_type[0])       offset 0; RoBERTa: pad_token_id + 1
    per layer (LayerNorm after each residual sum):
        a  = LayerNorm(x + Attention(x))                  Attention includes W_O and b_O
        x' = LayerNorm(a + act(a W_in + b_in) W_out + b_out)
    final = the last layer's hidden state (BertModel's last_hidden_state)

Attention is bidirectional: no default mask. Torch Linear weights are (out, in), hence the transposes. RoBERTa
numbers its positions from pad_token_id + 1 (the rows before it belong to padding), so its longest input is
max_position_embeddings - pad_token_id - 1. The masked-LM head (BertForMaskedLM's cls., RobertaForMaskedLM's lm_head.)
and the pooler are not read: what attnlab shows ends at the encoder's last layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.attention import AttentionWeights, from_concatenated
from engine.feedforward import Activation, FeedForward
from engine.forward import Block, Network
from engine.models.families import Config, Embedding, Family, Mapped, Shapes, Sizes, activation, heads_divide, need
from engine.models.families import refuse as refused
from engine.norms import LayerNorm


def position_offset(config: Config) -> int:
    """The row of position 0 in the position embeddings: 0 for BERT, pad_token_id + 1 for RoBERTa."""
    if config.get("model_type") != "roberta":
        return 0
    pad = config.get("pad_token_id")
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise refused("pad_token_id", f"got {pad!r}: RoBERTa numbers positions from it, it needs an integer >= 0")
    return pad + 1


def sizes(config: Config) -> Sizes:
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    heads_divide(d, h, h)
    kind = config.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise refused("position_embedding_type", f"got {kind!r}: attnlab reads learned absolute positions only")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise refused("is_decoder", "true: attnlab reads BERT and RoBERTa as encoders without cross-attention")
    rows = need(config, "max_position_embeddings")
    offset = position_offset(config)
    if rows <= offset:
        raise refused("max_position_embeddings", f"got {rows}: positions start at row {offset}, none would be left")
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=h,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=rows - offset,
        decoder=False,
    )


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, need(config, "intermediate_size")
    e = "embeddings"
    out: Shapes = {
        f"{e}.word_embeddings.weight": (s.vocab_size, d),
        f"{e}.position_embeddings.weight": (need(config, "max_position_embeddings"), d),
        f"{e}.token_type_embeddings.weight": (need(config, "type_vocab_size"), d),
        f"{e}.LayerNorm.weight": (d,),
        f"{e}.LayerNorm.bias": (d,),
    }
    for i in range(s.n_layers):
        p = f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            out |= {f"{p}.attention.self.{name}.weight": (d, d), f"{p}.attention.self.{name}.bias": (d,)}
        out |= {f"{p}.attention.output.dense.weight": (d, d), f"{p}.attention.output.dense.bias": (d,)}
        out |= {f"{p}.attention.output.LayerNorm.weight": (d,), f"{p}.attention.output.LayerNorm.bias": (d,)}
        out |= {f"{p}.intermediate.dense.weight": (m, d), f"{p}.intermediate.dense.bias": (m,)}
        out |= {f"{p}.output.dense.weight": (d, m), f"{p}.output.dense.bias": (d,)}
        out |= {f"{p}.output.LayerNorm.weight": (d,), f"{p}.output.LayerNorm.bias": (d,)}
    return out


def self_attention(t: Mapping[str, Tensor], prefix: str, n_heads: int) -> AttentionWeights:
    """A BERT self-attention block (`prefix`.self.query ... `prefix`.output.dense) as per-head weights and biases."""
    w = from_concatenated(
        t[f"{prefix}.self.query.weight"].T,
        t[f"{prefix}.self.key.weight"].T,
        t[f"{prefix}.self.value.weight"].T,
        t[f"{prefix}.output.dense.weight"].T,
        n_heads=n_heads,
    )
    return replace(
        w,
        b_Q=t[f"{prefix}.self.query.bias"].reshape(n_heads, w.d_head),
        b_K=t[f"{prefix}.self.key.bias"].reshape(n_heads, w.d_head),
        b_V=t[f"{prefix}.self.value.bias"].reshape(n_heads, w.d_v),
        b_O=t[f"{prefix}.output.dense.bias"],
    )


def block(t: Mapping[str, Tensor], i: int, n_heads: int, eps: float, act: Activation) -> Block:
    p = f"encoder.layer.{i}"
    a = f"{p}.attention"
    w = self_attention(t, a, n_heads)
    return Block(
        attn=w,
        residual=True,
        ln_attn=LayerNorm(t[f"{a}.output.LayerNorm.weight"], t[f"{a}.output.LayerNorm.bias"], eps),
        mlp=FeedForward(
            W_in=t[f"{p}.intermediate.dense.weight"].T,
            b_in=t[f"{p}.intermediate.dense.bias"],
            W_out=t[f"{p}.output.dense.weight"].T,
            b_out=t[f"{p}.output.dense.bias"],
            act=act,
        ),
        ln_mlp=LayerNorm(t[f"{p}.output.LayerNorm.weight"], t[f"{p}.output.LayerNorm.bias"], eps),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    eps = float(config.get("layer_norm_eps", 1e-12))
    e = "embeddings"
    name = "RoBERTa" if config.get("model_type") == "roberta" else "BERT"
    return Mapped(
        embedding=Embedding(
            W_E=t[f"{e}.word_embeddings.weight"],
            W_pos=t[f"{e}.position_embeddings.weight"],
            position_offset=position_offset(config),
            W_type=t[f"{e}.token_type_embeddings.weight"][0],
            ln=LayerNorm(t[f"{e}.LayerNorm.weight"], t[f"{e}.LayerNorm.bias"], eps),
        ),
        network=Network(tuple(block(t, i, s.n_heads, eps, act) for i in range(s.n_layers))),
        architecture=(
            f"{name} post-LN encoder: a = LayerNorm(x + Attention(x)); x' = LayerNorm(a + FeedForward(a)), {act}; "
            "learned positions; bidirectional"
        ),
    )


FAMILY = Family(model_types=("bert",), prefix="bert.", sizes=sizes, shapes=shapes, build=build)
ROBERTA = Family(model_types=("roberta",), prefix="roberta.", sizes=sizes, shapes=shapes, build=build)
FAMILIES = (FAMILY, ROBERTA)
