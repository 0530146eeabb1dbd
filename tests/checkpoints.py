"""Tiny random Hugging Face checkpoints of every family attnlab loads, made here with transformers, nothing downloaded.

    make_checkpoint(family, directory, **config_overrides) -> directory

writes config.json and model.safetensors (save_pretrained, safetensors) and a tokenizer.json trained with the
tokenizers library on TEXT: byte-level BPE for the decoders and roberta, WordPiece for bert. The configs are small
(2 layers, width 32, 4 heads) but keep what makes each family itself: grouped K/V (2 K/V heads) where the family
has it, gemma's head_dim unlike width / heads, gpt_neox's partial rotary (half of each head rotates), mistral's
sliding window shorter than a probe. Every norm weight and every bias is moved off its initial value (ones and
zeros), and the matrices are drawn wider than the default 0.02, so a loader that skips a norm, a bias or a scale
gives other numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXT = (
    "The quick brown fox jumps over the lazy dog. A key opens the door; the door opens on a garden.\n"
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(add(i, i))\n"
    "Attention weights sum to one over the keys a query may see. Heads read the residual stream.\n"
) * 4
PROBE = "The quick brown fox opens the door to the garden, and the dog reads the key."
DECODERS = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "gemma")
ENCODERS = ("bert", "roberta")
FAMILIES = DECODERS + ENCODERS
# the special tokens each family's tokenizer frames a text with: (before, after)
FRAMES: dict[str, tuple[str | None, str | None]] = {
    "gpt2": (None, None),
    "gpt_neox": (None, None),
    "llama": ("<s>", None),
    "mistral": ("<s>", None),
    "qwen2": (None, None),
    "gemma": ("<bos>", None),
    "bert": ("[CLS]", "[SEP]"),
    "roberta": ("<s>", "</s>"),
}


def byte_level_tokenizer(specials: list[str], frame: tuple[str | None, str | None], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([TEXT], trainer)
    _frame(tok, frame)
    return tok


def wordpiece_tokenizer(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator([TEXT], trainer)
    _frame(tok, ("[CLS]", "[SEP]"))
    return tok


def _frame(tok: Tokenizer, frame: tuple[str | None, str | None]) -> None:
    before, after = frame
    if before is None and after is None:
        return
    marks = [m for m in (before, after) if m is not None]
    single = " ".join([*([before] if before else []), "$A", *([after] if after else [])])
    tok.post_processor = processors.TemplateProcessing(
        single=single, special_tokens=[(m, int(tok.token_to_id(m))) for m in marks]
    )


def tokenizer_for(family: str) -> Tokenizer:
    if family == "bert":
        return wordpiece_tokenizer(160)
    specials = {
        "gpt2": ["<|endoftext|>"],
        "gpt_neox": ["<|endoftext|>"],
        "llama": ["<unk>", "<s>", "</s>"],
        "mistral": ["<unk>", "<s>", "</s>"],
        "qwen2": ["<|endoftext|>"],
        "gemma": ["<pad>", "<eos>", "<bos>"],
        "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    }[family]
    return byte_level_tokenizer(specials, FRAMES[family], 320)


def config_for(family: str, vocab_size: int, tok: Tokenizer, overrides: dict[str, Any]) -> Any:
    import transformers as tf

    common: dict[str, Any] = {"vocab_size": vocab_size, "initializer_range": 0.15}
    decoder: dict[str, Any] = {
        **common,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
    }
    if family == "gpt2":
        eot = tok.token_to_id("<|endoftext|>")
        kw = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "bos_token_id": eot, "eos_token_id": eot}
        return tf.GPT2Config(**{**common, **kw, "activation_function": "gelu_new", **overrides})
    if family == "gpt_neox":
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
        return tf.GPTNeoXConfig(**{**decoder, "rope_parameters": rope, "use_parallel_residual": True, **overrides})
    if family in ("llama", "mistral", "qwen2"):
        kw = {"num_key_value_heads": 2, "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
        if family == "mistral":
            kw["sliding_window"] = 4
        if family == "qwen2":
            kw |= {"tie_word_embeddings": True, "use_sliding_window": False}
        cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config}[family]
        return cls(**{**decoder, **kw, **overrides})
    if family == "gemma":
        kw = {"num_key_value_heads": 2, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh"}
        ids = {"pad_token_id": tok.token_to_id("<pad>"), "bos_token_id": tok.token_to_id("<bos>")}
        return tf.GemmaConfig(**{**decoder, **kw, **ids, "eos_token_id": tok.token_to_id("<eos>"), **overrides})
    encoder = {**common, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    if family == "bert":
        return tf.BertConfig(**{**encoder, "max_position_embeddings": 64, "pad_token_id": 0, **overrides})
    if family == "roberta":
        pad = tok.token_to_id("<pad>")
        kw = {"max_position_embeddings": 66, "pad_token_id": pad, "type_vocab_size": 1}
        return tf.RobertaConfig(**{**encoder, **kw, **overrides})
    raise ValueError(f"no tiny checkpoint for {family!r}; families: {', '.join(FAMILIES)}")


def randomise_small_parameters(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Every vector parameter (norm weights, biases) moved off its initial value by noise of scale 0.3."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))


def make_model(family: str, seed: int = 0, *, bare: bool = False, **config_overrides: Any) -> tuple[Any, Tokenizer]:
    """A tiny random transformers model of `family` (eager attention, float32) and its tokenizer."""
    import transformers as tf

    tok = tokenizer_for(family)
    config = config_for(family, tok.get_vocab_size(), tok, config_overrides)
    torch.manual_seed(seed)
    if bare:
        model = tf.AutoModel.from_config(config, attn_implementation="eager")
    elif family in ENCODERS:
        model = tf.AutoModelForMaskedLM.from_config(config, attn_implementation="eager")
    else:
        model = tf.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    randomise_small_parameters(model, torch.Generator().manual_seed(seed + 1))
    return model.float().eval(), tok


def make_checkpoint(
    family: str, directory: Path, *, seed: int = 0, bare: bool = False, **config_overrides: Any
) -> Path:
    """Write a tiny random checkpoint of `family` into `directory`: config.json, model.safetensors, tokenizer.json.

    bare: the base model's layout (GPT2Model, BertModel...) rather than *ForCausalLM / *ForMaskedLM.
    """
    from transformers.utils import logging

    logging.disable_progress_bar()
    model, tok = make_model(family, seed, bare=bare, **config_overrides)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory
