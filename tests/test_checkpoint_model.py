"""A loaded checkpoint as an attnlab model: how it reads text and tokens, what it refuses, what it declares."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.errors import InputError
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointModel, load_checkpoint
from tests.checkpoints import PROBE, make_checkpoint

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckpointModel]:
    return {
        f: load_checkpoint(f"my{f}", make_checkpoint(f, tmp_path_factory.mktemp(f)), reference=False)
        for f in ("llama", "bert", "gpt2")
    }


def test_special_tokens_are_flagged_where_the_tokenizer_adds_them(models: dict[str, CheckpointModel]) -> None:
    for name, (first, last) in {"llama": ("<s>", None), "bert": ("[CLS]", "[SEP]"), "gpt2": (None, None)}.items():
        model = models[name]
        enc = model.encode(RunInput(text=PROBE))
        assert enc.special is not None and len(enc.special) == len(enc.tokens)
        marked = [t for t, s in zip(enc.tokens, enc.special, strict=True) if s]
        assert marked == [t for t in (first, last) if t is not None], name
        assert model.frame_tokens(["a", "b"]) == (
            [*([first] if first else []), "a", "b", *([last] if last else [])],
            int(first is not None),
        )
        run = model.run(RunInput(text=PROBE), CPU, torch.float32)
        assert run.config.special == enc.special


def test_answered_labels_read_back_as_the_same_pieces(models: dict[str, CheckpointModel]) -> None:
    for model in models.values():
        text = model.encode(RunInput(text=PROBE))
        tokens = model.encode(RunInput(tokens=text.tokens))
        assert tokens.tokens == text.tokens and torch.equal(tokens.x, text.x)


def test_more_tokens_than_positions_is_refused_naming_the_limit(models: dict[str, CheckpointModel]) -> None:
    model = models["llama"]
    with pytest.raises(InputError) as err:
        model.encode(RunInput(tokens=[" the"] * 65))
    assert err.value.field == "tokens" and "got 65 tokens, limit 64" in err.value.message
    assert len(model.encode(RunInput(tokens=[" the"] * 64)).tokens) == 64


def test_unknown_pieces_are_refused(models: dict[str, CheckpointModel]) -> None:
    model = models["gpt2"]
    enc = model.encode(RunInput(text=PROBE))
    with pytest.raises(InputError) as err:
        model.encode(RunInput(tokens=[" the", "nope-not-a-piece"]))
    assert err.value.field == "tokens" and "position 1" in err.value.message
    with pytest.raises(InputError) as err:
        model.swap_token(RunInput(text=PROBE), enc, 1, "nope-not-a-piece")
    assert err.value.field == "change.token"
    pool = model.token_pool()
    assert pool and all(t.strip().isalpha() for t in pool)
    swapped = model.swap_token(RunInput(text=PROBE), enc, 1, pool[0])
    assert model.encode(swapped).tokens[1] == pool[0]


def test_declarations_come_from_the_config(models: dict[str, CheckpointModel]) -> None:
    llama, bert = models["llama"], models["bert"]
    assert llama.info.n_kv_heads == 2 and llama.info.max_positions == 64 and llama.info.vocab_size == 320
    assert llama.capabilities.decode and llama.capabilities.predicts_tokens and not llama.capabilities.cross_attention
    assert llama.info.default_masks is not None and llama.info.default_masks.causal
    assert not bert.capabilities.decode and not bert.capabilities.predicts_tokens and bert.info.vocab is None
    assert bert.info.default_masks is None
    assert llama.info.vocab is not None and len(llama.info.vocab) == 320
    run = llama.run(RunInput(text=PROBE), CPU, torch.float32)
    assert run.logits is not None and run.logits.shape[-1] == 320 and len(run.config.next_word) == len(run.tokens)


def test_the_vocabulary_reads_each_piece_alone(tmp_path: Path) -> None:
    """info.vocab (next-word labels, the probe pool) is each id's own label, never its neighbours' bytes joined to
    it: a byte-level vocabulary whose ids 0, 1, 2 are the three bytes of 你 reads <0xE4>, <0xBD>, <0xA0> there."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from engine.tokens import byte_alphabet

    directory = make_checkpoint("gpt2", tmp_path)
    by_byte = {b: ch for ch, b in byte_alphabet().items()}
    order = [0xE4, 0xBD, 0xA0, *(b for b in range(256) if b not in (0xE4, 0xBD, 0xA0))]
    tok = Tokenizer(models.BPE(vocab={by_byte[b]: i for i, b in enumerate(order)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(directory / "tokenizer.json"))
    model = load_checkpoint("bytes", directory, reference=False)
    assert model.info.vocab is not None
    assert model.info.vocab[:3] == ["<0xE4>", "<0xBD>", "<0xA0>"]
    assert model.encode(RunInput(text="你")).tokens == ["你", "◌", "◌"]  # together, in a text, the character whole
