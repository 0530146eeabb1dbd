"""Every checkpoint family against transformers' eager forward, and the engine's promises on checkpoint models.

Each family's tiny random checkpoint (tests/checkpoints.py) loads through load_checkpoint, whose reference check
(engine/models/reference.py) compares every layer's every head's weights and the final output with transformers
in float32: within 1e-5. The same comparison must FAIL (by more than 1e-3) on a deliberately wrong mapping, one
per family: rotary interleaved or on the wrong dims, Gemma's RMSNorm without 1 + w, GPT-NeoX without the parallel
residual, Qwen2 without its q/k/v biases, GPT-2 with its Conv1D weights transposed, Mistral's window one too wide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.analysis.decode import decode
from engine.models.base import RunInput
from engine.models.checkpoint import SUPPORTED, CheckpointModel, from_transformers, load_checkpoint
from engine.models.families.registry import family_for
from engine.rotary import Rotary
from tests.checkpoints import (
    APART,
    DECODERS,
    ENCODERS,
    MORE,
    PROBE,
    QK_NORM_DECODERS,
    SINK,
    VISION,
    make_checkpoint,
    make_model,
)

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")
FAMILIES = DECODERS + ENCODERS


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """The checkpoint directory of a family (made once per module for each set of overrides)."""
    made: dict[tuple[Any, ...], Path] = {}

    def get(family: str, **overrides: Any) -> Path:
        key = (family, *sorted(overrides.items()))
        if key not in made:
            made[key] = make_checkpoint(family, tmp_path_factory.mktemp(family), **overrides)
        return made[key]

    return get


def diffs(model: CheckpointModel) -> dict[str, float]:
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    return dict(model.reference["max_abs_diff"])


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_transformers(family: str, directory: Callable[..., Path]) -> None:
    model = load_checkpoint(family, directory(family))
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (family, d)
    assert model.info.family == family and model.family == family
    assert model.capabilities.decode == (family in DECODERS)
    rotary = family not in ("gpt2", "bert", "roberta")
    assert ("fixed_qk" in model.breaks) == rotary  # engine/stats.py: qk_rank and qk_symmetric null, with why


@pytest.mark.parametrize(
    ("family", "old"),
    [
        ("gpt_neox", {"rotary_pct": 0.5, "rotary_emb_base": 10000}),
        ("llama", {"rope_theta": 10000.0, "rope_scaling": None}),
    ],
)
def test_older_rope_fields_read(family: str, old: dict[str, Any], tmp_path: Path) -> None:
    """A config.json written before transformers 5 (rope_theta, rotary_pct at the top level) reads the same."""
    import json

    path = make_checkpoint(family, tmp_path) / "config.json"
    config = json.loads(path.read_text())
    del config["rope_parameters"]
    path.write_text(json.dumps({**config, **old}))
    d = diffs(load_checkpoint(family, tmp_path))
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


def test_every_supported_model_type_has_a_family() -> None:
    # the last five: modules of their own
    assert sorted(SUPPORTED) == sorted(FAMILIES + QK_NORM_DECODERS + MORE + APART + SINK + VISION)
    for model_type in SUPPORTED:
        family = family_for(model_type)
        assert family is not None and model_type in family.model_types


@pytest.mark.parametrize("family", ["gpt2", "qwen2", "bert", "roberta"])
def test_bare_layout_matches_transformers(family: str, tmp_path: Path) -> None:
    """The base model's keys (no transformer. / model. / bert. prefix) load the same way."""
    model = load_checkpoint(family, make_checkpoint(family, tmp_path, bare=True))
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


def test_from_transformers_matches() -> None:
    hf, tok = make_model("llama")
    model = from_transformers("mine", hf, tok)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


@pytest.mark.parametrize("family", DECODERS)
def test_decode_with_cache_equals_full_pass(family: str, directory: Callable[..., Path]) -> None:
    """Position by position through the KV cache (rotary starting at the cache's length) = the whole pass."""
    model = load_checkpoint(family, directory(family), reference=False)
    inp = RunInput(text=PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float32)
    assert len(result.steps) > 8
    assert result.max_diff_vs_full < TOLERANCE, result.max_diff_vs_full


