"""Phi, OPT, Falcon, StableLM and DistilBERT against transformers' eager forward, and a wrong mapping of each caught.

Each family's tiny random checkpoint (tests/checkpoints.py more_config: a named real model's config at width 64,
every norm weight and bias moved off its initial value) loads through load_checkpoint, whose reference check
(engine/models/reference.py) compares every layer's every head's weights and the final output with transformers
in float32: within 1e-5. The same comparison must FAIL (by more than 1e-3) on one deliberately wrong mapping per
family: Phi without its lm_head bias, OPT's positions from row 0 instead of 2, Falcon's fused query_key_value split
in the wrong order, StableLM rotating every dim of each head, DistilBERT's norms in pre-LN order.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from engine.analysis.decode import decode
from engine.models.base import RunInput
from engine.models.checkpoint import CheckpointError, CheckpointModel, load_checkpoint
from engine.rotary import Rotary
from tests.checkpoints import MORE, MORE_DECODERS, PROBE, make_checkpoint
from tests.fixtures import make_app_client
from tests.helpers import assert_error

TOLERANCE = 1e-5
WRONG = 1e-3
CPU = torch.device("cpu")

# (family, config overrides): every variant the equivalence test loads; the first of each family is its real model
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("phi", {}),
    ("opt", {}),
    ("opt", {"do_layer_norm_before": False, "word_embed_proj_dim": 32}),  # OPT-350m: post-LN, projected embeddings
    ("opt", {"tie_word_embeddings": False, "enable_bias": False}),
    ("opt", {"layer_norm_elementwise_affine": False, "_remove_final_layer_norm": True}),
    ("falcon", {}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),  # Falcon-40B: K/V groups, ln_attn and ln_mlp
    ("falcon", {"multi_query": False, "parallel_attn": False, "bias": True, "tie_word_embeddings": False}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2, "num_ln_in_parallel_attn": 1, "bias": True}),
    ("stablelm", {}),
    ("stablelm", {"use_parallel_residual": True, "num_key_value_heads": 2, "use_qkv_bias": False}),
    ("distilbert", {}),
    ("distilbert", {"sinusoidal_pos_embds": True}),
]


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """The checkpoint directory of a family (made once per module for each set of overrides)."""
    made: dict[str, Path] = {}

    def get(family: str, **overrides: Any) -> Path:
        key = json.dumps([family, overrides], sort_keys=True)
        if key not in made:
            made[key] = make_checkpoint(family, tmp_path_factory.mktemp(family), **overrides)
        return made[key]

    return get


def diffs(model: CheckpointModel) -> dict[str, float]:
    assert model.reference is not None and model.reference["library"] is not None, model.reference
    return dict(model.reference["max_abs_diff"])


@pytest.mark.parametrize(("family", "overrides"), VARIANTS, ids=[f"{f}-{json.dumps(o)}" for f, o in VARIANTS])
def test_family_matches_transformers(family: str, overrides: dict[str, Any], directory: Callable[..., Path]) -> None:
    model = load_checkpoint(family, directory(family, **overrides))
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, (family, d)
    assert model.info.family == family
    assert model.capabilities.decode == (family in MORE_DECODERS)


def test_every_new_family_is_tested() -> None:
    assert sorted({f for f, _ in VARIANTS}) == sorted(MORE)


@pytest.mark.parametrize(
    ("family", "dropped", "added"),
    [
        ("phi", ["rope_parameters"], {"rope_theta": 10000.0, "partial_rotary_factor": 0.4, "rope_scaling": None}),
        ("stablelm", ["rope_parameters"], {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
        ("falcon", ["rope_parameters", "max_position_embeddings"], {}),
    ],
)
def test_config_as_the_real_model_ships_it_reads(
    family: str, dropped: list[str], added: dict[str, Any], directory: Callable[..., Path], tmp_path: Path
) -> None:
    """config.json written before transformers 5, as Phi-2's, StableLM-2-1.6B's and Falcon-7B's are on the hub:
    rope_theta and partial_rotary_factor at the top level, Falcon-7B's without max_position_embeddings (2048)."""
    shutil.copytree(directory(family), tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in dropped} | added))
    model = load_checkpoint(family, tmp_path)
    d = diffs(model)
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d
    if family == "falcon":
        assert model.sizes.max_positions == 2048


