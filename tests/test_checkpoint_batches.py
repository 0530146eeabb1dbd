"""A batch on a windowed checkpoint (Mistral's sliding window as its default mask): a short item's padding rows
lie further than the window from any real token and have no key; they are nobody's query, so the batch runs, and
every real row equals the item run alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.errors import InputError
from engine.masks import MaskSpec
from engine.models.base import RunInput
from engine.models.checkpoint import load_checkpoint
from tests.checkpoints import make_checkpoint

CPU = torch.device("cpu")
LONG = "def f(x):\n    return [x, x + 1, x + 2, x + 3]"
SHORT = "x = 1"


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("mistral", tmp_path_factory.mktemp("mistral"))


def test_windowed_batch_runs_and_real_rows_equal_each_item_alone(mistral: Path) -> None:
    model = load_checkpoint("mistral", mistral, reference=False)
    window = model.info.default_masks.window if model.info.default_masks else None
    assert window is not None
    run = model.run(RunInput(texts=[LONG, SHORT]), CPU, torch.float32)
    short = model.run(RunInput(text=SHORT), CPU, torch.float32)
    n = len(short.tokens)
    assert len(run.tokens) - n > window  # padding beyond the window: rows with no key
    for batched, alone in zip(run.layers, short.layers, strict=True):
        diff = (batched.attn.weights[1, :, :n, :n] - alone.attn.weights[0]).abs().max()
        assert float(diff) < 1e-5
        keyless = ~run.eligible[1].any(dim=-1)  # padding rows past the window: zero weights
        assert bool(keyless[n:].any()) and not bool(keyless[:n].any())
        assert float(batched.attn.weights[1, :, keyless].abs().max()) == 0.0


def test_a_real_row_without_a_key_is_still_refused(mistral: Path) -> None:
    model = load_checkpoint("mistral", mistral, reference=False)
    s = len(model.encode(RunInput(text=LONG)).tokens)
    blocked = [[1, k] for k in range(s)]  # query 1 of every item: every key blocked
    with pytest.raises(InputError) as err:
        model.run(
            RunInput(texts=[LONG, SHORT], masks=MaskSpec(causal=True, window=4, blocked=blocked)), CPU, torch.float32
        )
    assert "1" in err.value.message
