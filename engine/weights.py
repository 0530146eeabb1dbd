"""One attention layer's weights: its projections per head, as the maths names them (W_Q, W_K, W_V, W_O and
their biases), and what the layer declares besides (q/k norms, rotary, a scale, a score softcap, a given
pattern, unequal head widths, learned sink logits).

A type only, read by everything that builds or runs a layer (engine/attention.py, engine/unequal.py,
engine/forward.py, the model families); it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import torch
from torch import Tensor

from engine.norms import Norm
from engine.rotary import Rotary

QKNormOver = Literal["head", "projection"]


@dataclass(frozen=True)
class AttentionWeights:
    """One layer's projections, per head. Shapes use D = d_model, H = n_heads, G = n_kv_heads."""

    W_Q: Tensor  # (H, D, d_head)
    W_K: Tensor  # (G, D, d_head)
    W_V: Tensor  # (G, D, d_v)
    W_O: Tensor | None = None  # (H, d_v, d_out); None: the output is the concatenation of contexts
    b_Q: Tensor | None = None  # (H, d_head)
    b_K: Tensor | None = None  # (G, d_head)
    b_V: Tensor | None = None  # (G, d_v)
    b_O: Tensor | None = None  # (d_out,)
    q_norm: Norm | None = None  # on Q before rotary: weight (d_head,) per head, or (H * d_head,) over the projection
    k_norm: Norm | None = None  # on K likewise: (d_head,), or (G * d_head,) over the projection
    qk_norm_over: QKNormOver = "head"  # each head's d_head vector (Qwen3, Gemma-3), or the whole projection (OLMo-2)
    rotary: Rotary | None = None  # rotary position embeddings on Q and K (engine/rotary.py)
    scale: float | None = None  # what Q K^T is multiplied by when scaling is on; None: 1 / sqrt(d_head)
    softcap: float | None = None  # scores = softcap * tanh(scores / softcap) after the scale (Gemma-2); None: off
    pattern: Tensor | None = None  # (H, S, S_k) weights used as given in place of the softmax (a typed-in pattern)
    head_widths: tuple[int, ...] | None = None  # unequal heads (engine/unequal.py): each head's real d_head
    value_widths: tuple[int, ...] | None = None  # and d_v; the tensors are zero-padded to the widest
    sinks: Tensor | None = None  # (H,) one learned logit per head that joins each row's softmax, no value (gpt-oss)

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.W_K.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[2]

    @property
    def d_v(self) -> int:
        return self.W_V.shape[2]

    @property
    def d_out(self) -> int:
        return self.W_O.shape[2] if self.W_O is not None else self.n_heads * self.d_v

    def linear(self, name: str) -> Tensor:
        """W_Q, W_K, W_V or W_O as the one (out, in) matrix that F.linear takes: (H * d_head, D) for W_Q."""
        kept = self._linear_views.get(name)
        return kept if kept is not None else _linear_form(name, getattr(self, name))

    def flat_bias(self, name: str) -> Tensor | None:
        """b_Q, b_K or b_V as one vector, (H * d_head,) for b_Q; None where there is none."""
        kept = self._linear_views.get(name)
        b = getattr(self, name)
        return kept if kept is not None or b is None else b.reshape(-1)

    def to(self, device: torch.device | str, dtype: torch.dtype) -> AttentionWeights:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)

        return AttentionWeights(
            W_Q=self.W_Q.to(device=device, dtype=dtype),
            W_K=self.W_K.to(device=device, dtype=dtype),
            W_V=self.W_V.to(device=device, dtype=dtype),
            W_O=move(self.W_O),
            b_Q=move(self.b_Q),
            b_K=move(self.b_K),
            b_V=move(self.b_V),
            b_O=move(self.b_O),
            q_norm=None if self.q_norm is None else self.q_norm.to(device, dtype),
            k_norm=None if self.k_norm is None else self.k_norm.to(device, dtype),
            qk_norm_over=self.qk_norm_over,
            rotary=None if self.rotary is None else self.rotary.to(device, dtype),
            scale=self.scale,
            softcap=self.softcap,
            pattern=move(self.pattern),
            head_widths=self.head_widths,
            value_widths=self.value_widths,
            sinks=move(self.sinks),
        )

    @cached_property
    def _linear_views(self) -> dict[str, Tensor]:
        """The linear forms that are views of the fields (from_concatenated makes them so), kept because a view
        follows any change made to its field in place; a form that needs a copy is made on each call instead."""
        kept = {}
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V"):
            t = getattr(self, name)
            if t is None:
                continue
            form = t.reshape(-1) if name.startswith("b_") else _linear_form(name, t)
            if form.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                kept[name] = form
        return kept


def _linear_form(name: str, W: Tensor) -> Tensor:
    """(n, D, e) -> (n * e, D) for W_Q, W_K, W_V; (H, d_v, d_out) -> (d_out, H * d_v) for W_O."""
    if name == "W_O":
        return W.reshape(-1, W.shape[2]).t()
    return W.transpose(0, 1).reshape(W.shape[1], -1).t()
