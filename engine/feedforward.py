"""The feed-forward a block may run after attention, each a small frozen piece.

    FeedForward         act(x W_in + b_in) W_out + b_out                           BERT, GPT-2 (gelu)
    GatedFeedForward    (act(x W_gate + b_gate) * (x W_in + b_in)) W_out + b_out   LLaMA (silu: SwiGLU), Gemma (GeGLU)
    MixtureOfExperts    sum over the top k experts e of p_e GLU_e(x)                 Qwen3-MoE, gpt-oss

act is one of ACTIVATIONS: gelu (exact, erf), gelu_tanh (the tanh approximation), silu (x sigmoid(x)), relu.
Biases are optional (None: no bias). x is (B, S, D); the hidden width is d_mlp (each expert's, in a mixture).
A mixture's routing (which experts each position used, with what weight) is part of its answer: `feed_forward`.
A mixture's experts may instead gate with gpt-oss's clamped SwiGLU (act "clamped_swiglu", `clamped_glu`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Activation = Literal["gelu", "gelu_tanh", "silu", "relu"]
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "relu": F.relu,
}


# gpt-oss's experts: `clamped_glu`, with its alpha and limit
CLAMPED_SWIGLU: Literal["clamped_swiglu"] = "clamped_swiglu"
ExpertActivation = Activation | Literal["clamped_swiglu"]


def clamped_glu(gate: Tensor, up: Tensor, alpha: float, limit: float) -> Tensor:
    """gpt-oss's expert gate: g = min(gate, limit), u = clamp(up, -limit, limit), g sigmoid(alpha g) (u + 1)."""
    g = gate.clamp(max=limit)
    u = up.clamp(min=-limit, max=limit)
    return g * torch.sigmoid(g * alpha) * (u + 1)


def _linear(x: Tensor, W: Tensor, b: Tensor | None) -> Tensor:
    return x @ W if b is None else x @ W + b


def _moved(piece: MLP, device: torch.device | str, dtype: torch.dtype) -> dict[str, Any]:
    """Every tensor field of `piece` on `device` in `dtype`, by name."""
    out: dict[str, Any] = {}
    for f in fields(piece):
        t = getattr(piece, f.name)
        if isinstance(t, Tensor):
            out[f.name] = t.to(device=device, dtype=dtype)
    return out


@dataclass(frozen=True)
class FeedForward:
    """act(x W_in + b_in) W_out + b_out; the exact (erf) gelu unless `act` says otherwise."""

    W_in: Tensor  # (D, d_mlp)
    b_in: Tensor | None  # (d_mlp,)
    W_out: Tensor  # (d_mlp, D)
    b_out: Tensor | None  # (D,)
    act: Activation = "gelu"

    def __post_init__(self) -> None:
        assert self.act in ACTIVATIONS, self.act

    def __call__(self, x: Tensor) -> Tensor:
        return _linear(ACTIVATIONS[self.act](_linear(x, self.W_in, self.b_in)), self.W_out, self.b_out)

    @property
    def d_mlp(self) -> int:
        return self.W_in.shape[1]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> FeedForward:
        return replace(self, **_moved(self, device, dtype))


@dataclass(frozen=True)
class GatedFeedForward:
    """(act(x W_gate + b_gate) * (x W_in + b_in)) W_out + b_out: a GLU; silu makes it SwiGLU, gelu GeGLU."""

    W_gate: Tensor  # (D, d_mlp)
    W_in: Tensor  # (D, d_mlp)
    W_out: Tensor  # (d_mlp, D)
    b_gate: Tensor | None = None  # (d_mlp,)
    b_in: Tensor | None = None  # (d_mlp,)
    b_out: Tensor | None = None  # (D,)
    act: Activation = "silu"

    def __post_init__(self) -> None:
        assert self.act in ACTIVATIONS, self.act

    def __call__(self, x: Tensor) -> Tensor:
        gate = ACTIVATIONS[self.act](_linear(x, self.W_gate, self.b_gate))
        return _linear(gate * _linear(x, self.W_in, self.b_in), self.W_out, self.b_out)

    @property
    def d_mlp(self) -> int:
        return self.W_in.shape[1]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> GatedFeedForward:
        return replace(self, **_moved(self, device, dtype))


@dataclass(frozen=True)
class Routing:
    """Which experts each position used, and their weights in its sum. B = batch, S = positions."""

    experts: Tensor  # (B, S, k) expert ids, the most probable first
    weights: Tensor  # (B, S, k) each one's weight p_e
    n_experts: int = 0  # the experts the layer chooses among