@pytest.mark.parametrize(
    ("family", "overrides"),
    [("opt", {}), ("falcon", {}), ("stablelm", {"tie_word_embeddings": True}), ("distilbert", {})],
)
def test_bare_layout_matches_transformers(family: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    """The base model's keys (no model. / transformer. / distilbert. prefix) load the same way (tied unembeddings:
    a base model saves no lm_head)."""
    d = diffs(load_checkpoint(family, make_checkpoint(family, tmp_path, bare=True, **overrides)))
    assert d["weights"] < TOLERANCE and d["output"] < TOLERANCE, d


@pytest.mark.parametrize("family", MORE_DECODERS)
def test_decode_with_cache_equals_full_pass(family: str, directory: Callable[..., Path]) -> None:
    """Position by position through the KV cache (rotary or learned positions from the cache's length) = the
    whole pass, logits included, in float64 (where only the order of the sums differs)."""
    model = load_checkpoint(family, directory(family), reference=False)
    inp = RunInput(text=PROBE)
    result = decode(model, inp, model.encode(inp), CPU, torch.float64)
    assert len(result.steps) > 8
    assert result.max_diff_vs_full < 1e-10, result.max_diff_vs_full


# --- every route on each family, through the app (one per layout: post-LN and projected OPT, Falcon's new layout) ---

ROUTED = {
    "phi": ("phi", {}),
    "opt350": ("opt", {"do_layer_norm_before": False, "word_embed_proj_dim": 32}),
    "falcon40": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    "stablelm": ("stablelm", {}),
    "distilbert": ("distilbert", {}),
}
POST_LN = ("opt350", "distilbert")  # what a later layer reads is no sum of earlier outputs: QK attribution refuses
TEXT = "the door opens on the garden and the key opens the door"


@pytest.fixture(scope="module")
def client(directory: Callable[..., Path]) -> Iterator[TestClient]:
    models = ",".join(f"{name}={directory(family, **o)}" for name, (family, o) in ROUTED.items())
    with make_app_client(models=models, reference=False) as c:
        yield c


def ok(resp: Any) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("name", ROUTED)
def test_every_route_answers_on_the_family(name: str, client: TestClient) -> None:
    decoder = ROUTED[name][0] in MORE_DECODERS
    body = {"model": name, "text": TEXT}
    run = ok(client.post("/api/attention", json={**body, "include": ["weights", "final"]}))
    tokens, entry = run["tokens"], next(m for m in ok(client.get("/api/models"))["models"] if m["name"] == name)
    assert len(run["layers"]) == entry["n_layers"] and len(run["layers"][0]["heads"]) == entry["n_heads"]
    assert len(run["final"][0]) == (entry["vocab_size"] if decoder else entry["d_model"])
    assert len(ok(client.post("/api/heads", json=body))["heads"]) == entry["n_layers"] * entry["n_heads"]
    ablated = ok(client.post("/api/intervene", json={**body, "ablate": [{"layer": 0, "head": 1}]}))
    assert max(ablated["final_delta"]) > 0
    other = [*tokens]
    other[len(tokens) // 2] = tokens[1] if tokens[1] != tokens[len(tokens) // 2] else tokens[2]
    metric = {"kind": "logit_diff", "position": len(tokens) - 1, "correct": tokens[1], "wrong": tokens[2]}
    patch = {"clean": {"model": name, "tokens": tokens}, "corrupted": {"model": name, "tokens": other}}
    ok(
        client.post(
            "/api/patch",
            json={**patch, "hook": "resid_pre", "metric": metric if decoder else {"kind": "output_distance"}},
        )
    )
    qk = client.post("/api/qk-attribution", json={**body, "layer": 1, "head": 1, "query": len(tokens) - 1, "key": 2})
    if name in POST_LN:
        assert_error(qk, 422, "model", "post-norm")
    else:
        assert qk.status_code == 200, qk.text
    decoded = client.post("/api/decode", json={**body, "generate": {"tokens": 3}})
    if not decoder:
        assert_error(decoded, 422, "generate", "does not decode")
        return
    assert ok(decoded)["max_diff_vs_full"] < WRONG and len(decoded.json()["generated"]) == 3


# --- refusals: a feature attnlab does not run is named by its config field, before any tensor is read ---

REFUSED = [
    ("phi", {"qk_layernorm": True}, "qk_layernorm"),
    ("falcon", {"alibi": True}, "alibi"),
    ("stablelm", {"qk_layernorm": True}, "qk_layernorm"),
    ("falcon", {"new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn"),
    ("falcon", {"num_ln_in_parallel_attn": 3}, "num_ln_in_parallel_attn"),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 3}, "num_key_value_heads"),
    ("opt", {"word_embed_proj_dim": 0}, "word_embed_proj_dim"),
    ("opt", {"do_layer_norm_before": "yes"}, "do_layer_norm_before"),
    (
        "phi",
        {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.05}},
        "rope_parameters.partial_rotary_factor",
    ),
    ("stablelm", {"num_key_value_heads": 3}, "num_key_value_heads"),
    ("distilbert", {"n_heads": 5}, "n_heads"),
    ("distilbert", {"activation": "mish"}, "activation"),
]


