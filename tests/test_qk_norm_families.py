"""Q/K norms and the norms on a sublayer's output: the engine pieces against the maths written out here, then the
families built on them (qwen3, olmo2) against transformers' eager forward.

Pieces: an RMSNorm on each head's queries and keys before rotary (Qwen3, Gemma-3) or over the whole projection
(OLMo-2), through the dense pass, the long run's blockwise pass, a KV cache and `.to`; a block's post-attention
and post-feed-forward norms on what joins the residual (Gemma-2/3, OLMo-2), and the hooks that name them.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from engine.attention import AttentionWeights, attention, from_concatenated
from engine.blockwise import BlockMask
from engine.feedforward import GatedFeedForward
from engine.forward import Block, KVCache, Network, forward
from engine.hooks import cache, patch_source
from engine.interventions import Interventions, Patches
from engine.norms import RMSNorm
from engine.rotary import Rotary

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, scale: float = 1.0) -> Tensor:
    return torch.randn(*shape, generator=gen(seed), dtype=F64) * scale


def rms(t: Tensor, w: Tensor, eps: float = 1e-6) -> Tensor:
    """RMSNorm over the last axis, written out."""
    return t / torch.sqrt(t.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def layer(over: str, d: int = 16, h: int = 4, g: int = 2, dh: int = 8, seed: int = 0) -> AttentionWeights:
    """A layer of h heads over g K/V groups of width dh (h * dh != d), with q/k norms `over` and rotary."""
    w = from_concatenated(
        randn(d, h * dh, seed=seed),
        randn(d, g * dh, seed=seed + 1),
        randn(d, g * dh, seed=seed + 2),
        randn(h * dh, d, seed=seed + 3),
        h,
        g,
    )
    q_width, k_width = (dh, dh) if over == "head" else (h * dh, g * dh)
    return replace(
        w,
        q_norm=RMSNorm(1 + randn(q_width, seed=seed + 4, scale=0.3)),
        k_norm=RMSNorm(1 + randn(k_width, seed=seed + 5, scale=0.3)),
        qk_norm_over=over,  # type: ignore[arg-type]
        rotary=Rotary(rot_dim=dh),
    )


def by_hand(x: Tensor, w: AttentionWeights, *, norm_after_rotary: bool = False) -> Tensor:
    """The layer's causal weights (B, H, S, S) from the maths: project, norm (per head or over the projection),
    rotate, scale, softmax. norm_after_rotary: the wrong order, a control."""
    assert w.q_norm is not None and w.k_norm is not None and w.rotary is not None
    b, s, _ = x.shape
    q = torch.einsum("bsd,hde->bhse", x, w.W_Q)
    k = torch.einsum("bsd,gde->bgse", x, w.W_K)

    def norm(t: Tensor, n: RMSNorm) -> Tensor:
        if w.qk_norm_over == "head":
            return rms(t, n.weight)
        flat = t.transpose(1, 2).reshape(b, s, -1)
        return rms(flat, n.weight).reshape(b, s, t.shape[1], -1).transpose(1, 2)

    if norm_after_rotary:
        q, k = norm(w.rotary(q), w.q_norm), norm(w.rotary(k), w.k_norm)
    else:
        q, k = w.rotary(norm(q, w.q_norm)), w.rotary(norm(k, w.k_norm))
    k = k.repeat_interleave(w.n_heads // w.n_kv_heads, dim=1)
    scores = q @ k.transpose(-1, -2) / w.d_head**0.5
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


@torch.no_grad()
def test_qk_norm_per_head_and_over_the_projection_are_the_maths() -> None:
    x = randn(2, 9, 16, seed=10)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    for over in ("head", "projection"):
        w = layer(over)
        out = attention(x, w, causal)
        assert (out.weights - by_hand(x, w)).abs().max() < TOLERANCE, over
        # the same check fails on the wrong engine: the norm skipped, after rotary, over the other span
        skipped = replace(w, q_norm=None, k_norm=None)
        assert (attention(x, skipped, causal).weights - by_hand(x, w)).abs().max() > WRONG, over
        assert (out.weights - by_hand(x, w, norm_after_rotary=True)).abs().max() > WRONG, over
    per_head = layer("head")
    assert per_head.q_norm is not None and per_head.k_norm is not None
    widened = replace(  # each head's weight repeated over the projection: the same weights, another span
        per_head,
        q_norm=RMSNorm(per_head.q_norm.weight.repeat(4)),
        k_norm=RMSNorm(per_head.k_norm.weight.repeat(2)),
        qk_norm_over="projection",
    )
    assert (attention(x, widened, causal).weights - by_hand(x, per_head)).abs().max() > WRONG


@torch.no_grad()
def test_qk_norm_hooks_name_the_projection_the_norm_and_the_rotation() -> None:
    """TransformerLens's names: hook_q the projection, attn.q_norm.hook_normalized after the norm, hook_rot_q
    after rotary (what the scores read); likewise for k."""
    w = layer("projection")
    x = randn(1, 7, 16, seed=11)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    result = forward(x, Network((Block(attn=w),)), causal)
    c = cache(result)
    p = "blocks.0.attn"
    q_proj = torch.einsum("bsd,hde->bshe", x, w.W_Q)
    torch.testing.assert_close(c[f"{p}.hook_q"], q_proj)
    normed = rms(q_proj.reshape(1, 7, -1), w.q_norm.weight).reshape(q_proj.shape)  # type: ignore[union-attr]
    torch.testing.assert_close(c[f"{p}.q_norm.hook_normalized"], normed)
    torch.testing.assert_close(c[f"{p}.hook_rot_q"], w.rotary(normed.transpose(1, 2)).transpose(1, 2))  # type: ignore[misc]
    assert c[f"{p}.k_norm.hook_normalized"].shape == c[f"{p}.hook_k"].shape == (1, 7, 2, 8)
    assert torch.equal(c[f"{p}.hook_rot_q"].transpose(1, 2), result.layers[0].attn.q)
    without = cache(forward(x, Network((Block(attn=replace(w, q_norm=None, k_norm=None)),)), causal))
    assert not any("norm" in name for name in without)


@torch.no_grad()
def test_qk_norm_moves_with_to_and_runs_the_long_path_and_the_cache() -> None:
    w = layer("head", seed=3)
    moved = w.to(CPU, torch.float32)
    assert isinstance(moved.q_norm, RMSNorm) and moved.q_norm.weight.dtype == torch.float32
    assert isinstance(moved.k_norm, RMSNorm) and moved.qk_norm_over == "head"
    x = randn(1, 12, 16, seed=12)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    dense = attention(x, w, causal)
    long = attention(x, w, BlockMask(12, 12, causal=True))
    assert (long.output - dense.output).abs().max() < TOLERANCE
    # decoding through a KV cache: the cached keys are normed and rotated once, the new ones normed alone
    net = Network((Block(attn=w), Block(attn=layer("projection", seed=5))))
    full = forward(x, net, causal)
    kv = KVCache.empty(2)
    for i in range(12):
        step = forward(x[:, i : i + 1], net, torch.ones(1, i + 1, dtype=torch.bool), cache=kv)
        assert step.kv is not None
        kv = step.kv
        assert (step.layers[-1].resid_out[:, 0] - full.layers[-1].resid_out[:, i]).abs().max() < TOLERANCE, i


def post_norm_block(seed: int = 20, d: int = 16) -> Block:
    mlp = GatedFeedForward(randn(d, 24, seed=seed), randn(d, 24, seed=seed + 1), randn(24, d, seed=seed + 2))
    return Block(
        attn=from_concatenated(*(randn(d, d, seed=seed + 3 + i) for i in range(4)), 4),
        ln_pre=RMSNorm(1 + randn(d, seed=seed + 7, scale=0.3)),
        ln_pre_mlp=RMSNorm(1 + randn(d, seed=seed + 8, scale=0.3)),
        mlp=mlp,
        ln_post_attn=RMSNorm(1 + randn(d, seed=seed + 9, scale=0.3)),
        ln_post_mlp=RMSNorm(1 + randn(d, seed=seed + 10, scale=0.3)),
    )


@torch.no_grad()
def test_post_norms_act_on_what_joins_the_residual() -> None:
    """mid = x + Norm_post_attn(attn(Norm_pre(x))), out = mid + Norm_post_mlp(MLP(Norm_pre_mlp(mid))), with the
    hooks: hook_attn_out and hook_mlp_out are what joined (TransformerLens's meaning), ln1_post / ln2_post."""
    block = post_norm_block()
    assert block.ln_pre is not None and block.ln_pre_mlp is not None and block.mlp is not None
    assert block.ln_post_attn is not None and block.ln_post_mlp is not None
    x = randn(1, 6, 16, seed=21)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    result = forward(x, Network((block,)), causal)
    t = result.layers[0]
    a = attention(block.ln_pre(x), block.attn, causal).output
    mid = x + block.ln_post_attn(a)
    out = mid + block.ln_post_mlp(block.mlp(block.ln_pre_mlp(mid)))
    assert (t.resid_out - out).abs().max() < TOLERANCE
    # the control: the post norms moved before their sublayers, on what each reads, fails the same check
    moved_before = Block(attn=block.attn, ln_pre=block.ln_post_attn, ln_pre_mlp=block.ln_post_mlp, mlp=block.mlp)
    assert (forward(x, Network((moved_before,)), causal).layers[0].resid_out - out).abs().max() > WRONG
    c = cache(result)
    assert torch.equal(c["blocks.0.hook_attn_out"], c["blocks.0.ln1_post.hook_normalized"])
    assert torch.equal(c["blocks.0.hook_mlp_out"], c["blocks.0.ln2_post.hook_normalized"])
    torch.testing.assert_close(c["blocks.0.hook_resid_mid"], x + c["blocks.0.hook_attn_out"])
    torch.testing.assert_close(c["blocks.0.hook_resid_post"], mid + c["blocks.0.hook_mlp_out"])
    moved = block.to(CPU, torch.float32)
    assert isinstance(moved.ln_post_attn, RMSNorm) and moved.ln_post_attn.weight.dtype == torch.float32
    assert isinstance(moved.ln_post_mlp, RMSNorm) and moved.ln_post_mlp.weight.dtype == torch.float32


@torch.no_grad()
def test_patching_a_post_normed_output_patches_what_joins() -> None:
    """attn_out and mlp_out patches replace what joins the residual (after the post norm): every position of layer
    0 patched from a clean run gives the clean run's hook there, and the stream takes it as it is."""
    net = Network((post_norm_block(seed=30), post_norm_block(seed=40)))
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    clean_x, dirty_x = randn(1, 5, 16, seed=31), randn(1, 5, 16, seed=32)
    clean = forward(clean_x, net, causal)
    cells = (tuple((0, p) for p in range(5)),)
    for hook in ("attn_out", "mlp_out"):
        patch = Patches(hook, cells, patch_source(clean, hook))  # type: ignore[arg-type]
        patched = forward(dirty_x, net, causal, interventions=Interventions(patch=patch))
        name = f"blocks.0.hook_{hook}"
        assert torch.equal(cache(patched)[name], cache(clean)[name]), hook
        assert (cache(forward(dirty_x, net, causal))[name] - cache(clean)[name]).abs().max() > WRONG, hook
        t = patched.layers[0]
        joined = t.resid_mid - t.resid_in if hook == "attn_out" else t.resid_out - t.resid_mid
        torch.testing.assert_close(joined, cache(clean)[name])
