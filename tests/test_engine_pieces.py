"""The norms and feed-forwards a block is built from (engine/norms.py, engine/feedforward.py), each against torch's
or transformers' own implementation, with a deliberately wrong piece failing the same check."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from engine.attention import from_concatenated
from engine.feedforward import FeedForward, GatedFeedForward
from engine.forward import Block, Network, forward
from engine.norms import LayerNorm, RMSNorm

CPU = torch.device("cpu")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 48), s=st.integers(1, 9), seed=st.integers(0, 2**16), eps=st.sampled_from([1e-6, 1e-5]))
def test_rms_norm_equals_torchs(d: int, s: int, seed: int, eps: float) -> None:
    x = torch.randn(2, s, d, generator=gen(seed), dtype=torch.float64)
    ref = nn.RMSNorm(d, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(d, generator=gen(seed + 1), dtype=torch.float64))
    ours = RMSNorm(ref.weight.detach().clone(), eps)
    torch.testing.assert_close(ours(x), ref(x).detach(), rtol=1e-12, atol=1e-12)
    # LayerNorm's centring is not RMSNorm: with a mean in the rows, the two differ
    wrong = LayerNorm(ref.weight.detach().clone(), torch.zeros(d, dtype=torch.float64), eps)
    if d > 1:
        assert not torch.allclose(wrong(x + 3.0), ref(x + 3.0).detach(), atol=1e-6)


def test_rms_norm_with_offset_equals_gemmas() -> None:
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    d = 32
    ref = GemmaRMSNorm(d, eps=1e-6)  # it works in float32 whatever its input
    with torch.no_grad():
        ref.weight.copy_(torch.randn(d, generator=gen(3)) * 0.1)
    x = torch.randn(2, 5, d, generator=gen(4))
    ours = RMSNorm(ref.weight.detach().clone(), 1e-6, offset=True)
    torch.testing.assert_close(ours(x), ref(x).detach(), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(RMSNorm(ref.weight.detach().clone(), 1e-6)(x), ref(x).detach(), atol=1e-3)


@pytest.mark.parametrize(("act", "reference"), [
    ("gelu", lambda x: F.gelu(x)),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    ("silu", lambda x: x * torch.sigmoid(x)),
    ("relu", lambda x: x.clamp_min(0)),
])  # fmt: skip
def test_feed_forward_takes_its_activation(act: str, reference) -> None:  # type: ignore[no-untyped-def]
    d, m = 8, 24
    W_in, W_out = torch.randn(d, m, generator=gen(1)).double(), torch.randn(m, d, generator=gen(2)).double()
    b_in, b_out = torch.randn(m, generator=gen(3)).double(), torch.randn(d, generator=gen(4)).double()
    x = torch.randn(2, 5, d, generator=gen(5)).double()
    ff = FeedForward(W_in, b_in, W_out, b_out, act)  # type: ignore[arg-type]
    torch.testing.assert_close(ff(x), reference(x @ W_in + b_in) @ W_out + b_out, rtol=1e-12, atol=1e-12)
    if act != "gelu":  # the exact gelu is not what this activation computes
        assert not torch.allclose(FeedForward(W_in, b_in, W_out, b_out)(x), ff(x), atol=1e-6)


def test_gelu_tanh_is_not_the_exact_gelu() -> None:
    x = torch.linspace(-4, 4, 101, dtype=torch.float64)
    eye = torch.eye(1, dtype=torch.float64)
    exact = FeedForward(eye, None, eye, None, "gelu")(x[:, None])
    tanh = FeedForward(eye, None, eye, None, "gelu_tanh")(x[:, None])
    assert 1e-5 < float((exact - tanh).abs().max()) < 1e-2


class SwiGLU(nn.Module):
    """LLaMA's MLP written out by hand: down(silu(gate(x)) * up(x))."""

    def __init__(self, d: int, m: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, m, bias=False)
        self.up = nn.Linear(d, m, bias=False)
        self.down = nn.Linear(m, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def test_gated_feed_forward_equals_swiglu_and_llamas_mlp() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    d, m = 16, 40
    torch.manual_seed(0)
    ref = SwiGLU(d, m).double()
    ours = GatedFeedForward(
        W_gate=ref.gate.weight.detach().T, W_in=ref.up.weight.detach().T, W_out=ref.down.weight.detach().T
    )
    x = torch.randn(2, 7, d, generator=gen(9), dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x).detach(), rtol=1e-12, atol=1e-12)
    llama = LlamaMLP(
        LlamaConfig(
            hidden_size=d,
            intermediate_size=m,
            num_attention_heads=2,
            num_key_value_heads=2,
            hidden_act="silu",
            mlp_bias=False,
        )
    ).double()
    with torch.no_grad():
        llama.gate_proj.weight.copy_(ref.gate.weight)
        llama.up_proj.weight.copy_(ref.up.weight)
        llama.down_proj.weight.copy_(ref.down.weight)
    torch.testing.assert_close(ours(x), llama(x).detach(), rtol=1e-12, atol=1e-12)
    swapped = dataclasses.replace(ours, W_gate=ours.W_in, W_in=ours.W_gate)  # the gate on the wrong branch
    assert not torch.allclose(swapped(x), ref(x).detach(), atol=1e-6)
    assert ours.d_mlp == m


def test_a_block_with_rms_norm_and_a_gated_mlp_runs_and_moves() -> None:
    d, h = 8, 2
    w = torch.randn(d, d, generator=gen(1), dtype=torch.float64)
    attn = from_concatenated(w, w, w, w, h)
    mlp = GatedFeedForward(*(torch.randn(*shape, generator=gen(i), dtype=torch.float64)
                             for i, shape in enumerate([(d, 12), (d, 12), (12, d)])))  # fmt: skip
    ln = RMSNorm(torch.ones(d, dtype=torch.float64))
    net = Network(
        (Block(attn=attn, ln_pre=ln, mlp=mlp, ln_mlp=RMSNorm(torch.zeros(d, dtype=torch.float64), offset=True)),)
    )
    x = torch.randn(1, 4, d, generator=gen(7), dtype=torch.float64)
    out = forward(x, net, torch.ones(4, 4, dtype=torch.bool)).layers[0]
    mid = x + out.attn.output
    assert out.mlp_out is not None
    torch.testing.assert_close(out.mlp_out, mlp(mid))
    torch.testing.assert_close(out.resid_out, RMSNorm(torch.ones(d, dtype=torch.float64))(mid + mlp(mid)))
    moved = net.to(CPU, torch.float32).blocks[0]
    assert isinstance(moved.mlp, GatedFeedForward) and moved.mlp.W_gate.dtype == torch.float32
    assert isinstance(moved.ln_mlp, RMSNorm) and moved.ln_mlp.offset
