"""Rotary scalings (engine/rotary.py) and the Phi-3 family against transformers' eager forward.

Each scaling on a tiny checkpoint (tests/checkpoints.py, width 64: 4 heads of 16, 8 rotary pairs) carrying a real
model's rope config, with original_max_position_embeddings (dynamic: max_position_embeddings) cut to 16 under a probe
of 46 tokens, so that the scaling acts: every layer's every head's weights and the logits within 1e-5 of
transformers (engine/models/reference.py), decoding through the KV cache equal to the full pass, and the long run's
weights equal to the run's. A deliberately wrong scaling fails the same comparison by more than 1e-3: llama3
ignored, yarn without its attention factor, longrope's short factors where the long ones apply, dynamic at the
longest input instead of the run's length, Phi-3's fused qkv split in the wrong order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import engine.analysis.decode as decode_module
from engine.analysis.decode import decode
from engine.long import long_run
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointError, CheckpointModel, load_checkpoint
from engine.models.reference import compare
from engine.rotary import Dynamic, Llama3, LongRope, Yarn, inverse_frequencies
from engine.tiles import row
from tests.checkpoints import PHI3, PROBE, make_checkpoint

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
LONG_PROBE = PROBE + " A key opens the door."  # 46 tokens: past the 16 positions each scaling is set to
WIDTH = {"hidden_size": 64, "intermediate_size": 128, "initializer_range": 0.1}
L = {"original_max_position_embeddings": 16}  # each real model's, 4,096 to 32,768, cut under the probe
LLAMA3_FREQ = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
GPT_OSS_YARN = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}

# name: (family, config, the real model whose rope config it copies)
SCALINGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "llama3": (
        "llama",
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0} | LLAMA3_FREQ | L},
        "Llama-3.2-1B",
    ),
    "linear": (
        "llama",
        {"rope_scaling": {"type": "linear", "factor": 4.0}, "rope_theta": 10000.0},
        "vicuna-7b-v1.5-16k, in the older rope_scaling form",
    ),
    "dynamic": (
        "llama",
        {"rope_scaling": {"type": "dynamic", "factor": 4.0}, "rope_theta": 10000.0, "max_position_embeddings": 16},
        "InternLM2's dynamic NTK rope_scaling, factor 4 (its 2 would stop inputs at 32 positions, under the probe)",
    ),
    "yarn": (
        "llama",
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, **L}},
        "Qwen2.5-7B-Instruct's YaRN (factor 4, rope_theta 10^6)",
    ),
    "yarn_untruncated": (
        "llama",
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0} | GPT_OSS_YARN | L},
        "gpt-oss-20b's YaRN (factor 32, beta_fast 32, beta_slow 1, truncate false)",
    ),
    "longrope": (
        "llama",
        {"rope_parameters": {**PHI3["rope_parameters"], **L}},
        "Phi-3-mini-128k's longrope (factors of its shape, one per rotary pair)",
    ),
    "llama3_mistral": (
        "mistral",
        {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0} | LLAMA3_FREQ | L},
        "Llama-3.2-1B's llama3 scaling under Mistral's sliding window (4 here)",
    ),
    "yarn_qwen2": (
        "qwen2",
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, **L}},
        "Qwen2.5-7B-Instruct's YaRN, in its own family",
    ),
}


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """The checkpoint directory of a scaling or a Phi-3 variant, made once per module."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            if name in SCALINGS:
                family, config, _ = SCALINGS[name]
                made[name] = make_checkpoint(family, tmp_path_factory.mktemp(name), **WIDTH, **config)
            else:
                made[name] = make_checkpoint("phi3", tmp_path_factory.mktemp(name), **PHI3_VARIANTS[name])
        return made[name]

    return get


def load(directory: Path) -> CheckpointModel:
    return load_checkpoint("scaled", directory, reference=False)


def diffs(directory: Path) -> dict[str, float]:
    """The reference comparison (engine/models/reference.py) on the 46-token probe."""
    model = load(directory)
    assert 16 < len(model.pieces.encode(LONG_PROBE).ids) < model.sizes.max_positions  # nothing cut
    ref = compare(model, directory, probe=LONG_PROBE)
    assert ref["library"] is not None, ref
    return dict(ref["max_abs_diff"])