@dataclass(frozen=True)
class MixtureOfExperts:
    """Top-k routing over E gated experts, each a GLU with its own weights (stacked along a first axis E):

        p       = softmax(x W_router + b_router)      (B, S, E) every expert's probability, in float32 at least
        top     = the k experts of largest p          their p divided by their sum where norm_topk
        MoE(x)  = sum_{e in top} p_e GLU_e(x)         GLU_e(x) = (act(x W_gate[e] + b_gate[e]) * (x W_in[e] +
                                                      b_in[e])) W_out[e] + b_out[e]

    With act "clamped_swiglu" (gpt-oss) GLU_e(x) = clamped_glu(x W_gate[e] + b_gate[e], x W_in[e] + b_in[e]) W_out[e]
    + b_out[e], with the mixture's alpha and limit. gpt-oss takes the softmax over the top k logits alone, which is
    p renormalised over the top k (norm_topk). Biases are optional (None: none). Each expert runs on the positions
    that chose it only, as the model computes it.
    """

    W_router: Tensor  # (D, E)
    W_gate: Tensor  # (E, D, d_mlp)
    W_in: Tensor  # (E, D, d_mlp)
    W_out: Tensor  # (E, d_mlp, D)
    top_k: int  # experts per position (config num_experts_per_tok)
    norm_topk: bool = False  # the top k probabilities renormalised to sum 1 (Qwen3-MoE's norm_topk_prob)
    act: ExpertActivation = "silu"
    b_router: Tensor | None = None  # (E,)
    b_gate: Tensor | None = None  # (E, d_mlp)
    b_in: Tensor | None = None  # (E, d_mlp)
    b_out: Tensor | None = None  # (E, D)
    alpha: float = 1.702  # clamped_swiglu's sigmoid gain (gpt-oss swiglu_alpha)
    limit: float = 7.0  # clamped_swiglu's clamp (gpt-oss swiglu_limit)

    def __post_init__(self) -> None:
        assert self.act in ACTIVATIONS or self.act == CLAMPED_SWIGLU, self.act
        assert 1 <= self.top_k <= self.n_experts, (self.top_k, self.n_experts)

    @property
    def n_experts(self) -> int:
        return self.W_router.shape[1]

    @property
    def d_mlp(self) -> int:
        return self.W_in.shape[2]

    def route(self, x: Tensor) -> Routing:
        """x (B, S, D) -> the k experts of each position and their weights."""
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        p = torch.softmax(_linear(x, self.W_router, self.b_router).to(work), dim=-1)  # (B, S, E)
        top, experts = p.topk(self.top_k, dim=-1)  # (B, S, k) each
        if self.norm_topk:
            top = top / top.sum(dim=-1, keepdim=True)
        return Routing(experts, top.to(x.dtype), self.n_experts)

    def routed(self, x: Tensor) -> tuple[Tensor, Routing]:
        """x (B, S, D) -> MoE(x) (B, S, D) and the routing it used."""
        r = self.route(x)
        flat = x.reshape(-1, x.shape[-1])  # (B * S, D)
        chosen, weights = r.experts.reshape(-1, self.top_k), r.weights.reshape(-1, self.top_k)
        y = torch.zeros_like(flat)
        for e in chosen.unique().tolist():  # the experts in order, each on the positions that chose it
            rows, slot = torch.where(chosen == e)
            out = self.expert(e, flat[rows])
            y.index_add_(0, rows, out * weights[rows, slot, None])
        return y.view_as(x), r

    def expert(self, e: int, h: Tensor) -> Tensor:
        """GLU_e on the rows h (N, D) -> (N, D)."""

        def bias(b: Tensor | None) -> Tensor | None:
            return None if b is None else b[e]

        gate = _linear(h, self.W_gate[e], bias(self.b_gate))
        up = _linear(h, self.W_in[e], bias(self.b_in))
        if self.act == CLAMPED_SWIGLU:
            inner = clamped_glu(gate, up, self.alpha, self.limit)
        else:
            inner = ACTIVATIONS[self.act](gate) * up
        return _linear(inner, self.W_out[e], bias(self.b_out))

    def __call__(self, x: Tensor) -> Tensor:
        return self.routed(x)[0]

    def to(self, device: torch.device | str, dtype: torch.dtype) -> MixtureOfExperts:
        return replace(self, **_moved(self, device, dtype))


MLP = FeedForward | GatedFeedForward | MixtureOfExperts


def feed_forward(mlp: MLP, x: Tensor) -> tuple[Tensor, Routing | None]:
    """The feed-forward's output on x (B, S, D), with the routing where it is a mixture of experts."""
    return mlp.routed(x) if isinstance(mlp, MixtureOfExperts) else (mlp(x), None)
