"""Q/K norms and the norms on a sublayer's output: the engine pieces against the maths written out here, then the
families built on them (qwen3, olmo2) against transformers' eager forward.

Pieces: an RMSNorm on each head's queries and keys before rotary (Qwen3, Gemma-3) or over the whole projection
(OLMo-2), through the dense pass, the long run's blockwise pass, a KV cache and `.to`; a block's post-attention
and post-feed-forward norms on what joins the residual (Gemma-2/3, OLMo-2), and the hooks that name them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file
from torch import Tensor

from engine.analysis.decode import decode
from engine.analysis.qk import qk_attribution
from engine.attention import AttentionWeights, attention, from_concatenated
from engine.blockwise import BlockMask
from engine.errors import InputError
from engine.feedforward import GatedFeedForward, MixtureOfExperts
from engine.forward import Block, KVCache, Network, forward
from engine.hooks import cache, patch_source
from engine.interventions import HeadAblation, Interventions, Patches
from engine.long import long_run
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointModel, load_checkpoint
from engine.models.families import olmo2, qwen3, qwen3_moe
from engine.norms import Norm, RMSNorm
from engine.rotary import Rotary
from tests.checkpoints import PROBE, QK_NORM_DECODERS, make_checkpoint
from tests.fixtures import make_app_client
from tests.helpers import assert_error

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


# --- the families: tiny random checkpoints made by transformers (tests/checkpoints.py), eager, float32 ---


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """The checkpoint directory of a family, made once per module for each set of config overrides."""
    made: dict[tuple[Any, ...], Path] = {}

    def get(family: str, **overrides: Any) -> Path:
        key = (family, *sorted((k, repr(v)) for k, v in overrides.items()))
        if key not in made:
            made[key] = make_checkpoint(family, tmp_path_factory.mktemp(family), **overrides)
        return made[key]

    return get


def diffs(model: CheckpointModel) -> dict[str, float]:
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    return dict(model.reference["max_abs_diff"])


# the norms each family's checkpoint must carry, moved off their initial ones, per layer
NORMS = {
    "qwen3": ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"),
    "olmo2": ("post_attention_layernorm", "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm"),
    "qwen3_moe": ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm"),
}


@pytest.mark.parametrize("family", QK_NORM_DECODERS)
def test_family_matches_transformers(family: str, directory: Callable[..., Path]) -> None:
    """Every layer's every head's weights and the logits within 1e-5 of transformers' eager forward, on a
    checkpoint whose every norm weight is off its initial value."""
    path = directory(family)
    tensors = load_file(str(path / "model.safetensors"))
    for i in range(2):
        for norm in NORMS[family]:
            weight = tensors[f"model.layers.{i}.{norm}.weight"]
            assert (weight - 1).abs().min() > 0 and (weight - 1).abs().max() > 0.1, (family, i, norm)
    assert (tensors["model.norm.weight"] - 1).abs().max() > 0.1
    model = load_checkpoint(family, path)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (family, d)
    assert model.info.family == family and model.capabilities.decode and "fixed_qk" in model.breaks


@pytest.mark.parametrize("family", QK_NORM_DECODERS)
def test_decode_with_cache_equals_full_pass(family: str, directory: Callable[..., Path]) -> None:
    """Position by position through the KV cache (keys normed and rotated once, as cached) = the whole pass."""
    model = load_checkpoint(family, directory(family), reference=False)
    inp = RunInput(text=PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float32)
    assert len(result.steps) > 8
    assert result.max_diff_vs_full < TOLERANCE, result.max_diff_vs_full


class RotatedFirst:
    """A q/k norm applied after rotary (the wrong order): rotary moved inside the norm. The reference check runs
    one whole pass from position 0, so the offset is 0."""

    def __init__(self, rotary: Rotary, norm: Norm) -> None:
        self.rotary, self.norm = rotary, norm

    def __call__(self, t: Tensor) -> Tensor:
        return self.norm(self.rotary(t))

    def to(self, device: torch.device | str, dtype: torch.dtype) -> RotatedFirst:
        return RotatedFirst(self.rotary, self.norm.to(device, dtype))


class PerHead:
    """OLMo-2's projection-wide weight used per head: each head's d_head normed alone, then scaled by its slice."""

    def __init__(self, weight: Tensor, eps: float) -> None:
        self.weight, self.eps = weight, eps

    def __call__(self, t: Tensor) -> Tensor:  # (B, n, S, e)
        return RMSNorm(torch.ones_like(self.weight[: t.shape[-1]]), self.eps)(t) * self.weight.view(-1, 1, t.shape[-1])

    def to(self, device: torch.device | str, dtype: torch.dtype) -> PerHead:
        return PerHead(self.weight.to(device=device, dtype=dtype), self.eps)


def skipped(b: Block) -> Block:
    return replace(b, attn=replace(b.attn, q_norm=None, k_norm=None))


def after_rotary(b: Block) -> Block:
    w = b.attn
    assert w.rotary is not None and w.q_norm is not None and w.k_norm is not None
    return replace(b, attn=replace(w, rotary=None, q_norm=RotatedFirst(w.rotary, w.q_norm),
                                   k_norm=RotatedFirst(w.rotary, w.k_norm)))  # fmt: skip


def per_head(b: Block) -> Block:
    w = b.attn
    assert isinstance(w.q_norm, RMSNorm) and isinstance(w.k_norm, RMSNorm)
    q, k = PerHead(w.q_norm.weight, w.q_norm.eps), PerHead(w.k_norm.weight, w.k_norm.eps)
    return replace(b, attn=replace(w, q_norm=q, k_norm=k, qk_norm_over="head"))


def post_norms_before(b: Block) -> Block:
    return replace(b, ln_pre=b.ln_post_attn, ln_pre_mlp=b.ln_post_mlp, ln_post_attn=None, ln_post_mlp=None)


def top_1(b: Block) -> Block:
    assert isinstance(b.mlp, MixtureOfExperts) and b.mlp.top_k > 1
    return replace(b, mlp=replace(b.mlp, top_k=1))


@pytest.mark.parametrize(
    ("family", "wrong"),
    [
        ("qwen3", skipped),
        ("qwen3", after_rotary),
        ("olmo2", skipped),
        ("olmo2", per_head),
        ("olmo2", post_norms_before),
        ("qwen3_moe", skipped),
        ("qwen3_moe", top_1),
    ],
)
def test_wrong_engine_fails_the_comparison(
    family: str, wrong: Callable[[Block], Block], directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same comparison on a deliberately wrong engine: q/k norm skipped, applied after rotary, OLMo-2's norm per
    head instead of over the projection, the post-norms moved before their sublayers, top-1 routing for top-k."""
    module = {"qwen3": qwen3, "olmo2": olmo2, "qwen3_moe": qwen3_moe}[family]
    original = module.block
    monkeypatch.setattr(module, "block", lambda *args: wrong(original(*args)))
    d = diffs(load_checkpoint(family, directory(family)))
    assert d["weights"] > WRONG, (family, wrong.__name__, d)


