"""Where and in what precision the engine computes."""

from __future__ import annotations

import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def resolve_device(choice: str) -> torch.device:
    """auto -> cuda when a GPU is visible, else cpu; cuda without a GPU is an error."""
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA GPU; use 'auto' or 'cpu'")
    if choice not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda; got {choice!r}")
    if choice == "cuda":  # float32 means float32 on a GPU too: no TensorFloat-32 in matmuls or convolutions (a
        torch.backends.cuda.matmul.allow_tf32 = False  # ViT's patch embedding), whose 10-bit mantissa would move
        torch.backends.cudnn.allow_tf32 = False  # weights by about 1e-3 and break the equivalence with transformers
    return torch.device(choice)


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}; got {name!r}")
    return DTYPES[name]
