"""Tiny random Hugging Face checkpoints of every family attnlab loads, made here with transformers, nothing downloaded.

    make_checkpoint(family, directory, **config_overrides) -> directory

writes config.json and model.safetensors (save_pretrained, safetensors) and a tokenizer.json trained with the
tokenizers library on TEXT: byte-level BPE for the decoders and roberta, WordPiece for bert. The configs are small
(2 layers, width 32, 4 heads; width 64 for qwen3 and olmo2) but keep what makes each family itself: grouped K/V
(2 K/V heads) where the family has it, gemma's and qwen3's head_dim unlike width / heads, gpt_neox's partial rotary
(half of each head rotates), mistral's sliding window shorter than a probe, qwen3's q/k norms per head and olmo2's
over the projection with its norms after each sublayer, phi3's fused projections and longrope past its
original_max_position_embeddings (PHI3); the MORE families (more_config) and the SINK families (sink_config:
gpt_oss's sinks, experts and local layers, smollm3's layers without rotary, modernbert's local encoder layers) are
each a named real model's config at width 64, every other feature as that model ships it. Every norm weight,
every bias (gpt-oss's stacked expert biases too) and every sink logit is moved off its initial value (ones and
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
DECODERS = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", "gemma", "phi3")
ENCODERS = ("bert", "roberta")
# families whose equivalence, decoding and controls are tested in a module of their own
APART = ("gemma2", "gemma3_text")  # tests/test_gemma_families.py
QK_NORM_DECODERS = ("qwen3", "olmo2", "qwen3_moe")  # tests/test_qk_norm_families.py
FAMILIES = DECODERS + ENCODERS + QK_NORM_DECODERS
# families shaped on one named real model each, at width 64 (tests/test_more_families.py)
MORE_DECODERS = ("phi", "opt", "falcon", "stablelm")
MORE_ENCODERS = ("distilbert",)
MORE = MORE_DECODERS + MORE_ENCODERS
# families with learned sinks, layers without rotary or local encoder layers (tests/test_sink_families.py)
SINK_DECODERS: tuple[str, ...] = ("gpt_oss", "smollm3")
SINK_ENCODERS: tuple[str, ...] = ("modernbert",)
SINK = SINK_DECODERS + SINK_ENCODERS
# the special tokens each family's tokenizer frames a text with: (before, after)
FRAMES: dict[str, tuple[str | None, str | None]] = {
    "gpt2": (None, None),
    "gpt_neox": (None, None),
    "llama": ("<s>", None),
    "mistral": ("<s>", None),
    "qwen2": (None, None),
    "gemma": ("<bos>", None),
    "gemma2": ("<bos>", None),
    "gemma3_text": ("<bos>", None),
    "qwen3": (None, None),
    "olmo2": (None, None),
    "qwen3_moe": (None, None),
    "phi3": ("<s>", None),
    "bert": ("[CLS]", "[SEP]"),
    "roberta": ("<s>", "</s>"),
    "phi": (None, None),
    "opt": ("</s>", None),
    "falcon": (None, None),
    "stablelm": (None, None),
    "distilbert": ("[CLS]", "[SEP]"),
    "gpt_oss": (None, None),
    "smollm3": (None, None),
    "modernbert": ("[CLS]", "[SEP]"),
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
    if family in ("bert", "distilbert"):
        return wordpiece_tokenizer(160)
    specials = {
        "gpt2": ["<|endoftext|>"],
        "gpt_neox": ["<|endoftext|>"],
        "llama": ["<unk>", "<s>", "</s>"],
        "mistral": ["<unk>", "<s>", "</s>"],
        "qwen2": ["<|endoftext|>"],
        "qwen3": ["<|endoftext|>"],
        "qwen3_moe": ["<|endoftext|>"],
        "olmo2": ["<|endoftext|>", "<|pad|>"],
        "gemma": ["<pad>", "<eos>", "<bos>"],
        "gemma2": ["<pad>", "<eos>", "<bos>"],
        "gemma3_text": ["<pad>", "<eos>", "<bos>"],
        "phi3": ["<unk>", "<s>", "</s>"],
        "roberta": ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        "phi": ["<|endoftext|>"],
        "opt": ["<s>", "<pad>", "</s>", "<unk>"],
        "falcon": ["<|endoftext|>"],
        "stablelm": ["<|endoftext|>"],
        "gpt_oss": ["<|endoftext|>"],
        "smollm3": ["<|endoftext|>"],
        "modernbert": ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
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
    if family in ("gemma2", "gemma3_text"):
        return gemma_config(family, decoder, tok, overrides)
    if family == "qwen3":  # Qwen3-0.6B's config at width 64: head_dim 32 over 4 heads (not 64 / 4), 2 K/V groups
        eot = tok.token_to_id("<|endoftext|>")
        kw = {"hidden_size": 64, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96}
        kw |= {"tie_word_embeddings": True, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}
        kw |= {"attention_bias": False, "use_sliding_window": False, "max_window_layers": 2, "rms_norm_eps": 1e-6}
        return tf.Qwen3Config(**{**decoder, **kw, "bos_token_id": eot, "eos_token_id": eot, **overrides})
    if family == "qwen3_moe":  # Qwen3-30B-A3B's config at width 64: 8 experts (128 there), the top 2 (8), renormed
        eot = tok.token_to_id("<|endoftext|>")
        kw = {"hidden_size": 64, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96}
        kw |= {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True}
        kw |= {"decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False}
        kw |= {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "rms_norm_eps": 1e-6}
        kw |= {"attention_bias": False, "use_sliding_window": False}
        return tf.Qwen3MoeConfig(**{**decoder, **kw, "bos_token_id": eot, "eos_token_id": eot, **overrides})
    if family == "olmo2":  # OLMo-2-0425-1B's config at width 64: as many K/V heads as heads, untied
        eot, pad = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|pad|>")
        kw = {"hidden_size": 64, "num_key_value_heads": 4, "intermediate_size": 96, "tie_word_embeddings": False}
        kw |= {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "rms_norm_eps": 1e-6}
        ids = {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": pad}
        return tf.Olmo2Config(**{**decoder, **kw, **ids, "attention_bias": False, **overrides})
    if family == "phi3":
        return tf.Phi3Config(**{**decoder, **PHI3, **phi3_ids(tok), **overrides})
    if family in MORE:
        return more_config(family, decoder, tok, overrides)
    if family in SINK:
        return sink_config(family, decoder, tok, overrides)
    encoder = {**common, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
    if family == "bert":
        return tf.BertConfig(**{**encoder, "max_position_embeddings": 64, "pad_token_id": 0, **overrides})
    if family == "roberta":
        pad = tok.token_to_id("<pad>")
        kw = {"max_position_embeddings": 66, "pad_token_id": pad, "type_vocab_size": 1}
        return tf.RobertaConfig(**{**encoder, **kw, **overrides})
    raise ValueError(f"no tiny checkpoint for {family!r}; families: {', '.join(FAMILIES)}")


def gemma_config(family: str, decoder: dict[str, Any], tok: Tokenizer, overrides: dict[str, Any]) -> Any:
    """gemma2: Gemma-2-2B's config at width 64 (8 heads over 4 K/V groups, head_dim unlike width / heads, local and
    global layers alternating, pre and post norms, tied), with query_pre_attn_scalar unlike head_dim (as Gemma-2-27B
    has it) and softcaps low enough to bite on a tiny random model's scores and logits (the real 50 and 30 barely
    touch scores near 1). gemma3_text: Gemma-3-1B's config at width 32 (4 heads over 1 K/V group, q/k norms, 5
    local layers to 1 global, local rope theta 10,000 and global 1,000,000), 7 layers so the pattern repeats.
    Both: a window of 4, shorter than any probe."""
    import transformers as tf

    ids = {"pad_token_id": tok.token_to_id("<pad>"), "bos_token_id": tok.token_to_id("<bos>")}
    ids["eos_token_id"] = tok.token_to_id("<eos>")
    kw: dict[str, Any] = {**decoder, **ids, "max_position_embeddings": 128, "sliding_window": 4}
    kw |= {"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
    if family == "gemma2":
        kw |= {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4}
        kw |= {"head_dim": 16, "intermediate_size": 128, "query_pre_attn_scalar": 24}
        kw |= {"attn_logit_softcapping": 1.5, "final_logit_softcapping": 3.0}
        return tf.Gemma2Config(**{**kw, **overrides})
    kw |= {"num_hidden_layers": 7, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}
    kw |= {"query_pre_attn_scalar": 16, "sliding_window_pattern": 6}
    kw["rope_parameters"] = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
    }
    return tf.Gemma3TextConfig(**{**kw, **overrides})


# Phi-3-mini-128k's config at width 64 (4 heads of 16, no K/V groups, as Phi-3-mini): fused qkv_proj and gate_up_proj,
# longrope with factors shaped like its own (short ones near 1, long ones rising to tens) and an
# original_max_position_embeddings of 16 under a probe of 34 tokens, so that the long factors apply; a sliding
# window of 12, shorter than the probe, as Phi-3-mini-4k carries one; matrices drawn at 0.1, the spread per unit of
# width of the width-32 ones (0.15 / sqrt(2)), so that the activations are of their size too
PHI3: dict[str, Any] = {
    "initializer_range": 0.1,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 64,
    "original_max_position_embeddings": 16,
    "sliding_window": 12,
    "rope_parameters": {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "short_factor": [1.05, 1.05, 1.1, 1.2, 1.35, 1.6, 1.9, 2.3],
        "long_factor": [1.08, 1.3, 2.0, 3.5, 7.0, 14.0, 28.0, 50.0],
    },
}


def phi3_ids(tok: Tokenizer) -> dict[str, Any]:
    """Phi-3's bos, eos and pad as this tokenizer's ids (Phi3Config's defaults lie past a small vocabulary)."""
    s, end = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    return {"bos_token_id": s, "eos_token_id": end, "pad_token_id": end}


def more_config(family: str, decoder: dict[str, Any], tok: Tokenizer, overrides: dict[str, Any]) -> Any:
    """The config of a real model (named below) at width 64, 2 layers, every other feature as it ships."""
    import transformers as tf

    wide = {**decoder, "hidden_size": 64, "intermediate_size": 128}
    if family == "phi":  # Phi-2: partial rotary 0.4 (of 16 dims per head here: 6 rotate), gelu_new, untied + bias
        eot = tok.token_to_id("<|endoftext|>")
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.4}
        kw = {"rope_parameters": rope, "hidden_act": "gelu_new", "tie_word_embeddings": False, "qk_layernorm": False}
        return tf.PhiConfig(**{**wide, **kw, "bos_token_id": eot, "eos_token_id": eot, **overrides})
    if family == "opt":  # OPT-125m: learned positions from row 2, pre-LN, relu, biases, tied
        kw = {"ffn_dim": 256, "do_layer_norm_before": True, "word_embed_proj_dim": 64, "activation_function": "relu"}
        ids = {"pad_token_id": tok.token_to_id("<pad>"), "bos_token_id": tok.token_to_id("</s>")}
        sized = {k: v for k, v in wide.items() if k != "intermediate_size"}
        kw |= {"enable_bias": True, "tie_word_embeddings": True, "eos_token_id": tok.token_to_id("</s>")}
        return tf.OPTConfig(**{**sized, **kw, **ids, **overrides})
    if family == "falcon":  # Falcon-7B: fused multi-query query_key_value, parallel attention and MLP, no biases
        eot = tok.token_to_id("<|endoftext|>")
        kw = {"multi_query": True, "parallel_attn": True, "new_decoder_architecture": False, "alibi": False}
        kw |= {"bias": False, "activation": "gelu", "ffn_hidden_size": 256, "tie_word_embeddings": True}
        sized = {k: v for k, v in wide.items() if k != "intermediate_size"}
        return tf.FalconConfig(**{**sized, **kw, "bos_token_id": eot, "eos_token_id": eot, **overrides})
    if family == "stablelm":  # StableLM-2-1.6B: LayerNorm, partial rotary 0.25, q/k/v biases, sequential, untied
        eot = tok.token_to_id("<|endoftext|>")
        rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
        kw = {"rope_parameters": rope, "use_qkv_bias": True, "qk_layernorm": False, "use_parallel_residual": False}
        kw |= {"hidden_act": "silu", "tie_word_embeddings": False, "num_key_value_heads": 4}
        return tf.StableLmConfig(**{**wide, **kw, "bos_token_id": eot, "eos_token_id": eot, **overrides})
    if family == "distilbert":  # distilbert-base-uncased: post-LN, learned positions, no token types, exact gelu
        kw = {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 256, "max_position_embeddings": 64}
        kw |= {"activation": "gelu", "sinusoidal_pos_embds": False, "pad_token_id": tok.token_to_id("[PAD]")}
        return tf.DistilBertConfig(
            **{"vocab_size": decoder["vocab_size"], "initializer_range": 0.15, **kw, **overrides}
        )
    raise ValueError(f"no tiny checkpoint for {family!r}; families: {', '.join(MORE)}")


