"""What load_checkpoint refuses, and that it refuses before doing harm: a pickle is never opened, a config past the
limits loads no tensor, and every refusal is a CheckpointError whose reason names the file or the field."""

from __future__ import annotations

import json
import pathlib
import pickle
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file
from tokenizers import Regex, Tokenizer, normalizers

import engine.models.checkpoint as checkpoint
import engine.models.checkpoint_model as checkpoint_model
import engine.normaliser as normaliser
from engine.models.checkpoint import SUPPORTED, CheckpointError, CheckpointLimits, load_checkpoint
from tests.checkpoints import make_checkpoint
from tests.helpers import assert_error


class TouchOnUnpickle:
    """Unpickling this creates the file at `path`: what a hostile pytorch_model.bin can do."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (self.path,))


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("gpt2", tmp_path_factory.mktemp("gpt2"))


@pytest.fixture
def copy(gpt2_dir: Path, tmp_path: Path) -> Path:
    """A copy of the tiny gpt2 checkpoint to break."""
    target = tmp_path / "ckpt"
    shutil.copytree(gpt2_dir, target)
    return target


def edit_config(directory: Path, **changes: Any) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def refusal(directory: Path, **kw: Any) -> str:
    with pytest.raises(CheckpointError) as err:
        load_checkpoint("mine", directory, reference=False, **kw)
    return err.value.reason


def test_pickle_is_refused_and_never_opened(copy: Path, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    (copy / "model.safetensors").unlink()
    (copy / "pytorch_model.bin").write_bytes(pickle.dumps(TouchOnUnpickle(marker)))
    reason = refusal(copy)
    assert "pytorch_model.bin" in reason and "save_pretrained" in reason and "safe_serialization=True" in reason
    assert not marker.exists()
    pickle.loads((copy / "pytorch_model.bin").read_bytes())  # the control: opening it would have run its code
    assert marker.exists()


@pytest.mark.parametrize("name", ["model.pt", "weights.pth", "last.ckpt"])
def test_other_pickles_are_refused_by_name(copy: Path, name: str) -> None:
    (copy / "model.safetensors").unlink()
    (copy / name).write_bytes(b"not opened")
    assert name in refusal(copy)


def test_unknown_model_type_lists_the_supported(copy: Path) -> None:
    edit_config(copy, model_type="mamba")
    reason = refusal(copy)
    assert "model_type" in reason and "'mamba'" in reason
    assert all(family in reason for family in SUPPORTED)


@pytest.mark.parametrize("missing", ["config.json", "tokenizer.json", "model.safetensors"])
def test_missing_file_is_named(copy: Path, missing: str) -> None:
    (copy / missing).unlink()
    assert missing in refusal(copy)


def test_wrong_tensor_shape_names_it(copy: Path) -> None:
    tensors = load_file(str(copy / "model.safetensors"))
    tensors["transformer.h.1.attn.c_proj.weight"] = torch.zeros(32, 31)
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    reason = refusal(copy)
    assert "transformer.h.1.attn.c_proj.weight" in reason and "[32, 31]" in reason and "[32, 32]" in reason


def test_missing_tensor_names_it(copy: Path) -> None:
    tensors = load_file(str(copy / "model.safetensors"))
    del tensors["transformer.h.0.mlp.c_fc.bias"]
    save_file(tensors, str(copy / "model.safetensors"), metadata={"format": "pt"})
    assert "h.0.mlp.c_fc.bias" in refusal(copy)


LLAMA3_SWAPPED = {"low_freq_factor": 4.0, "high_freq_factor": 1.0, "original_max_position_embeddings": 16}


@pytest.mark.parametrize(
    ("family", "changes", "named"),
    [
        ("gpt2", {"n_head": 5}, "n_head"),
        ("llama", {"num_key_value_heads": 3}, "num_key_value_heads"),
        ("llama", {"hidden_size": 0}, "hidden_size"),
        ("llama", {"rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0}}, "rope_type"),
        ("qwen2", {"use_sliding_window": True}, "use_sliding_window"),
        ("gpt_neox", {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.1}}, "partial_rotary"),
        ("gemma2", {"layer_types": ["sliding_attention"]}, "layer_types"),
        ("gemma2", {"layer_types": ["sliding_attention", "chunked", "full_attention", "full_attention"]}, "types[1]"),
        ("gemma2", {"attn_logit_softcapping": float("inf")}, "attn_logit_softcapping"),
        ("gemma2", {"final_logit_softcapping": -30}, "final_logit_softcapping"),
        ("gemma2", {"sliding_window": 0}, "sliding_window"),
        ("gemma2", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ("gemma3_text", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
        (
            "gemma3_text",
            {"rope_parameters": {"sliding_attention": {"rope_type": "spiral"}, "full_attention": {"rope_theta": 1e6}}},
            "rope_parameters.sliding_attention",
        ),
        ("qwen3", {"use_sliding_window": True}, "use_sliding_window"),
        ("olmo2", {"num_key_value_heads": 3}, "num_key_value_heads"),
        ("qwen3_moe", {"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ("qwen3_moe", {"mlp_only_layers": [5]}, "mlp_only_layers"),
        ("llama", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0} | LLAMA3_SWAPPED}, "high_freq_factor"),
        ("gpt_oss", {"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ("gpt_oss", {"layer_types": ["sliding_attention", "chunked"]}, "layer_types[1]"),
        ("smollm3", {"no_rope_layers": [1, 0]}, "no_rope_layers"),
        ("smollm3", {"no_rope_layers": [1, 1, 2, 0]}, "no_rope_layers"),
        ("modernbert", {"local_attention": 1}, "local_attention"),
        ("modernbert", {"layer_types": ["full_attention", "sliding_attention"]}, "layer_types"),
    ],
)
def test_bad_config_field_is_named(family: str, changes: dict[str, Any], named: str, tmp_path: Path) -> None:
    directory = make_checkpoint(family, tmp_path / family)
    edit_config(directory, **changes)
    assert named in refusal(directory)


def test_past_the_limits_loads_no_tensor(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config claiming about 10^12 parameters is refused from config.json alone: safetensors is never opened."""
    edit_config(copy, model_type="llama", hidden_size=8192, num_hidden_layers=100, intermediate_size=400_000)
    edit_config(copy, num_attention_heads=64, num_key_value_heads=64, max_position_embeddings=4096)
    opened: list[str] = []
    monkeypatch.setattr(checkpoint, "safe_open", lambda *a, **k: opened.append(str(a[0])) or pytest.fail("opened"))
    reason = refusal(copy)
    assert "parameters" in reason and "limit" in reason and not opened
    claimed = int(reason.split("make ")[1].split()[0].replace(",", ""))
    assert claimed > 10**12