@pytest.mark.parametrize(("family", "changes", "named"), REFUSED)
def test_unsupported_feature_is_refused_by_field(
    family: str, changes: dict[str, Any], named: str, directory: Callable[..., Path], tmp_path: Path
) -> None:
    shutil.copytree(directory(family), tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(family, tmp_path, reference=False)
    assert f"config.json {named}" in err.value.reason, err.value.reason


# --- negative controls: the same comparison, a wrong mapping, a difference far past the tolerance ---


def wrong_mapping(monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    if family == "phi":
        import engine.models.families.phi as phi

        unembed = phi.Unembed
        monkeypatch.setattr(phi, "Unembed", lambda ln, W_U, b_U=None: unembed(ln, W_U))  # lm_head's bias dropped
    elif family == "opt":
        import engine.models.families.opt as opt

        embedding = opt.Embedding  # positions from row 0 instead of 2
        monkeypatch.setattr(opt, "Embedding", lambda **kw: embedding(**{**kw, "position_offset": 0}))
    elif family == "falcon":
        import engine.models.families.falcon as falcon

        split = falcon.split_fused  # K and V read from each other's rows

        def swapped(t: torch.Tensor, config: Any, s: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            q, k, v = split(t, config, s)
            return q, v, k

        monkeypatch.setattr(falcon, "split_fused", swapped)
    elif family == "stablelm":
        import engine.models.families.stablelm as stablelm

        monkeypatch.setattr(stablelm, "rotary", lambda config, d_head, default: Rotary(d_head))  # every dim rotates
    elif family == "distilbert":
        import engine.models.families.distilbert as distilbert

        block = distilbert.Block  # each norm before its sublayer instead of after the residual sum

        def pre_ln(**kw: Any) -> Any:
            return block(**{**kw, "ln_attn": None, "ln_mlp": None, "ln_pre": kw["ln_attn"], "ln_pre_mlp": kw["ln_mlp"]})

        monkeypatch.setattr(distilbert, "Block", pre_ln)
    else:
        raise AssertionError(family)


WRONGED = [(f, {}) for f in MORE] + [
    ("opt", {"do_layer_norm_before": False, "word_embed_proj_dim": 32}),
    ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}),
]


@pytest.mark.parametrize(("family", "overrides"), WRONGED, ids=[f"{f}-{json.dumps(o)}" for f, o in WRONGED])
def test_wrong_mapping_fails_the_comparison(
    family: str, overrides: dict[str, Any], directory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong_mapping(monkeypatch, family)
    d = diffs(load_checkpoint(family, directory(family, **overrides)))
    assert max(d.values()) > WRONG, (family, d)