def sink_config(family: str, decoder: dict[str, Any], tok: Tokenizer, overrides: dict[str, Any]) -> Any:
    """The config of a real model (named below) at width 64, every other feature as it ships; each window shorter
    than the probe."""
    import transformers as tf

    if family == "gpt_oss":  # gpt-oss-20b: local and global layers alternating, sinks, yarn, 8 experts (32), top 2 (4)
        eot = tok.token_to_id("<|endoftext|>")
        kw: dict[str, Any] = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
        kw |= {"num_key_value_heads": 2, "head_dim": 24, "intermediate_size": 32}
        kw |= {"num_local_experts": 8, "num_experts_per_tok": 2}
        kw |= {"sliding_window": 4, "attention_bias": True, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
        kw |= {"swiglu_alpha": 1.702, "swiglu_limit": 7.0, "max_position_embeddings": 512}
        kw["rope_parameters"] = {
            "rope_type": "yarn",
            "rope_theta": 150000.0,
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 16,
        }
        ids = {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot}
        return tf.GptOssConfig(**{**decoder, **kw, **ids, **overrides})
    if family == "smollm3":  # SmolLM3-3B: every fourth layer without rotary, 16 heads over 4 K/V groups (8 over 2)
        eot = tok.token_to_id("<|endoftext|>")
        kw = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2}
        kw |= {"intermediate_size": 128, "no_rope_layer_interval": 4, "use_sliding_window": False}
        kw |= {"tie_word_embeddings": True, "rms_norm_eps": 1e-6, "attention_bias": False, "mlp_bias": False}
        rope = {"rope_type": "default", "rope_theta": 5_000_000.0}
        ids = {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot}
        return tf.SmolLM3Config(**{**decoder, **kw, "rope_parameters": rope, **ids, **overrides})
    if family == "modernbert":  # ModernBERT-base: global every third layer, local window 128 (8 here), GeGLU
        ids = {n: tok.token_to_id(t) for n, t in (("pad_token_id", "[PAD]"), ("cls_token_id", "[CLS]"))}
        ids |= {"sep_token_id": tok.token_to_id("[SEP]"), "bos_token_id": tok.token_to_id("[CLS]")}
        ids["eos_token_id"] = tok.token_to_id("[SEP]")
        kw = {"vocab_size": decoder["vocab_size"], "initializer_range": 0.15, "hidden_size": 64}
        kw |= {"num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 96, "local_attention": 8}
        kw |= {"global_attn_every_n_layers": 3, "max_position_embeddings": 128, "hidden_activation": "gelu"}
        kw |= {"norm_bias": False, "attention_bias": False, "mlp_bias": False, "norm_eps": 1e-5}
        kw["rope_parameters"] = {
            "full_attention": {"rope_type": "default", "rope_theta": 160_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        }
        return tf.ModernBertConfig(**{**kw, **ids, **overrides})
    raise ValueError(f"no tiny checkpoint for {family!r}; families: {', '.join(SINK)}")


def randomise_small_parameters(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Every vector parameter (norm weights, biases, sink logits) and every stacked bias (gpt-oss's experts'
    gate_up_proj_bias and down_proj_bias) moved off its initial value by noise of scale 0.3."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 or name.endswith("_bias"):
                p.add_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))


def make_model(family: str, seed: int = 0, *, bare: bool = False, **config_overrides: Any) -> tuple[Any, Tokenizer]:
    """A tiny random transformers model of `family` (eager attention, float32) and its tokenizer."""
    import transformers as tf

    tok = tokenizer_for(family)
    config = config_for(family, tok.get_vocab_size(), tok, config_overrides)
    torch.manual_seed(seed)
    if bare:
        model = tf.AutoModel.from_config(config, attn_implementation="eager")
    elif family in ENCODERS + MORE_ENCODERS + SINK_ENCODERS:
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


def make_shortcut_checkpoint(directory: Path, offset: int = 23) -> Path:
    """A one-layer GPT-2 whose head 0 attends exactly `offset` positions back and copies that token, set by hand.

    Its positions lie on a circle (position i at angle i alpha, in the first two dimensions and their negatives,
    so every layer norm sees the same spread), W_Q turns the query's position back by `offset` steps, and the
    score c cos(alpha (i - offset - j)) peaks at key j = i - offset with a margin of c (1 - cos alpha) = 40 over
    the next key. The tokens lie on a second circle in the last four dimensions; W_V and W_O carry the attended
    token's one into the residual, and the tied unembedding reads it back: the model predicts the token `offset`
    places back. Head 1 has no weights (uniform over the keys it sees); the MLP is zero.

    On one probe of L words twice, query q's key q - L + 1 is `offset` back when L = offset + 1, so that length
    scores it as an induction head; no other length does.
    """
    import transformers as tf
    from transformers.utils import logging

    logging.disable_progress_bar()
    tok = tokenizer_for("gpt2")
    eot = tok.token_to_id("<|endoftext|>")
    positions, width = 64, 8
    config = tf.GPT2Config(
        vocab_size=tok.get_vocab_size(),
        n_embd=width,
        n_layer=1,
        n_head=2,
        n_positions=positions,
        bos_token_id=eot,
        eos_token_id=eot,
        activation_function="gelu_new",
    )
    model = tf.GPT2LMHeadModel(config).eval()
    alpha = 2 * torch.pi / 45  # the keys seen are offset - 63 .. offset steps away: none comes round to 2 pi
    margin = 40.0
    c = margin / (1 - torch.cos(torch.tensor(alpha)).item())
    angle = torch.arange(positions, dtype=torch.float64) * alpha
    beta = torch.arange(config.vocab_size, dtype=torch.float64) * 2 * torch.pi / config.vocab_size
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        wpe = torch.stack([angle.cos(), angle.sin(), -angle.cos(), -angle.sin()], dim=-1)
        wte = torch.stack([beta.cos(), beta.sin(), -beta.cos(), -beta.sin()], dim=-1)
        model.transformer.wpe.weight[:, :4] = wpe.float()
        model.transformer.wte.weight[:, 4:] = wte.float()  # tied: the unembedding reads the same circle
        block = model.transformer.h[0]
        for norm in (block.ln_1, block.ln_2, model.transformer.ln_f):
            norm.weight.fill_(1.0)
        # layer norm of (position, token) is sqrt(2) times each circle's point: every row has the same spread, and
        # the score q.k / sqrt(d_head) = c (sqrt(2))^2 cos(...) / sqrt(4) = c cos(alpha (i - offset - j))
        turn = torch.tensor(-offset * alpha)
        rotate = torch.tensor([[turn.cos(), turn.sin()], [-turn.sin(), turn.cos()]])  # row vector p @ R turns p
        w = torch.zeros(width, 3 * width)
        w[:2, :2] = c * rotate  # head 0's query: the position turned back by `offset`
        w[:2, width : width + 2] = torch.eye(2)  # head 0's key: the position
        w[4:8, 2 * width : 2 * width + 4] = torch.eye(4)  # head 0's value: the token
        block.attn.c_attn.weight.copy_(w)
        out = torch.zeros(width, width)
        out[:4, 4:8] = 1000 * torch.eye(4)  # head 0's value into the token dimensions, far over the own token
        block.attn.c_proj.weight.copy_(out)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    tok.save(str(directory / "tokenizer.json"))
    return directory


# image families (tests/test_vision_families.py): no tokenizer, a preprocessor_config.json; each with the head its
# named architecture has (None: the encoder alone), and what else makes it itself
VISION = ("vit", "deit", "dinov2", "dinov2_with_registers")
IMAGE_SIZES = {"vit": (16, 4), "deit": (32, 8), "dinov2": (16, 4), "dinov2_with_registers": (16, 4)}  # (image, patch)
PREPROCESSOR = {"do_resize": True, "size": {"height": 16, "width": 16}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}


def image_config(family: str) -> tuple[Any, str]:
    """(config, the transformers class) of a tiny image model: 2 layers, width 32, 4 heads, matrices drawn at 0.2.
    vit with ViTForImageClassification's head; deit with its teacher's two heads; dinov2 with layer scale 0.5, a
    SwiGLU and Dinov2ForImageClassification's head; dinov2_with_registers with 2 registers, no q/k/v biases, bare."""
    import transformers as tf

    image, patch = IMAGE_SIZES[family]
    kw: dict[str, Any] = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=image,
        patch_size=patch,
        initializer_range=0.2,
    )
    labels = {"id2label": {0: "zero", 1: "one", 2: "two"}}
    if family == "vit":
        return tf.ViTConfig(**kw, intermediate_size=64, **labels), "ViTForImageClassification"
    if family == "deit":
        return tf.DeiTConfig(**kw, intermediate_size=64, **labels), "DeiTForImageClassificationWithTeacher"
    if family == "dinov2":
        config = tf.Dinov2Config(**kw, mlp_ratio=2, use_swiglu_ffn=True, layerscale_value=0.5, **labels)
        return config, "Dinov2ForImageClassification"
    if family == "dinov2_with_registers":
        config = tf.Dinov2WithRegistersConfig(**kw, mlp_ratio=2, num_register_tokens=2, qkv_bias=False)
        return config, "Dinov2WithRegistersModel"
    raise ValueError(f"no tiny image checkpoint for {family!r}; families: {', '.join(VISION)}")


def make_image_model(family: str, seed: int = 0) -> Any:
    """A tiny random transformers image model of `family` (eager attention, float32): every norm, bias and layer
    scale moved off its initial value, and the [CLS], [DIST] and register tokens and the positions too."""
    import transformers as tf

    config, kind = image_config(family)
    torch.manual_seed(seed)
    model = getattr(tf, kind)._from_config(config, attn_implementation="eager")
    generator = torch.Generator().manual_seed(seed + 1)
    randomise_small_parameters(model, generator)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("_token", "_tokens", "position_embeddings")):
                p.add_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return model.float().eval()


def make_image_checkpoint(family: str, directory: Path, seed: int = 0) -> Path:
    """Write a tiny random image checkpoint of `family` into `directory`: config.json, model.safetensors and
    preprocessor_config.json, no tokenizer."""
    import json

    from transformers.utils import logging

    logging.disable_progress_bar()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    make_image_model(family, seed).save_pretrained(directory, safe_serialization=True)
    (directory / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return directory
