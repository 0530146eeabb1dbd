"""An image model's class logits, read from its last hidden state h (B, S, D) as the checkpoint's head reads it.

    cls                 logits = h[:, 0] W + b                                   ViT, DeiT (ForImageClassification)
    cls_and_dist        logits = (h[:, 0] W + b + h[:, 1] W_dist + b_dist) / 2   DeiT with its teacher's head
    cls_and_patch_mean  logits = [h[:, 0], mean of h over the patches] W + b     DINOv2 (registers left out)

W is stored as a torch Linear's (n_labels, D_in) weight; `labels` names the classes in order (config id2label).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

Reads = Literal["cls", "cls_and_dist", "cls_and_patch_mean"]


@dataclass(frozen=True)
class ImageClassifier:
    W: Tensor  # (n_labels, D_in) D_in = D, or 2 D for cls_and_patch_mean
    b: Tensor  # (n_labels,)
    reads: Reads
    labels: tuple[str, ...]  # the class of each logit
    first_patch: int = 1  # the first patch token (after [CLS], [DIST] and the registers)
    W_dist: Tensor | None = None  # (n_labels, D) cls_and_dist: the distillation token's own head
    b_dist: Tensor | None = None  # (n_labels,)

    def __call__(self, h: Tensor) -> Tensor:
        """h (B, S, D), the final hidden state -> logits (B, n_labels)."""
        W, b = self.W.to(h.dtype), self.b.to(h.dtype)
        if self.reads == "cls_and_patch_mean":
            pooled = torch.cat((h[:, 0], h[:, self.first_patch :].mean(dim=1)), dim=-1)  # (B, 2 D)
            return pooled @ W.T + b
        logits = h[:, 0] @ W.T + b
        if self.reads == "cls_and_dist":
            assert self.W_dist is not None and self.b_dist is not None
            logits = (logits + h[:, 1] @ self.W_dist.to(h.dtype).T + self.b_dist.to(h.dtype)) / 2
        return logits