@pytest.mark.parametrize("family", QK_NORM_DECODERS)
def test_interventions_long_runs_and_refusals_on_the_families(family: str, directory: Callable[..., Path]) -> None:
    """A head ablation changes its layer's attention output by exactly -z_h W_O[h]; a long run keeps the queries
    and keys the dense pass scored (normed, then rotated); QK attribution says why it cannot split OLMo-2's."""
    model = load_checkpoint(family, directory(family), reference=False)
    inp = RunInput(text=PROBE)
    plain = model.run(inp, CPU, torch.float64)
    ablated = model.run(inp, CPU, torch.float64, interventions=Interventions(ablate=(HeadAblation(1, 2),)))
    assert torch.equal(plain.layers[0].resid_out, ablated.layers[0].resid_out)
    a, w = plain.layers[1].attn, plain.layers[1].weights
    assert w.W_O is not None
    torch.testing.assert_close(ablated.layers[1].attn.output, a.output - a.contexts[:, 2] @ w.W_O[2])
    dense = model.run(inp, CPU, torch.float32)
    long = long_run(model, inp, CPU, torch.float32, grid=8, pyramid_bytes=1 << 20)
    for kept, trace in zip(long.layers, dense.layers, strict=True):
        torch.testing.assert_close(kept.q, trace.attn.q[0], atol=TOLERANCE, rtol=0)
        torch.testing.assert_close(kept.k, trace.attn.k[0], atol=TOLERANCE, rtol=0)
    if family != "olmo2":
        return
    with pytest.raises(InputError) as refused:
        qk_attribution(dense, model.net.on(CPU, torch.float32), 1, 0, 5, 2)
    assert refused.value.field == "model" and "post-sublayer norms" in str(refused.value)