@pytest.mark.parametrize("name", SCALINGS)
def test_scaling_matches_transformers(name: str, directory: Callable[..., Path]) -> None:
    d = diffs(directory(name))
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (name, SCALINGS[name][2], d)
    kind = name.split("_")[0]
    assert f"{kind} scaling" in load(directory(name)).architecture


@pytest.mark.parametrize("name", SCALINGS)
def test_decode_with_cache_equals_full_pass(name: str, directory: Callable[..., Path]) -> None:
    model = load(directory(name))
    inp = RunInput(text=LONG_PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float32)
    assert len(result.steps) == len(model.encode(inp).tokens) > 16
    assert result.max_diff_vs_full < TOLERANCE, (name, result.max_diff_vs_full)


@pytest.mark.parametrize("name", ["dynamic", "longrope"])
def test_decode_steps_read_the_runs_length(
    name: str, directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control for the test above: steps left to read their own length (position + 1) rotate otherwise."""
    monkeypatch.setattr(decode_module, "at_length", lambda net, s: net)
    model = load(directory(name))
    inp = RunInput(text=LONG_PROBE)
    assert decode(model, inp, model.encode(inp), CPU, torch.float32).max_diff_vs_full > WRONG


@pytest.mark.parametrize("name", ["dynamic", "longrope", "yarn"])
def test_long_run_equals_the_run(name: str, directory: Callable[..., Path]) -> None:
    """The long run's one blockwise pass sees the run's length as the run does: its recomputed rows are the run's
    weights, in every layer and head."""
    model = load(directory(name))
    inp = RunInput(text=LONG_PROBE)
    run = model.run(inp, CPU, torch.float32)
    kept = long_run(model, inp, CPU, torch.float32, 16, 1 << 20)
    worst = max(
        float((row(layer, h, q) - trace.attn.weights[0, h, q]).abs().max())
        for layer, trace in zip(kept.layers, run.layers, strict=True)
        for h in range(4)
        for q in range(len(run.tokens))
    )
    assert worst < TOLERANCE, worst


def test_generation_after_the_input_is_transformers_generate(directory: Callable[..., Path]) -> None:
    """Tokens generated after the input rotate at their own length, position + 1, over the cache the input left, as
    transformers' generate does: the same tokens, and each fed token's weights over every key equal to its."""
    from engine.analysis.generate import Sampling
    from engine.models.reference import transformers_model

    path = directory("dynamic")
    model = load(path)
    inp = RunInput(text=LONG_PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float32, Sampling(tokens=4))
    ids = model.pieces.encode(LONG_PROBE).ids
    hf = transformers_model(path, True)
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([ids]),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            output_attentions=True,
            return_dict_in_generate=True,
        )
    assert result.generated is not None
    assert [g.id for g in result.generated] == out.sequences[0, len(ids) :].tolist()
    worst = max(  # transformers' step i feeds the token generated at step i - 1
        float((torch.tensor(ours) - theirs[0, :, 0]).abs().max())
        for i, g in enumerate(result.generated[:3], start=1)
        for ours, theirs in zip(g.weights, out.attentions[i], strict=True)
    )
    assert worst < TOLERANCE, worst


# --- negative controls: the same comparison, a wrong scaling, a difference far past the tolerance ---


def plain(self: Any, theta: float, rot_dim: int, length: int, work: torch.dtype, device: torch.device) -> Any:
    return inverse_frequencies(theta, rot_dim, work, device), 1.0


def without_attention_factor(real: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, *args: (real(self, *args)[0], 1.0)


def short_factors(real: Callable[..., Any]) -> Callable[..., Any]:
    return lambda self, theta, r, length, *rest: real(self, theta, r, min(length, self.original), *rest)


def at_longest(real: Callable[..., Any]) -> Callable[..., Any]:
    """Dynamic at the longest input the model takes (factor x P = 64) instead of the run's 46."""
    return lambda self, theta, r, length, *rest: real(self, theta, r, int(self.factor * self.max_positions), *rest)


@pytest.mark.parametrize(
    ("name", "cls", "wrong"),
    [
        ("llama3", Llama3, lambda real: plain),
        ("yarn", Yarn, without_attention_factor),
        ("yarn_untruncated", Yarn, without_attention_factor),
        ("longrope", LongRope, short_factors),
        ("dynamic", Dynamic, at_longest),
    ],
)
def test_wrong_scaling_fails_the_comparison(
    name: str, cls: type, wrong: Callable[..., Any], directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cls, "frequencies", wrong(cls.frequencies))
    d = diffs(directory(name))
    assert d["weights"] > WRONG and d["output"] > WRONG, (name, d)


# --- Phi-3 ---

PHI3_VARIANTS: dict[str, dict[str, Any]] = {
    "phi3": {},  # Phi-3-mini-128k's config at width 64 (tests/checkpoints.py PHI3)
    "phi4_mini": {  # Phi-4-mini's: 3/4 of each head rotates, 3 heads per K/V group, tied embeddings, no window
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "hidden_size": 96,
        "tie_word_embeddings": True,
        "sliding_window": None,
        "partial_rotary_factor": 0.75,
        "rope_parameters": {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.75,
            "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
            "long_factor": [1.0, 1.6, 3.0, 6.0, 15.0, 40.0],
        },
    },
}


@pytest.mark.parametrize("name", PHI3_VARIANTS)
def test_phi3_matches_transformers_past_its_original_length(name: str, directory: Callable[..., Path]) -> None:
    model = load(directory(name))
    d = diffs(directory(name))
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (name, d)
    rot = model.net.on(CPU, torch.float32).blocks[0].attn.rotary
    assert rot is not None and isinstance(rot.scaling, LongRope) and rot.scaling.original == 16
    assert rot.rot_dim == (12 if name == "phi4_mini" else 16)
    window = model.info.default_masks.window if model.info.default_masks else None
    assert window == (None if name == "phi4_mini" else 12)
    inp = RunInput(text=LONG_PROBE)
    assert decode(model, inp, model.encode(inp), CPU, torch.float32).max_diff_vs_full < TOLERANCE


def test_phi3_older_config_reads_the_same(directory: Callable[..., Path], tmp_path: Path) -> None:
    """Phi-3's config.json as the hub has it: rope_scaling (type "longrope") and rope_theta at the top level."""
    import shutil

    path = shutil.copytree(directory("phi3"), tmp_path / "phi3") / "config.json"
    config = json.loads(path.read_text())
    rope = config.pop("rope_parameters")
    short, long = rope["short_factor"], rope["long_factor"]
    path.write_text(
        json.dumps(
            {
                **config,
                "rope_theta": 10000.0,
                "rope_scaling": {"type": "longrope"} | {"short_factor": short, "long_factor": long},
            }
        )
    )
    d = diffs(path.parent)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


def test_phi3_qkv_split_in_the_wrong_order_fails(
    directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.models.families.phi3 as phi3

    real = phi3.split_qkv
    monkeypatch.setattr(phi3, "split_qkv", lambda qkv, s: (lambda q, k, v: (k, q, v))(*real(qkv, s)))
    d = diffs(directory("phi3"))
    assert d["weights"] > WRONG and d["output"] > WRONG, d


# --- refusals ---


@pytest.mark.parametrize(
    ("rope", "named"),
    [
        ({"rope_type": "proportional", "rope_theta": 10000.0}, "rope_parameters.rope_type"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0, **L}, "high_freq"),
        ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, **L}, "rope_parameters.low_freq_factor"),
        ({"rope_type": "yarn", "rope_theta": 10000.0, **L}, "rope_parameters.factor"),
        ({"rope_type": "yarn", "factor": 4.0, "beta_fast": -1, **L}, "rope_parameters.beta_fast"),
        ({"rope_type": "dynamic", "factor": -2.0}, "rope_parameters.factor"),
        ({"rope_type": "linear", "factor": float("nan")}, "rope_parameters.factor"),
        ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 7, **L}, "long_factor"),
        ({"rope_type": "longrope", "short_factor": [0.0] * 8, "long_factor": [1.0] * 8, **L}, "short_factor[0]"),
        (
            {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [1.0] * 8}
            | {"original_max_position_embeddings": 0},
            "rope_parameters.original_max_position_embeddings",
        ),
    ],
)
def test_bad_rope_config_is_refused_naming_the_field(rope: dict[str, Any], named: str) -> None:
    """Refused from config.json alone, before any tensor: the field named, with what it needs."""
    from engine.models.families.llama import sizes

    config = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    config |= {"vocab_size": 320, "max_position_embeddings": 64, "rope_parameters": rope}
    with pytest.raises(CheckpointError) as err:
        sizes(config)
    assert named in err.value.reason, err.value.reason
