"""DINOv2 (model_type dinov2, and dinov2_with_registers): ViT's pre-LN encoder with layer scale, as Dinov2Model
lays it out.

    x_0 = [CLS] + patches + positions, then [REG1] .. [REGn] after [CLS] (registers: no position)
    per layer:
        a  = x + lambda_1 * Attention(norm1(x))
        x' = a + lambda_2 * MLP(norm2(a))          MLP: act(x W_fc1 + b) W_fc2 + b, or SwiGLU (use_swiglu_ffn)
    final = LayerNorm(x) after the last layer: Dinov2Model's last_hidden_state (the last block's Norm_mlp)

Layer scale multiplies each sublayer's output channel by channel, so it is folded into the projection that makes
that output: W_O and b_O times lambda_1, W_out and b_out times lambda_2 (what hook_result and hook_attn_out show
is what joins the residual). The MLP is mlp_ratio x hidden_size wide; the SwiGLU keeps 2/3 of that rounded up to a
multiple of 8, its gate and up projections stored one above the other in weights_in. The positions are resized to
another image's grid bicubically (antialiased with registers). Dinov2ForImageClassification's classifier reads
[CLS] and the mean of the patches (engine/models/families/vision.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from engine.feedforward import MLP, Activation, FeedForward, GatedFeedForward
from engine.forward import Block, Network
from engine.models.families import Config, Family, Mapped, Shapes, Sizes, activation, flag, linear_T, number
from engine.models.families import refuse as refused
from engine.models.families import vision as v
from engine.norms import LayerNorm

REGISTERS = "dinov2_with_registers"


def registers(config: Config) -> int:
    """The register tokens: num_register_tokens for dinov2_with_registers, none for dinov2."""
    if config.get("model_type") != REGISTERS:
        return 0
    n = config.get("num_register_tokens", 4)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise refused("num_register_tokens", f"got {n!r}: need an integer >= 0")
    return n


def sizes(config: Config) -> Sizes:
    s = v.image_sizes(config, lead=1)
    return replace(s, max_positions=s.max_positions + registers(config))


def mlp_width(config: Config, d: int) -> int:
    """The feed-forward's hidden width: mlp_ratio x d, two thirds of it rounded up to 8 for the SwiGLU."""
    ratio = number(config, "mlp_ratio", 4.0)
    m = int(d * ratio)
    return (int(m * 2 / 3) + 7) // 8 * 8 if flag(config, "use_swiglu_ffn", False) else m


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m = s.d_model, mlp_width(config, s.d_model)
    qkv_bias = flag(config, "qkv_bias", True)
    swiglu = flag(config, "use_swiglu_ffn", False)
    out = v.embedding_shapes(config, d, 1)
    if config.get("model_type") == REGISTERS:
        out[f"{v.E}.register_tokens"] = (1, registers(config), d)
    for i in range(s.n_layers):
        p = f"encoder.layer.{i}"
        out |= v.attention_shapes(f"{p}.attention", d, qkv_bias)
        out |= v.norm_shapes(f"{p}.norm1", f"{p}.norm2", d=d)
        out |= {f"{p}.layer_scale1.lambda1": (d,), f"{p}.layer_scale2.lambda1": (d,)}
        if swiglu:
            out |= {f"{p}.mlp.weights_in.weight": (2 * m, d), f"{p}.mlp.weights_in.bias": (2 * m,)}
            out |= {f"{p}.mlp.weights_out.weight": (d, m), f"{p}.mlp.weights_out.bias": (d,)}
        else:
            out |= {f"{p}.mlp.fc1.weight": (m, d), f"{p}.mlp.fc1.bias": (m,)}
            out |= {f"{p}.mlp.fc2.weight": (d, m), f"{p}.mlp.fc2.bias": (d,)}
    return out | v.norm_shapes("layernorm", d=d) | v.head_shapes(config, d)


def feed_forward(t: Mapping[str, Tensor], p: str, swiglu: bool, act: Activation, scale: Tensor) -> MLP:
    """The layer's MLP with layer scale `scale` folded into its output projection."""
    if not swiglu:
        return FeedForward(
            W_in=linear_T(t[f"{p}.fc1.weight"]),
            b_in=t[f"{p}.fc1.bias"],
            W_out=linear_T(t[f"{p}.fc2.weight"]) * scale,
            b_out=t[f"{p}.fc2.bias"] * scale,
            act=act,
        )
    gate, up = t[f"{p}.weights_in.weight"].chunk(2)  # (m, D) each: the gate first
    b_gate, b_up = t[f"{p}.weights_in.bias"].chunk(2)
    return GatedFeedForward(
        W_gate=linear_T(gate),
        W_in=linear_T(up),
        W_out=linear_T(t[f"{p}.weights_out.weight"]) * scale,
        b_gate=b_gate,
        b_in=b_up,
        b_out=t[f"{p}.weights_out.bias"] * scale,
        act="silu",
    )


def block(t: Mapping[str, Tensor], i: int, n_heads: int, config: Config, act: Activation, eps: float) -> Block:
    p = f"encoder.layer.{i}"
    w = v.self_attention(t, f"{p}.attention", n_heads, flag(config, "qkv_bias", True))
    scale1, scale2 = t[f"{p}.layer_scale1.lambda1"], t[f"{p}.layer_scale2.lambda1"]
    assert w.W_O is not None and w.b_O is not None
    return Block(
        attn=replace(w, W_O=w.W_O * scale1, b_O=w.b_O * scale1),
        ln_pre=LayerNorm(t[f"{p}.norm1.weight"], t[f"{p}.norm1.bias"], eps),
        ln_pre_mlp=LayerNorm(t[f"{p}.norm2.weight"], t[f"{p}.norm2.bias"], eps),
        mlp=feed_forward(t, f"{p}.mlp", flag(config, "use_swiglu_ffn", False), act, scale2),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "hidden_act")
    eps = number(config, "layer_norm_eps", 1e-6)
    n_registers = registers(config)
    blocks = [block(t, i, s.n_heads, config, act, eps) for i in range(s.n_layers)]
    with_registers = config.get("model_type") == REGISTERS
    mlp = "SwiGLU" if flag(config, "use_swiglu_ffn", False) else act
    return Mapped(
        embedding=v.patch_embedding(
            t,
            registers=t[f"{v.E}.register_tokens"][0] if with_registers else None,
            antialias=with_registers,
        ),
        network=Network(v.closed_by_final_norm(blocks, t, eps)),
        architecture=(
            "DINOv2 pre-LN encoder over image patches with layer scale: a = x + lambda_1 Attention(LayerNorm(x)); "
            f"x' = a + lambda_2 FeedForward(LayerNorm(a)), {mlp}; [CLS]"
            + (f" + {n_registers} registers" if with_registers else "")
            + " + patches + learned positions; bidirectional; a final LayerNorm"
        ),
        classifier=v.classifier(config, t, first_patch=1 + n_registers),
    )


FAMILY = Family(model_types=("dinov2",), prefix="dinov2.", sizes=sizes, shapes=shapes, build=build, reads="pixels")
WITH_REGISTERS = Family(
    model_types=(REGISTERS,), prefix=f"{REGISTERS}.", sizes=sizes, shapes=shapes, build=build, reads="pixels"
)
FAMILIES = (FAMILY, WITH_REGISTERS)