@pytest.mark.parametrize(
    ("limit", "value", "named"),
    [
        ("max_layers", 1, "2 layers"),
        ("max_d_model", 16, "32 width"),
        ("max_heads", 2, "4 attention heads"),
        ("max_vocab", 100, "320 vocabulary"),
        ("max_positions", 32, "64 positions"),
        ("max_parameters", 1000, "parameters"),
    ],
)
def test_each_limit_is_checked(copy: Path, limit: str, value: int, named: str) -> None:
    reason = refusal(copy, limits=CheckpointLimits(**{limit: value}))
    assert named in reason and f"limit of {value:,} ({limit}" in reason


def test_sharded_safetensors_load(tmp_path: Path) -> None:
    directory = make_checkpoint("llama", tmp_path / "llama")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory))
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="40KB")
    shutil.copy(directory / "tokenizer.json", sharded / "tokenizer.json")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    loaded = load_checkpoint("sharded", sharded)
    assert loaded.reference is not None and loaded.reference["max_abs_diff"]["output"] < 1e-5


def test_shard_outside_the_directory_is_refused(copy: Path) -> None:
    (copy / "model.safetensors").rename(copy.parent / "elsewhere.safetensors")
    index = {"weight_map": {"wte.weight": "../elsewhere.safetensors"}}
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "../elsewhere.safetensors" in refusal(copy)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"layer_norm_epsilon": "small"}, "layer_norm_epsilon"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ({"n_embd": 32.5}, "n_embd"),
        ({"n_layer": True}, "n_layer"),
        ({"n_positions": -1}, "n_positions"),
        ({"activation_function": "swiglu"}, "activation_function"),
        ({"model_type": ["gpt2"]}, "model_type"),
    ],
)
def test_hostile_config_values_are_named(copy: Path, changes: dict[str, Any], named: str) -> None:
    edit_config(copy, **changes)
    assert named in refusal(copy)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("config.json", b"{not json"),
        ("config.json", b"[1, 2]"),
        ("tokenizer.json", b"{}"),
        ("model.safetensors", b"\xff" * 64),
    ],
)
def test_damaged_file_is_named(copy: Path, name: str, content: bytes) -> None:
    (copy / name).write_bytes(content)
    assert name in refusal(copy)


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k), *strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def breaks(copy: Path, how: str) -> None:
    """Break the copy `how`, for the refusals below."""
    if how == "pickle only":
        (copy / "model.safetensors").rename(copy / "pytorch_model.bin")
    elif how == "no weights":
        (copy / "model.safetensors").unlink()
    elif how in ("no config", "no tokenizer"):
        (copy / ("config.json" if how == "no config" else "tokenizer.json")).unlink()
    elif how == "config not json":
        (copy / "config.json").write_bytes(b"{not json")
    elif how == "config a link to itself":
        (copy / "config.json").unlink()
        (copy / "config.json").symlink_to(copy / "config.json")
    elif how == "damaged weights":
        (copy / "model.safetensors").write_bytes(b"\xff" * 64)
    elif how == "damaged tokenizer":
        (copy / "tokenizer.json").write_bytes(b"{}")
    elif how == "empty index":
        (copy / "model.safetensors").unlink()
        (copy / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    elif how == "not a directory":
        shutil.rmtree(copy)
    else:
        raise AssertionError(how)


REFUSALS = [
    "pickle only",
    "no weights",
    "no config",
    "no tokenizer",
    "config not json",
    "config a link to itself",
    "damaged weights",
    "damaged tokenizer",
    "empty index",
    "not a directory",
]


@pytest.mark.parametrize("how", REFUSALS)
def test_a_refusal_names_no_path_of_the_server(copy: Path, how: str) -> None:
    """Clients are told a refusal's reason (GET /api/models `unavailable`): it names the file in the checkpoint,
    never where the checkpoint lies on the server."""
    breaks(copy, how)
    reason = refusal(copy)
    assert str(copy.parent) not in reason and str(copy.resolve().parent) not in reason, reason
    assert reason


def test_models_tell_clients_no_path_of_the_server(
    copy: Path, tmp_path: Path, make_client: Callable[..., AbstractContextManager[TestClient]]
) -> None:
    """Every field of GET /api/models, for a checkpoint served and for ones that cannot load, and the 422 for a
    model that did not load, name models and files within their checkpoint, never the server's file system; each
    refusal leaves the server serving the others."""
    bad = tmp_path / "bad"
    shutil.copytree(copy, bad)
    (bad / "model.safetensors").rename(bad / "pytorch_model.bin")
    linked = tmp_path / "linked"
    shutil.copytree(copy, linked)
    (tmp_path / "secret.json").write_text(json.dumps({"token": SECRET}))
    (linked / "attnlab.json").symlink_to(tmp_path / "secret.json")
    far = tmp_path / "far"
    shutil.copytree(copy, far)
    spec = json.loads((far / "tokenizer.json").read_text())
    spec["model"]["vocab"]["zzfar"] = 20_000_000  # a listing of 20,000,000 labels was 60 MB
    (far / "tokenizer.json").write_text(json.dumps(spec))
    models = f"textbook,mine={copy},bad={bad},gone={tmp_path / 'nowhere'},linked={linked},far={far}"
    with make_client(models=models, reference=False) as client:
        listed = client.get("/api/models").json()
        refused = client.post("/api/attention", json={"model": "bad", "text": "a b"})
    assert [m["name"] for m in listed["models"]] == ["textbook", "mine"]
    assert {u["name"] for u in listed["unavailable"]} == {"bad", "gone", "linked", "far"}
    assert len(listed["models"][1]["vocab"]) == listed["models"][1]["vocab_size"] == 320
    assert_error(refused, 422, "model", "pytorch_model.bin")
    told = [*strings(listed), *strings(refused.json())]
    leaked = [s for s in told if str(tmp_path) in s or str(tmp_path.resolve()) in s or SECRET in s]
    assert leaked == []


SECRET = "s3cr3t-of-the-server"
LINKED = ["attnlab.json", "config.json", "tokenizer.json", "model.safetensors", "generation_config.json"]


@pytest.mark.parametrize("name", LINKED)
def test_a_link_out_of_the_directory_is_refused(copy: Path, tmp_path: Path, name: str) -> None:
    """A file of the checkpoint that is a link to a file elsewhere on the server is refused, naming the link,
    before anything is read (a card linked to the server's secrets would be served to every client; transformers
    reads generation_config.json for the reference check)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if (copy / name).exists():
        (copy / name).rename(outside / name)
    else:
        (outside / name).write_text(json.dumps({"token": SECRET}))
    (copy / name).symlink_to(outside / name)
    reason = refusal(copy)
    assert name in reason and "outside the checkpoint's directory" in reason, reason
    assert str(outside) not in reason and SECRET not in reason


def test_links_within_the_directory_load(copy: Path) -> None:
    """Links that stay inside: the checkpoint's own files, and a Hugging Face hub snapshot's links into its blobs."""
    (copy / "card.json").write_text(json.dumps({"notes": "mine"}))
    (copy / "attnlab.json").symlink_to("card.json")
    assert load_checkpoint("mine", copy, reference=False).card == {"notes": "mine"}

    repo = copy.parent / "hub" / "models--me--tiny"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for i, f in enumerate(sorted(copy.iterdir())):
        shutil.copy(f, repo / "blobs" / f"blob{i}")
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    assert load_checkpoint("hub", snapshot, reference=False).card == {"notes": "mine"}


@pytest.mark.parametrize(
    ("where", "token_id", "named"),
    [
        ("vocab", 320, 320),
        ("vocab", 20_000_000, 20_000_000),
        ("vocab", 10**9, 10**9),
        ("added", 320, 320),
        ("added", 10**9, 320),  # the tokenizers library numbers an added token next after its vocabulary
    ],
)
def test_a_token_id_past_the_embedding_is_refused_before_the_ids_are_read(
    copy: Path, monkeypatch: pytest.MonkeyPatch, where: str, token_id: int, named: int
) -> None:
    """The tiny gpt2 embeds 320 ids: a tokenizer.json piece with id 320 or more (in its vocabulary or its added
    tokens) is refused at load, naming the file, the id and the vocabulary size, before anything is built from
    the ids (a listing of 10^9 labels took 100 s and 7.9 GB)."""
    assert json.loads((copy / "config.json").read_text())["vocab_size"] == 320
    spec = json.loads((copy / "tokenizer.json").read_text())
    if where == "vocab":
        spec["model"]["vocab"]["zzfar"] = token_id
    else:
        added = {"content": "<far>", "single_word": False, "lstrip": False, "rstrip": False}
        spec["added_tokens"].append({"id": token_id, **added, "normalized": False, "special": True})
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    monkeypatch.setattr(checkpoint_model, "TokenPieces", lambda *a: pytest.fail("pieces built from the ids"))
    reason = refusal(copy)
    assert "tokenizer.json" in reason and f"id {named:,}" in reason and "320 ids" in reason, reason


def with_normalizer(directory: Path, normalizer: Any) -> Path:
    """The checkpoint's tokenizer.json with `normalizer` in place of its own."""
    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tok.normalizer = normalizer
    tok.save(str(directory / "tokenizer.json"))
    return directory


@pytest.mark.parametrize(
    ("normalizer", "named"),
    [
        (normalizers.Replace("a", "b" * 100_000), "100,000 characters of one"),
        (normalizers.Replace("ab", "c" * 17), "8 characters of one"),  # 17 / 2: 9, one past
        (normalizers.Sequence([normalizers.Replace("a", "bbb"), normalizers.Replace("b", "ccc")]), "9 characters"),
        (normalizers.Sequence([normalizers.NFKC(), normalizers.Prepend("▁" * 8)]), "9 characters"),
        (normalizers.Replace(Regex("x*"), "y" * 8), "9 characters"),  # a pattern that matches nothing: everywhere
    ],
)
def test_a_normaliser_that_lengthens_text_is_refused_before_it_runs(
    copy: Path, monkeypatch: pytest.MonkeyPatch, normalizer: Any, named: str
) -> None:
    """A normaliser that can make more than 8 characters of one is refused at load from its spec, before it
    normalises anything: each text's work before its tokens are counted is then in proportion to the text."""
    with_normalizer(copy, normalizer)
    calls: list[str] = []
    monkeypatch.setattr(normaliser, "PROBE", ProbeSpy(calls))
    reason = refusal(copy)
    assert "tokenizer.json normalizer" in reason and named in reason and "limit of 8" in reason, reason
    assert calls == []  # refused from the spec: the probe never ran


class ProbeSpy(str):
    """normaliser.PROBE that records being walked."""

    def __new__(cls, calls: list[str]) -> ProbeSpy:
        spy = super().__new__(cls, "a")
        spy.calls = calls  # type: ignore[attr-defined]
        return spy

    def __iter__(self) -> Iterator[str]:
        self.calls.append("probed")  # type: ignore[attr-defined]
        return super().__iter__()


def test_the_load_probe_measures_what_the_spec_cannot(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BertNormalizer's growth is in its code (spaces round a CJK character), not its spec: the probe measures it
    (3 characters of a CJK character), refused here under a limit of 2 and loaded under the limit of 8."""
    with_normalizer(copy, normalizers.BertNormalizer(handle_chinese_chars=True))
    assert load_checkpoint("mine", copy, reference=False)
    monkeypatch.setattr(normaliser, "EXPANSION", 2)
    reason = refusal(copy)
    assert "makes 3 characters of '" in reason and "limit of 2" in reason, reason


class Spy:
    """The model's tokenizer, noting each text it tokenises: the step the bound on normalising comes before."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.tokenised: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self.tokenised.append(text)
        return self.inner.encode(text, *args, **kwargs)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": "ﷺ" * 100}, "text"),  # NFKC spells U+FDFA with 18 characters: 1,800 of 100, past 864
        ({"text": "a " + "ﷺ" * 1000}, "text"),
        ({"texts": ["a b", "ﷺ" * 100]}, "texts[1]"),
    ],
)
def test_a_text_its_normaliser_lengthens_past_the_limit_is_a_422_before_it_is_tokenised(
    copy: Path,
    tmp_path: Path,
    make_client: Callable[..., AbstractContextManager[TestClient]],
    body: dict[str, Any],
    field: str,
) -> None:
    """Each text is normalised a piece at a time and refused once past 8 characters per character (+ 64), before
    it is normalised whole or tokenised; a checkpoint whose normaliser is refused at load leaves the server
    serving the others."""
    text = body["text"] if field == "text" else body["texts"][1]
    with_normalizer(copy, normalizers.NFKC())
    grows = with_normalizer(shutil.copytree(copy, tmp_path / "grows"), normalizers.Replace("a", "b" * 100_000))
    with make_client(models=f"textbook,mine={copy},grows={grows}", reference=False) as client:
        listed = client.get("/api/models").json()
        model = client.app.state.models["mine"]
        model.pieces.tokenizer = spy = Spy(model.pieces.tokenizer)
        refused = client.post("/api/attention", json={"model": "mine", **body})
    assert [m["name"] for m in listed["models"]] == ["textbook", "mine"]
    assert [u["name"] for u in listed["unavailable"]] == ["grows"]
    assert "normalizer" in listed["unavailable"][0]["reason"]
    assert_error(refused, 422, field, f"{8 * len(text) + 64:,}")
    assert text not in spy.tokenised


def test_an_unforeseen_failure_names_no_path_of_the_server(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure the loader does not foresee is still told without the server's paths (the log has them)."""
    from engine.models import load_checkpoint_or_why

    def fails(name: str, directory: Path, **loading: Any) -> None:
        raise OSError(f"[Errno 5] Input/output error: '{directory.resolve() / 'model.safetensors'}'")

    monkeypatch.setattr(checkpoint, "load_checkpoint", fails)
    reason = load_checkpoint_or_why("mine", copy)
    assert isinstance(reason, str) and "OSError" in reason and "model.safetensors" in reason
    assert str(copy.parent) not in reason and str(copy.resolve().parent) not in reason, reason
