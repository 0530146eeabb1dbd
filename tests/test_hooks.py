"""attnlab's cache reads like TransformerLens's ActivationCache: its names, with its meanings and shapes
(engine/hooks.py), for every model, grouped K/V and a model without W_O included."""

from __future__ import annotations

import pytest
import torch

from engine.hooks import patch_source
from engine.interventions import PATCH_HOOK_NAMES, PatchHook, hook_name
from engine.masks import MaskSpec
from engine.models import AttentionModel, RunInput, load_models

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models() -> dict[str, AttentionModel]:
    return load_models(["textbook", "random", "minilm", "induction"])


CASES = {
    "textbook (no W_O, causal, padding)": ("textbook", RunInput()),
    "random, grouped K/V": ("random", RunInput(text="a b c d e", options={"heads": 4, "kv_heads": 2})),
    "random, a window and a blocked cell": (
        "random",
        RunInput(text="a b c d e f", masks=MaskSpec(window=2, blocked=((3, 2),))),
    ),
    "minilm (post-LN, biases)": ("minilm", RunInput(text="the cat sat")),
    "induction (pre-LN, causal)": ("induction", RunInput(text="red ball king red ball")),
    "a batch": ("random", RunInput(texts=["a b c", "d e"])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cache_has_transformerlens_names_shapes_and_meanings(models: dict[str, AttentionModel], case: str) -> None:
    name, inp = CASES[case]
    run = models[name].run(inp, CPU, torch.float64)
    cache = run.cache()
    for t in run.layers:
        p, w = f"blocks.{t.index}", t.weights
        b, s = t.resid_in.shape[:2]
        h, g, d_head, d_v, d_out = w.n_heads, w.n_kv_heads, w.d_head, w.d_v, w.d_out
        shapes = {
            "attn.hook_q": (b, s, h, d_head),
            "attn.hook_k": (b, s, g, d_head),
            "attn.hook_v": (b, s, g, d_v),
            "attn.hook_attn_scores": (b, h, s, s),
            "attn.hook_pattern": (b, h, s, s),
            "attn.hook_z": (b, s, h, d_v),
            "attn.hook_result": (b, s, h, d_out),  # per head, as TransformerLens's
            "hook_attn_out": (b, s, d_out),  # summed over heads: TransformerLens's hook_attn_out
        }
        for hook, shape in shapes.items():
            assert tuple(cache[f"{p}.{hook}"].shape) == shape, (case, hook)
        # the attention output is the heads' results summed, plus the output bias
        summed = cache[f"{p}.attn.hook_result"].sum(dim=2)
        if w.b_O is not None:
            summed = summed + w.b_O
        torch.testing.assert_close(summed, cache[f"{p}.hook_attn_out"], rtol=1e-10, atol=1e-10)
        # each head's result is its own context through its own rows of W_O: head 0 alone, the others zeroed
        z = cache[f"{p}.attn.hook_z"]
        head0 = torch.zeros_like(z)
        head0[:, :, 0] = z[:, :, 0]
        alone = head0.reshape(b, s, h * d_v) @ w.linear("W_O").T if w.W_O is not None else head0.reshape(b, s, -1)
        torch.testing.assert_close(cache[f"{p}.attn.hook_result"][:, :, 0], alone, rtol=1e-10, atol=1e-10)
        # hook_attn_scores is after the mask (-inf on masked keys), before the softmax: softmax of it is the pattern
        scores = cache[f"{p}.attn.hook_attn_scores"]
        eligible = run.eligible if run.eligible.dim() == 3 else run.eligible[None]
        assert torch.isneginf(scores).equal(~eligible[:, None].expand_as(scores))
        live = eligible.any(dim=-1)[:, None, :, None].expand_as(scores)  # rows with a key to attend to
        pattern = torch.where(live, scores.softmax(dim=-1), 0.0)
        torch.testing.assert_close(pattern.nan_to_num(0.0), cache[f"{p}.attn.hook_pattern"], rtol=1e-10, atol=1e-12)
        # the pre-mask scores keep attnlab's own name
        unmasked = cache[f"{p}.attn.scores_unmasked"]
        assert torch.equal(unmasked.masked_fill(~eligible[:, None], float("-inf")), scores)
        # hook_resid_mid: resid_pre plus the attention output (before any norm), where the block has a residual
        if name in ("minilm", "induction"):
            torch.testing.assert_close(cache[f"{p}.hook_resid_mid"], t.resid_in + t.attn.output)
    assert "blocks.0.attn.hook_scores" not in cache  # the old name of the pre-mask scores is gone


def test_post_ln_block_hooks_read_like_transformerlens_bertblock(models: dict[str, AttentionModel]) -> None:
    """BertBlock: resid_mid = resid_pre + attn_out; ln1 normalises it; resid_post = ln1 + mlp_out; ln2 after."""
    run = models["minilm"].run(RunInput(text="the cat sat on the mat"), CPU, torch.float64)
    cache = run.cache()
    net = models["minilm"].network(RunInput(), CPU, torch.float64)
    for i, block in enumerate(net.blocks):
        p = f"blocks.{i}"
        assert block.ln_attn is not None and block.ln_mlp is not None
        mid = cache[f"{p}.hook_resid_pre"] + cache[f"{p}.hook_attn_out"]
        torch.testing.assert_close(cache[f"{p}.hook_resid_mid"], mid)
        torch.testing.assert_close(cache[f"{p}.ln1.hook_normalized"], block.ln_attn(mid))
        post = cache[f"{p}.ln1.hook_normalized"] + cache[f"{p}.hook_mlp_out"]
        torch.testing.assert_close(cache[f"{p}.hook_resid_post"], post)
        torch.testing.assert_close(cache[f"{p}.hook_normalized_resid_post"], block.ln_mlp(post))
        assert cache[f"{p}.ln2.hook_normalized"] is cache[f"{p}.hook_normalized_resid_post"]


def test_pre_ln_block_hooks_read_like_transformerlens(models: dict[str, AttentionModel]) -> None:
    run = models["induction"].run(RunInput(text="red ball king red ball"), CPU, torch.float64)
    cache = run.cache()
    net = models["induction"].network(RunInput(), CPU, torch.float64)
    for i, block in enumerate(net.blocks):
        p = f"blocks.{i}"
        assert block.ln_pre is not None
        torch.testing.assert_close(cache[f"{p}.ln1.hook_normalized"], block.ln_pre(cache[f"{p}.hook_resid_pre"]))
        torch.testing.assert_close(cache[f"{p}.hook_resid_post"], cache[f"{p}.hook_resid_mid"])  # attention only
        assert f"{p}.hook_normalized_resid_post" not in cache
    torch.testing.assert_close(cache["logits"], run.logits)


def test_run_tensors_are_what_the_run_holds(models: dict[str, AttentionModel]) -> None:
    run = models["random"].run(RunInput(text="a b c"), CPU, torch.float64)
    held = {t.untyped_storage().data_ptr() for t in run.tensors()}
    for hook, t in run.cache().items():
        worked_out = hook.endswith(("hook_attn_scores", "hook_result"))
        assert (t.untyped_storage().data_ptr() in held) != worked_out, hook


@pytest.mark.parametrize("hook", list(PATCH_HOOK_NAMES))
def test_patch_source_is_the_cache_under_the_patched_hooks_names(
    models: dict[str, AttentionModel], hook: PatchHook
) -> None:
    """A patch reads the clean pass by hook name, as TransformerLens's patching reads clean_cache[name]: the source
    holds the cache's own tensors under those names, one per layer (none where a layer lacks the activation)."""
    for name, inp in (("minilm", RunInput(text="the cat sat")), ("textbook", RunInput())):
        run = models[name].run(inp, CPU, torch.float64)
        cache, source = run.cache(), patch_source(run.result, hook)
        names = [hook_name(hook, t.index) for t in run.layers]
        assert list(source) == [n for n in names if n in cache], (name, hook, list(source))
        has = hook != "mlp_out" or name == "minilm"  # the textbook layer has no feed-forward
        assert bool(source) == has, (name, hook)
        for n, t in source.items():
            assert torch.equal(t, cache[n]), (name, n)
