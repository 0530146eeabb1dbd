"""Softcapping: a score or a logit bounded to (-cap, cap) by a tanh, as Gemma-2 bounds its attention scores and
its final logits.

    capped = cap * tanh(t / cap)

Near 0 it is the identity (tanh u ~ u); far from 0 it flattens towards +-cap, so no score can grow without bound
and a softmax over capped scores is never one-hot by the size of a single score alone. It is monotone, so it keeps
the order of the scores in each row, but not their differences: a capped score is no longer a sum of q . k terms.
"""

from __future__ import annotations

from torch import Tensor


def softcap(t: Tensor, cap: float) -> Tensor:
    """cap * tanh(t / cap), a new tensor of t's shape."""
    return (t / cap).tanh_().mul_(cap)


def softcap_(t: Tensor, cap: float) -> Tensor:
    """cap * tanh(t / cap) written into t itself (the scores block the softmax reads next), and t returned."""
    return t.div_(cap).tanh_().mul_(cap)