@torch.no_grad()
def test_mixture_of_experts_equals_qwen3_moes_block_and_says_which_experts() -> None:
    """MixtureOfExperts against transformers' Qwen3MoeSparseMoeBlock (top 2 of 6, renormalised): the same output
    and the same experts; top-1 routing in its place fails the same check."""
    import transformers as tf
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = tf.Qwen3MoeConfig(hidden_size=16, moe_intermediate_size=12, num_experts=6, num_experts_per_tok=2)
    config.norm_topk_prob = True
    ref = Qwen3MoeSparseMoeBlock(config).eval()
    torch.manual_seed(0)
    for p in ref.parameters():
        p.normal_(0, 0.5)
    e, m = 6, 12
    gate_up, down = ref.experts.gate_up_proj.detach(), ref.experts.down_proj.detach()  # (E, 2m, D), (E, D, m)
    ours = MixtureOfExperts(
        W_router=ref.gate.weight.detach().T,
        W_gate=gate_up[:, :m].transpose(1, 2),
        W_in=gate_up[:, m:].transpose(1, 2),
        W_out=down.transpose(1, 2),
        top_k=2,
        norm_topk=True,
    )
    x = torch.randn(2, 7, 16, generator=gen(50))
    out, routing = ours.routed(x)
    assert (out - ref(x)).abs().max() < TOLERANCE
    _, weights, chosen = ref.gate(x.reshape(-1, 16))
    assert torch.equal(routing.experts.reshape(-1, 2), chosen)
    torch.testing.assert_close(routing.weights.reshape(-1, 2), weights)
    assert routing.experts.unique().numel() > 2 and ours.n_experts == e and ours.d_mlp == m
    assert (replace(ours, top_k=1)(x) - ref(x)).abs().max() > WRONG
    moved = ours.to(CPU, F64)
    assert moved.W_gate.dtype == F64 and moved.top_k == 2 and moved.norm_topk


def test_the_experts_each_position_used_are_part_of_the_run(directory: Callable[..., Path]) -> None:
    """Every mixture layer's routing is in the run and its hook cache (TransformerLens's hook_expert_indices and
    hook_expert_weights); a layer in mlp_only_layers runs a dense GLU, has none, and still equals transformers."""
    model = load_checkpoint("qwen3_moe", directory("qwen3_moe", mlp_only_layers=[1]))
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d
    run = model.run(RunInput(text=PROBE), CPU, torch.float32)
    c = run.cache()
    s = len(run.tokens)
    assert c["blocks.0.mlp.hook_expert_indices"].shape == (1, s, 2)
    torch.testing.assert_close(c["blocks.0.mlp.hook_expert_weights"].sum(-1), torch.ones(1, s))
    assert "blocks.1.mlp.hook_expert_indices" not in c and run.layers[1].routing is None
    assert isinstance(model.net.on(CPU, torch.float32).blocks[1].mlp, GatedFeedForward)