def test_decode_without_rotary_offset_differs(directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the test above: rotary restarting at 0 for each decoded position breaks the equality."""
    model = load_checkpoint("llama", directory("llama"), reference=False)
    original = Rotary.__call__
    monkeypatch.setattr(Rotary, "__call__", lambda self, t, offset=0: original(self, t, 0))
    inp = RunInput(text=PROBE)
    assert decode(model, inp, model.encode(inp), CPU, torch.float32).max_diff_vs_full > WRONG


def test_future_token_changes_nothing_before_it_in_any_layer(directory: Callable[..., Path]) -> None:
    """The causal mask acts in every layer: a token swapped at position p leaves every layer's output before p."""
    model = load_checkpoint("gpt_neox", directory("gpt_neox"), reference=False)
    inp = RunInput(text=PROBE)
    enc = model.encode(inp)
    p = len(enc.tokens) // 2
    other = next(t for t in model.token_pool() if t != enc.tokens[p])
    before = model.run(inp, CPU, torch.float32)
    after = model.run(model.swap_token(inp, enc, p, other), CPU, torch.float32)
    for a, b in zip(before.layers, after.layers, strict=True):
        assert torch.equal(a.resid_out[0, :p], b.resid_out[0, :p])
        assert (a.resid_out[0, p:] - b.resid_out[0, p:]).abs().max() > WRONG
    unmasked = model.run(replace(inp, masks=replace(before.masks, causal=False)), CPU, torch.float32)
    assert (unmasked.layers[-1].resid_out[0, :p] - before.layers[-1].resid_out[0, :p]).abs().max() > WRONG


def test_mistral_window_is_transformers_sliding_window(directory: Callable[..., Path]) -> None:
    """A sequence longer than the window: attnlab's window mask (query sees itself and window - 1 before) gives
    transformers' sliding-window weights, and zero weight on every key outside it, in every layer."""
    path = directory("mistral")
    model = load_checkpoint("mistral", path)
    window = model.info.default_masks.window if model.info.default_masks else None
    assert window == 4
    run = model.run(RunInput(text=PROBE), CPU, torch.float32)
    s = len(run.tokens)
    assert s > 3 * window
    q, k = torch.arange(s)[:, None], torch.arange(s)[None, :]
    outside = (k > q) | (q - k >= window)
    for layer in run.layers:
        assert torch.all(layer.attn.weights[0][:, outside] == 0)
        assert torch.all(layer.attn.weights[0][:, ~outside] > 0)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


def test_rotary_hooks(directory: Callable[..., Path]) -> None:
    """hook_q / hook_k before rotary, hook_rot_q / hook_rot_k after: equal at position 0 (angle 0), apart after."""
    cache = load_checkpoint("llama", directory("llama"), reference=False).run(RunInput(text=PROBE), CPU, torch.float32)
    hooks = cache.cache()
    for layer in range(len(cache.layers)):
        p = f"blocks.{layer}.attn"
        q, rot_q, rot_k = hooks[f"{p}.hook_q"], hooks[f"{p}.hook_rot_q"], hooks[f"{p}.hook_rot_k"]
        assert q.shape == rot_q.shape and rot_k.shape == hooks[f"{p}.hook_k"].shape
        assert torch.allclose(q[:, 0], rot_q[:, 0]) and not torch.allclose(q[:, 1:], rot_q[:, 1:])
        assert torch.equal(rot_q.transpose(1, 2), cache.layers[layer].attn.q)  # what the scores read
    gpt2 = load_checkpoint("gpt2", directory("gpt2"), reference=False).run(RunInput(text=PROBE), CPU, torch.float32)
    assert not any("hook_rot" in name for name in gpt2.cache())


# --- negative controls: the same comparison, a wrong mapping, a difference far past the tolerance ---


def interleaved(t: torch.Tensor) -> torch.Tensor:
    """GPT-J's layout: pairs (0, 1), (2, 3)... instead of (i, i + rot_dim / 2)."""
    pairs = t.reshape(*t.shape[:-1], -1, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


def wrong_mappings(monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    import engine.models.families.gpt2 as gpt2
    import engine.models.families.gpt_neox as neox
    import engine.models.families.llama as llama
    import engine.rotary as rotary
    from engine.norms import RMSNorm

    if family in ("llama", "mistral"):
        monkeypatch.setattr(rotary, "rotate_half", interleaved)
    elif family == "gpt_neox":
        block = neox.Block
        monkeypatch.setattr(neox, "Block", lambda **kw: block(**{**kw, "parallel": False}))
    elif family == "gemma":
        monkeypatch.setattr(llama, "RMSNorm", lambda w, eps, offset=False: RMSNorm(w, eps, False))
    elif family == "qwen2":
        monkeypatch.setattr(llama, "biases", lambda config: (False, False, False))
    elif family == "gpt2":
        original = gpt2.from_concatenated
        monkeypatch.setattr(gpt2, "from_concatenated", lambda q, k, v, o, h: original(q.T, k.T, v.T, o.T, h))
    else:
        raise AssertionError(family)


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama", "mistral", "qwen2", "gemma"])
def test_wrong_mapping_fails_the_comparison(
    family: str, directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_mappings(monkeypatch, family)
    d = diffs(load_checkpoint(family, directory(family)))
    assert max(d.values()) > WRONG, (family, d)


def test_partial_rotary_on_the_wrong_dims_fails(
    directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partial rotary on the wrong dims: the last rot_dim rotate (the dims reversed), the first pass through."""
    original = Rotary.__call__
    monkeypatch.setattr(Rotary, "__call__", lambda self, t, offset=0: original(self, t.flip(-1), offset).flip(-1))
    d = diffs(load_checkpoint("gpt_neox", directory("gpt_neox")))
    assert d["weights"] > WRONG, d


def test_mistral_window_one_too_wide_fails(directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.models.families.llama as llama

    monkeypatch.setattr(llama, "window", lambda config: 5)
    d = diffs(load_checkpoint("mistral", directory("mistral")))
    assert d["weights"] > WRONG, d


@pytest.mark.parametrize("family", ["gemma", "gpt_neox"])
def test_head_ablation_and_edge_edit_act_on_checkpoint_layers(family: str, directory: Callable[..., Path]) -> None:
    """Zero-ablating head h of layer 1 changes that layer's attention output by exactly -z_h W_O[h] (grouped K/V,
    rotary, parallel blocks alike) and leaves layer 0; an edge edit sets the weight it names."""
    from engine.interventions import EdgeEdit, HeadAblation, Interventions

    model = load_checkpoint(family, directory(family), reference=False)
    inp = RunInput(text=PROBE)
    plain = model.run(inp, CPU, torch.float64)
    ablated = model.run(inp, CPU, torch.float64, interventions=Interventions(ablate=(HeadAblation(1, 2),)))
    assert torch.equal(plain.layers[0].resid_out, ablated.layers[0].resid_out)
    a, w = plain.layers[1].attn, plain.layers[1].weights
    assert w.W_O is not None
    expected = a.output - a.contexts[:, 2] @ w.W_O[2]
    assert torch.allclose(ablated.layers[1].attn.output, expected, atol=1e-10)
    assert (ablated.layers[1].attn.output - a.output).abs().max() > WRONG
    edit = Interventions(edit=(EdgeEdit(layer=0, head=1, query=6, key=2, weight=0.9),))
    edited = model.run(inp, CPU, torch.float64, interventions=edit)
    assert float(edited.layers[0].attn.weights[0, 1, 6, 2]) == pytest.approx(0.9)
    assert torch.allclose(
        edited.layers[0].attn.weights.sum(-1), torch.ones(1, 4, len(plain.tokens), dtype=torch.float64)
    )


@pytest.mark.parametrize(
    "overrides",
    [{"scale_attn_by_inverse_layer_idx": True}, {"scale_attn_weights": False}, {"n_inner": 48}],
)
def test_gpt2_declared_scales_and_widths(overrides: dict[str, Any], directory: Callable[..., Path]) -> None:
    """GPT-2's other score factors (1 / sqrt(d_head) / (layer + 1); none) through AttentionWeights.scale."""
    model = load_checkpoint("gpt2", directory("gpt2", **overrides))
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d
    if "scale_attn_weights" not in overrides:
        return
    assert model.run(RunInput(text=PROBE), CPU, torch.float32).layers[1].attn.scale_factor == 1.0


def test_pre_ln_and_parallel_hooks(directory: Callable[..., Path]) -> None:
    """GPT-2: ln2.hook_normalized is what its MLP read, LayerNorm(resid_mid). GPT-NeoX's parallel block: the MLP
    reads ln2(resid_pre), and resid_post = resid_pre + attn_out + mlp_out (resid_mid: resid_pre + attn_out)."""
    gpt2 = load_checkpoint("gpt2", directory("gpt2"), reference=False)
    run = gpt2.run(RunInput(text=PROBE), CPU, torch.float64)
    c, block = run.cache(), gpt2.net.on(CPU, torch.float64).blocks[0]
    assert block.ln_pre_mlp is not None and block.mlp is not None
    assert torch.allclose(c["blocks.0.ln2.hook_normalized"], block.ln_pre_mlp(c["blocks.0.hook_resid_mid"]))
    assert torch.allclose(c["blocks.0.hook_mlp_out"], block.mlp(c["blocks.0.ln2.hook_normalized"]))
    neox = load_checkpoint("gpt_neox", directory("gpt_neox"), reference=False)
    c, block = neox.run(RunInput(text=PROBE), CPU, torch.float64).cache(), neox.net.on(CPU, torch.float64).blocks[1]
    assert block.parallel and block.ln_pre_mlp is not None
    p = "blocks.1"
    assert torch.allclose(c[f"{p}.ln2.hook_normalized"], block.ln_pre_mlp(c[f"{p}.hook_resid_pre"]))
    assert torch.allclose(c[f"{p}.hook_resid_mid"], c[f"{p}.hook_resid_pre"] + c[f"{p}.hook_attn_out"])
    summed = c[f"{p}.hook_resid_pre"] + c[f"{p}.hook_attn_out"] + c[f"{p}.hook_mlp_out"]
    assert torch.allclose(c[f"{p}.hook_resid_post"], summed)
