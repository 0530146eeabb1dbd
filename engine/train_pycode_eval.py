"""What engine/train_pycode.py measures of a checkpoint it saved: the held-out loss, the head scores /api/heads
answers, and how closely attnlab's engine computes it against transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from engine.models.pycode import DEFAULT_TEXT  # measured on as served

EOT = "<|endoftext|>"
PROBE_LEN = 24  # the one segment length the card's probe scores are measured on


@torch.no_grad()
def held_out_loss(model: Any, tok: Tokenizer, texts: list[str], context: int) -> tuple[float, int]:
    """Mean next-token loss in nats over the held-out files (each cut into windows after <|endoftext|>), and
    the number of tokens predicted."""
    eot = tok.token_to_id(EOT)
    total, count = 0.0, 0
    device = next(model.parameters()).device
    model.eval()
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        for start in range(0, len(ids), context - 1):
            window = torch.tensor([[eot, *ids[start : start + context - 1]]], device=device)
            if window.shape[1] < 2:
                continue
            logits = model(input_ids=window).logits[0, :-1]
            total += float(F.cross_entropy(logits, window[0, 1:], reduction="sum"))
            count += window.shape[1] - 1
    model.train()
    return total / count, count


def measure_heads(out: Path) -> dict:
    """The head scores GET /api/heads answers for the checkpoint in `out`, loaded as attnlab serves it: on the
    seeded probe (segment length 24, seed 0; every score) and on DEFAULT_TEXT (previous-token, bracket match).
    The best head of each kind as {"head": "layer.head", "score": s}."""
    from engine.analysis.heads import ProbeSpec, head_type_scores
    from engine.models.base import RunInput
    from engine.models.checkpoint import load_checkpoint

    model = load_checkpoint("pycode", out, reference=False)
    cpu = torch.device("cpu")
    with torch.inference_mode():
        probe = head_type_scores(model, cpu, torch.float32, probe=ProbeSpec((PROBE_LEN,), seed=0))
        text = head_type_scores(model, cpu, torch.float32, inp=RunInput(text=DEFAULT_TEXT))
    tables = {
        "previous_token": (probe, "previous_token"),
        "induction": (probe, "induction"),
        "previous_token_on_default_text": (text, "previous_token"),
        "bracket_match": (text, "bracket_match"),
    }
    report = {}
    for name, (table, key) in tables.items():
        rows = [r for layer in table for r in layer if r[key] is not None]
        best = max(rows, key=lambda r: float(r[key]))  # type: ignore[arg-type]
        report[name] = {"head": f"{best['layer']}.{best['head']}", "score": round(float(best[key]), 4)}  # type: ignore[arg-type]
    return report


def measure_reference(out: Path) -> dict:
    """How closely attnlab's engine computes the checkpoint in `out` against transformers' own forward pass
    (engine/models/reference.py), as a checkpoint's load measures it."""
    from engine.models.checkpoint import load_checkpoint

    return dict(load_checkpoint("pycode", out, reference=True).reference or {})