@pytest.fixture(scope="module")
def api(directory: Callable[..., Path]) -> Iterator[TestClient]:
    """One app serving the three families' checkpoints (no reference check: the tests above make it)."""
    models = ",".join(f"{family}={directory(family)}" for family in QK_NORM_DECODERS)
    with make_app_client(models=models, reference=False) as client:
        yield client


@pytest.mark.parametrize("family", QK_NORM_DECODERS)
def test_the_api_runs_the_families_and_says_why_where_it_cannot(family: str, api: TestClient) -> None:
    """Every layer's weights, decoding, an ablation and QK attribution answer as for a LLaMA checkpoint; OLMo-2's
    QK attribution is a 422 naming model and the norm that stops it."""
    answer = api.post("/api/attention", json={"model": family, "text": PROBE})
    assert answer.status_code == 200, answer.text[:300]
    assert [len(layer["heads"]) for layer in answer.json()["layers"]] == [4, 4]
    for path, extra in [("/api/decode", {}), ("/api/intervene", {"ablate": [{"layer": 1, "head": 0}]})]:
        r = api.post(path, json={"model": family, "text": PROBE, **extra})
        assert r.status_code == 200, (path, r.text[:300])
    tokens = answer.json()["tokens"]
    corrupted = [*tokens[:3], tokens[5], *tokens[4:]]  # one token changed
    for hook in ("attn_out", "mlp_out"):  # what joins the residual, after OLMo-2's post-sublayer norms
        body = {"clean": {"model": family, "tokens": tokens}, "corrupted": {"model": family, "tokens": corrupted}}
        grid = api.post("/api/patch", json={**body, "metric": {"kind": "loss"}, "hook": hook})
        assert grid.status_code == 200, (hook, grid.text[:300])
        assert grid.json()["changed_positions"] == [3] and grid.json()["rows"] == 2
    cell = {"layer": 1, "head": 0, "query": 5, "key": 2}
    attributed = api.post("/api/qk-attribution", json={"model": family, "text": PROBE, **cell})
    if family != "olmo2":
        assert attributed.status_code == 200, attributed.text[:300]
        return
    assert "before adding" in assert_error(attributed, 422, "model")["message"]


def worst_sum(model: CheckpointModel, layer: int, cells: list[tuple[int, int]]) -> float:
    """The largest |sum of the QK attribution's terms - the score| over every head at these cells, in float64."""
    inp = RunInput(text=PROBE)
    run, net = model.run(inp, CPU, F64), model.network(inp, CPU, F64)
    worst = 0.0
    for head in range(run.layers[layer].attn.weights.shape[1]):
        for q, k in cells:
            r = qk_attribution(run, net, layer, head, q, k)
            worst = max(worst, abs(sum(t.value for t in r.terms) - r.score))
    return worst


def test_qk_attribution_freezes_the_q_k_norm(directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """With each q/k norm's scale frozen at the whole vector's, the terms sum to the score: per head (qwen3,
    qwen3_moe) and over the projection (OLMo-2's attention, its post-sublayer norms taken out so that the stream is a
    sum); the same sum without the frozen norm misses the score."""
    import engine.analysis.qk as qk

    cells = [(9, 0), (9, 4), (6, 6), (12, 3)]
    for family in ("qwen3", "qwen3_moe"):
        assert worst_sum(load_checkpoint(family, directory(family), reference=False), 1, cells) < 1e-9, family
    original = olmo2.block
    monkeypatch.setattr(olmo2, "block", lambda *a: replace(original(*a), ln_post_attn=None, ln_post_mlp=None))
    pre_norm_olmo = load_checkpoint("olmo2", directory("olmo2"), reference=False)
    assert worst_sum(pre_norm_olmo, 1, cells) < 1e-9
    monkeypatch.setattr(qk, "frozen_qk_norm", lambda terms, *rest: terms)
    assert worst_sum(load_checkpoint("qwen3", directory("qwen3"), reference=False), 1, cells[:1]) > WRONG
    assert worst_sum(pre_norm_olmo, 1, cells[:1]) > WRONG
