"""ViT (model_type vit): an image's patches as tokens through a pre-LN encoder, as ViTModel lays it out.

    x_0 = [CLS] + patches (Conv2d with stride = patch size) + positions           engine/patches.py
    per layer (LayerNorm before each sublayer):
        a  = x + Attention(LayerNorm_before(x))            q/k/v biases where qkv_bias; W_O and b_O always
        x' = a + act(LayerNorm_after(a) W_in + b_in) W_out + b_out
    final = LayerNorm(x) after the last layer: ViTModel's last_hidden_state (the last block's Norm_mlp)

Attention is bidirectional: no default mask. ViTForImageClassification's classifier reads [CLS]'s final state
(engine/models/families/vision.py); the pooler is not read. DeiT (engine/models/families/deit.py) is this layout
with a distillation token.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from engine.feedforward import Activation, FeedForward
from engine.forward import Block, Network
from engine.models.families import Config, Family, Mapped, Shapes, Sizes, activation, flag, linear_T, need, number
from engine.models.families import vision as v
from engine.norms import LayerNorm


def sizes(config: Config) -> Sizes:
    return v.image_sizes(config, lead=1)


def layer_shapes(config: Config, d: int, n_layers: int) -> Shapes:
    """Every layer's tensors in ViT's (and DeiT's) layout, and the final LayerNorm."""
    m = need(config, "intermediate_size")
    qkv_bias = flag(config, "qkv_bias", True)
    out: Shapes = {}
    for i in range(n_layers):
        p = f"encoder.layer.{i}"
        out |= v.attention_shapes(f"{p}.attention", d, qkv_bias)
        out |= {f"{p}.intermediate.dense.weight": (m, d), f"{p}.intermediate.dense.bias": (m,)}
        out |= {f"{p}.output.dense.weight": (d, m), f"{p}.output.dense.bias": (d,)}
        out |= v.norm_shapes(f"{p}.layernorm_before", f"{p}.layernorm_after", d=d)
    return out | v.norm_shapes("layernorm", d=d)


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d = s.d_model
    return v.embedding_shapes(config, d, 1) | layer_shapes(config, d, s.n_layers) | v.head_shapes(config, d)


def block(t: Mapping[str, Tensor], i: int, n_heads: int, qkv_bias: bool, eps: float, act: Activation) -> Block:
    p = f"encoder.layer.{i}"
    return Block(
        attn=v.self_attention(t, f"{p}.attention", n_heads, qkv_bias),
        ln_pre=LayerNorm(t[f"{p}.layernorm_before.weight"], t[f"{p}.layernorm_before.bias"], eps),
        ln_pre_mlp=LayerNorm(t[f"{p}.layernorm_after.weight"], t[f"{p}.layernorm_after.bias"], eps),
        mlp=FeedForward(
            W_in=linear_T(t[f"{p}.intermediate.dense.weight"]),
            b_in=t[f"{p}.intermediate.dense.bias"],
            W_out=linear_T(t[f"{p}.output.dense.weight"]),
            b_out=t[f"{p}.output.dense.bias"],
            act=act,
        ),
    )


def network(config: Config, t: Mapping[str, Tensor], s: Sizes) -> tuple[Network, str]:
    """The blocks in ViT's (and DeiT's) layout, closed by the final LayerNorm; the activation's name."""
    act = activation(config, "hidden_act")
    eps = number(config, "layer_norm_eps", 1e-12)
    qkv_bias = flag(config, "qkv_bias", True)
    blocks = [block(t, i, s.n_heads, qkv_bias, eps, act) for i in range(s.n_layers)]
    return Network(v.closed_by_final_norm(blocks, t, eps)), act


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    net, act = network(config, t, s)
    return Mapped(
        embedding=v.patch_embedding(t),
        network=net,
        architecture=(
            f"ViT pre-LN encoder over image patches: a = x + Attention(LayerNorm(x)); "
            f"x' = a + FeedForward(LayerNorm(a)), {act}; [CLS] + patches + learned positions; "
            "bidirectional; a final LayerNorm"
        ),
        classifier=v.classifier(config, t, first_patch=1),
    )


FAMILY = Family(model_types=("vit",), prefix="vit.", sizes=sizes, shapes=shapes, build=build, reads="pixels")
