"""BERT and RoBERTa checkpoints: what an encoder adds to the family checks in test_checkpoint_families.py.

The same reference comparison (engine/models/reference.py, every layer's every head and the last hidden state, at
1e-5) must fail on a wrong mapping: RoBERTa's positions counted from row 0 instead of pad_token_id + 1, BERT
without its token-type embedding. attnlab's padding mask acts as transformers' attention_mask does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import engine.models.families.bert as bert
from engine.masks import MaskSpec
from engine.models.base import RunInput
from engine.models.checkpoint import load_checkpoint
from tests.checkpoints import make_checkpoint

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = make_checkpoint(family, tmp_path_factory.mktemp(family))
        return made[family]

    return get


def worst(family: str, directory: Path) -> float:
    ref = load_checkpoint(family, directory).reference
    assert ref is not None and ref["library"] is not None, ref
    return max(ref["max_abs_diff"].values())


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_encoder_matches_and_reads_the_whole_sequence(family: str, directory: Callable[[str], Path]) -> None:
    assert worst(family, directory(family)) < 1e-5
    model = load_checkpoint(family, directory(family), reference=False)
    assert model.info.default_masks is None or not model.info.default_masks.causal
    assert not model.capabilities.decode and not model.capabilities.predicts_tokens


def wrong_embedding(monkeypatch: pytest.MonkeyPatch, **wrong: Any) -> None:
    original = bert.Embedding
    monkeypatch.setattr(bert, "Embedding", lambda **kw: original(**{**kw, **wrong}))


def test_roberta_positions_from_row_zero_fail(
    directory: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_embedding(monkeypatch, position_offset=0)
    assert worst("roberta", directory("roberta")) > 1e-3


def test_bert_without_token_type_fails(directory: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    wrong_embedding(monkeypatch, W_type=None)
    assert worst("bert", directory("bert")) > 1e-3


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_padding_mask_is_transformers_attention_mask(family: str, directory: Callable[[str], Path]) -> None:
    """The last two positions marked padding: every real row of every layer equals transformers' with
    attention_mask 0 there (to 1e-5), and no weight falls on a padded key."""
    d = directory(family)
    model = load_checkpoint(family, d, reference=False)
    text = "the cat sat on the mat"
    enc = model.encode(RunInput(text=text))
    s = len(enc.tokens)
    padding = [True] * (s - 2) + [False] * 2
    run = model.run(RunInput(text=text, masks=MaskSpec(padding=padding)), CPU, torch.float32)
    from transformers import AutoModel

    hf = AutoModel.from_pretrained(d, attn_implementation="eager").eval()
    ids = torch.tensor([model.pieces.encode(text).ids])  # the ids attnlab read, as transformers reads them
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=torch.tensor([[int(p) for p in padding]]), output_attentions=True)
    for trace, theirs in zip(run.layers, out.attentions, strict=True):
        ours = trace.attn.weights[0, :, : s - 2]
        assert float((ours - theirs[0, :, : s - 2]).abs().max()) < 1e-5
        assert float(trace.attn.weights[0, :, :, s - 2 :].abs().max()) == 0.0
