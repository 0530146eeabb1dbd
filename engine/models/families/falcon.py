"""Falcon (model_type falcon: Falcon-7B, Falcon-40B and -180B's new decoder architecture): a pre-LN decoder with
rotary, one fused query_key_value projection and, as these models ship, parallel attention and MLP, as Hugging
Face's FalconModel lays it out.

    x_0 = word_embeddings[id]                                    no learned positions: rotary on every dim of Q, K
    parallel_attn with one norm (Falcon-7B; num_ln_in_parallel_attn 1):
        h = input_layernorm(x); x' = x + Attention(h) + MLP(h)
    new_decoder_architecture (Falcon-40B; num_ln_in_parallel_attn 2 by default), two norms:
        x' = x + Attention(ln_attn(x)) + MLP(ln_mlp(x))
    otherwise sequential: a = x + Attention(input_layernorm(x)); x' = a + MLP(post_attention_layernorm(a))
    MLP(u) = dense_4h_to_h(act(dense_h_to_4h(u))), exact gelu
    logits = ln_f(x) W_U,  W_U = word_embeddings^T (tied) or lm_head

query_key_value's output rows (d_head each), in one of three layouts:

    new_decoder_architecture   per K/V group g: [q_(g,0) .. q_(g,H/G-1) | k_g | v_g]   (num_kv_heads groups G)
    multi_query (Falcon-7B)    [q_0 .. q_(H-1) | k | v]                               (one K/V group)
    neither                    per head h: [q_h | k_h | v_h]                          (as GPT-NeoX)

Biases on every Linear where `bias` (Falcon-7B and -40B: none). ALiBi (`alibi` true: Falcon-RW) is refused: attnlab
adds no per-head distance bias to the scores.
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
    ROTARY_BREAKS,
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
    number,
    refuse,
    rotary,
)
from engine.norms import LayerNorm

MAX_POSITIONS = 2048  # FalconConfig's, where config.json leaves max_position_embeddings out (Falcon-7B's does)


def new_arch(config: Config) -> bool:
    return flag(config, "new_decoder_architecture", False)


def parallel(config: Config) -> bool:
    return flag(config, "parallel_attn", True)


def norms_in_parallel(config: Config) -> int:
    """num_ln_in_parallel_attn: 2 by default in the new architecture, else 1."""
    n = config.get("num_ln_in_parallel_attn")
    if n is None:
        return 2 if new_arch(config) else 1
    if n not in (1, 2) or isinstance(n, bool):
        raise refuse("num_ln_in_parallel_attn", f"got {n!r}: Falcon has 1 or 2 norms in a parallel block")
    return int(n)


def kv_groups(config: Config) -> int:
    h = need(config, "num_attention_heads")
    if new_arch(config):
        return h if config.get("num_kv_heads") is None else need(config, "num_kv_heads")
    return 1 if flag(config, "multi_query", True) else h


def sizes(config: Config) -> Sizes:
    d, h = need(config, "hidden_size"), need(config, "num_attention_heads")
    g = kv_groups(config)
    heads_divide(d, h, g)
    if flag(config, "alibi", False):
        raise refuse("alibi", "true: attnlab runs Falcon with rotary positions, not ALiBi's per-head distance bias")
    if new_arch(config) and not parallel(config):
        raise refuse(
            "parallel_attn", "false with new_decoder_architecture true: Falcon's new architecture runs in parallel"
        )
    if not new_arch(config) and parallel(config) and norms_in_parallel(config) == 2:
        raise refuse("num_ln_in_parallel_attn", "2 without new_decoder_architecture: Falcon reads two norms only in it")
    if not new_arch(config) and not flag(config, "multi_query", True) and config.get("num_kv_heads") not in (None, h):
        raise refuse("num_kv_heads", f"got {config.get('num_kv_heads')!r}: without multi_query every head has its K/V")
    return Sizes(
        n_layers=need(config, "num_hidden_layers"),
        d_model=d,
        n_heads=h,
        n_kv_heads=g,
        d_head=d // h,
        vocab_size=need(config, "vocab_size"),
        max_positions=MAX_POSITIONS
        if config.get("max_position_embeddings") is None
        else need(config, "max_position_embeddings"),
        decoder=True,
    )


def d_mlp(config: Config) -> int:
    inner = config.get("ffn_hidden_size")
    return 4 * need(config, "hidden_size") if inner is None else need(config, "ffn_hidden_size")


def norm_names(config: Config) -> tuple[str, str]:
    """The norms attention and the MLP read, by name; the same name twice where they share one."""
    if not parallel(config):
        return "input_layernorm", "post_attention_layernorm"
    if norms_in_parallel(config) == 2:
        return "ln_attn", "ln_mlp"
    return "input_layernorm", "input_layernorm"


def shapes(config: Config) -> Shapes:
    s = sizes(config)
    d, m, dh = s.d_model, d_mlp(config), s.d_head
    bias = flag(config, "bias", False)
    out: Shapes = {"word_embeddings.weight": (s.vocab_size, d)}
    for i in range(s.n_layers):
        p = f"h.{i}"
        for norm in set(norm_names(config)):
            out |= {f"{p}.{norm}.weight": (d,), f"{p}.{norm}.bias": (d,)}
        rows = (s.n_heads + 2 * s.n_kv_heads) * dh
        linears = {"self_attention.query_key_value": (rows, d), "self_attention.dense": (d, d)}
        linears |= {"mlp.dense_h_to_4h": (m, d), "mlp.dense_4h_to_h": (d, m)}
        for name, shape in linears.items():
            out[f"{p}.{name}.weight"] = shape
            if bias:
                out[f"{p}.{name}.bias"] = (shape[0],)
    out |= {"ln_f.weight": (d,), "ln_f.bias": (d,)}
    if not flag(config, "tie_word_embeddings", True):
        out["lm_head.weight"] = (s.vocab_size, d)
    return out


def split_fused(t: Tensor, config: Config, s: Sizes) -> tuple[Tensor, Tensor, Tensor]:
    """query_key_value's rows (weight (rows, D) or bias (rows,)) -> Q (H d_head, ...), K and V (G d_head, ...) each,
    head after head, in the layout of the module docstring."""
    h, g, dh, rest = s.n_heads, s.n_kv_heads, s.d_head, t.shape[1:]
    if new_arch(config):
        rows = t.reshape(g, h // g + 2, dh, *rest)
        q, k, v = rows[:, :-2], rows[:, -2], rows[:, -1]
    elif flag(config, "multi_query", True):
        rows = t.reshape(h + 2, dh, *rest)
        q, k, v = rows[:-2], rows[-2], rows[-1]
    else:
        rows = t.reshape(h, 3, dh, *rest)
        q, k, v = rows[:, 0], rows[:, 1], rows[:, 2]
    return q.reshape(h * dh, *rest), k.reshape(g * dh, *rest), v.reshape(g * dh, *rest)


def block(config: Config, t: Mapping[str, Tensor], i: int, s: Sizes, act: Activation) -> Block:
    p, h, g, dh = f"h.{i}", s.n_heads, s.n_kv_heads, s.d_head
    eps = number(config, "layer_norm_epsilon", 1e-5)
    a = f"{p}.self_attention"
    w_q, w_k, w_v = split_fused(t[f"{a}.query_key_value.weight"], config, s)
    w = from_concatenated(w_q.T, w_k.T, w_v.T, linear_T(t[f"{a}.dense.weight"]), h, g)
    bias = flag(config, "bias", False)
    if bias:
        b_q, b_k, b_v = split_fused(t[f"{a}.query_key_value.bias"], config, s)
        w = replace(w, b_Q=b_q.reshape(h, dh), b_K=b_k.reshape(g, dh), b_V=b_v.reshape(g, dh), b_O=t[f"{a}.dense.bias"])
    w = replace(w, rotary=rotary(config, dh))
    before_attn, before_mlp = (LayerNorm(t[f"{p}.{n}.weight"], t[f"{p}.{n}.bias"], eps) for n in norm_names(config))
    return Block(
        attn=w,
        ln_pre=before_attn,
        ln_pre_mlp=before_mlp,
        parallel=parallel(config),
        mlp=FeedForward(
            W_in=linear_T(t[f"{p}.mlp.dense_h_to_4h.weight"]),
            b_in=t[f"{p}.mlp.dense_h_to_4h.bias"] if bias else None,
            W_out=linear_T(t[f"{p}.mlp.dense_4h_to_h.weight"]),
            b_out=t[f"{p}.mlp.dense_4h_to_h.bias"] if bias else None,
            act=act,
        ),
    )


def build(config: Config, t: Mapping[str, Tensor]) -> Mapped:
    s = sizes(config)
    act = activation(config, "activation")
    eps = number(config, "layer_norm_epsilon", 1e-5)
    W_U = t["word_embeddings.weight"] if flag(config, "tie_word_embeddings", True) else t["lm_head.weight"]
    final = LayerNorm(t["ln_f.weight"], t["ln_f.bias"], eps)
    attn_norm, mlp_norm = norm_names(config)
    if not parallel(config):
        flow = "a = x + Attention(LayerNorm(x)); x' = a + MLP(LayerNorm'(a))"
    elif attn_norm == mlp_norm:
        flow = "h = LayerNorm(x); x' = x + Attention(h) + MLP(h) (parallel, one norm)"
    else:
        flow = "x' = x + Attention(LayerNorm(x)) + MLP(LayerNorm'(x)) (parallel, two norms)"
    layout = "new architecture" if new_arch(config) else "multi-query" if s.n_kv_heads == 1 else "per head"
    rot = rotary(config, s.d_head)
    return Mapped(
        embedding=Embedding(W_E=t["word_embeddings.weight"]),
        network=Network(tuple(block(config, t, i, s, act) for i in range(s.n_layers)), Unembed(final, linear_T(W_U))),
        architecture=(
            f"Falcon pre-LN decoder: {flow}, {act}; fused query_key_value ({layout}): {s.n_heads} heads over "
            f"{s.n_kv_heads} K/V group{'s' if s.n_kv_heads != 1 else ''}; rotary on {rot.rot_dim} dims "
            f"(theta {rot.theta:g}); logits = LayerNorm(x) W_U; causal"
        ),
        default_masks=MaskSpec(causal=True),
        breaks=ROTARY_BREAKS,
    )


FAMILY = Family(model_types=("falcon",), prefix="transformer.", sizes=sizes, shapes=shapes, build=build)
