"""pycode, the code model attnlab trains and ships: its training script, its committed checkpoint and the heads the
card claims, measured again through the API."""

from __future__ import annotations

import json
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from engine.models.checkpoint import load_checkpoint
from engine.models.pycode import DIRECTORY, PycodeModel, heads_line
from engine.models.reference import compare
from engine.train_pycode import DEFAULT_TEXT, PycodeConfig, TrainConfig, train
from engine.train_pycode_data import RUN_LENGTHS, batch, definitions, extra_files, stdlib_files
from tests.fixtures import make_app_client

CARD = json.loads((DIRECTORY / "attnlab.json").read_text())


@pytest.mark.slow
def test_the_script_trains_a_tiny_model_that_loads(tmp_path: Path) -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = ([root / "heapq.py", root / "bisect.py", root / "colorsys.py"], [root / "textwrap.py"])
    extra = tmp_path / "extra"
    (extra / "pkg").mkdir(parents=True)
    (extra / "pkg" / "colours.py").write_text((root / "colorsys.py").read_text())
    (extra / "pkg" / "wrapping.py").write_text((root / "textwrap.py").read_text())  # a vendored held-out file
    tiny = PycodeConfig(layers=2, d_model=32, heads=4, kv_heads=2, d_ff=64, context=128)
    card = train(tiny, TrainConfig(steps=3, batch_size=2, extra=(str(extra),)), tmp_path / "out", files=files)
    tmp_path = tmp_path / "out"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "attnlab.json"):
        assert (tmp_path / name).is_file(), name
    model = load_checkpoint("tiny", tmp_path)
    assert model.family == "llama" and model.info.n_layers == 2 and model.info.n_kv_heads == 2
    assert model.card["steps"] == 3 and model.card["held_out_files"] == card["held_out_files"]
    assert 0 < card["held_out_loss"] < 20 and card["held_out_tokens"] > 0
    assert model.reference is not None and model.reference["max_abs_diff"]["output"] < 1e-4
    assert set(card["heads"]) >= {"previous_token", "induction", "bracket_match"}
    [read_as] = card["extra_code"]
    assert (read_as["files"], read_as["left_out"]) == (1, 1) and read_as["bytes"] == (
        root / "colorsys.py"
    ).stat().st_size
    assert card["train_files"] == 4


@pytest.mark.parametrize("copies", [0, 3])
def test_repeated_rows_mark_the_targets_an_induction_head_can_predict(copies: int) -> None:
    stream = torch.randint(1, 2048, (20_000,))
    rows, later = batch(random.Random(copies), stream, 256, 16, 2048, 0, 2, list(range(5, 300)), copies)
    assert rows.shape == (16, 256) and later.shape == (16, 255) and bool((rows[:, 0] == 0).all())
    assert not later[0::2].any()  # code rows
    for row, marked in zip(rows[1::2], later[1::2], strict=True):
        targets = marked.nonzero().flatten() + 1
        assert len(targets) >= RUN_LENGTHS[0]
        if copies == 0:
            assert int(targets[0]) == 129 and int(targets[-1]) == 255
        # some period of 8-64 pieces explains every marked target, and no period explains the unmarked code
        periods = [
            p for p in range(RUN_LENGTHS[0], RUN_LENGTHS[1] + 1) if bool((row[targets] == row[targets - p]).all())
        ]
        assert periods, "no period explains the marked targets"
        if copies:
            assert int(marked.sum()) <= (copies - 1) * periods[0]


def test_extra_code_leaves_out_any_file_holding_a_held_out_definition(tmp_path: Path) -> None:
    root = Path(sysconfig.get_paths()["stdlib"])
    held = (root / "heapq.py").read_text()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("import os\n\n" + held.split("def heappop")[0][-2000:] + "\n")
    (tmp_path / "heapq.py").write_text("y = 2\n")  # a held-out file's name
    kept, read_as = extra_files(tmp_path, [held])
    copied = bool(definitions((tmp_path / "b.py").read_text()) & definitions(held))
    assert [p.name for p in kept] == (["a.py"] if copied else ["a.py", "b.py"])
    assert copied and read_as.left_out == 2 and read_as.files == 1 and read_as.bytes == 6
    assert len(read_as.sha256) == 64


def test_held_out_files_are_not_trained_on() -> None:
    training, held = stdlib_files()
    assert held and not set(held) & set(training)
    assert [p.name for p in held] == [Path(n).name for n in CARD["held_out_files"]]
    assert training == sorted(training) and all("site-packages" not in p.parts for p in training)


def test_committed_checkpoint_is_small_and_hugging_face_shaped() -> None:
    config = json.loads((DIRECTORY / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_key_value_heads"] < config["num_attention_heads"]
    assert (DIRECTORY / "model.safetensors").stat().st_size < 20_000_000
    assert not list(DIRECTORY.glob("*.bin")) and not list(DIRECTORY.glob("*.pt"))


def test_engine_matches_transformers_on_the_committed_checkpoint() -> None:
    model = PycodeModel.build(None)
    ref = compare(model, DIRECTORY)
    assert ref["library"] is not None and ref["max_abs_diff"]["output"] < 1e-4
    assert ref["max_abs_diff"]["weights"] < 1e-5


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_app_client(models="pycode") as c:
        yield c


def best(rows: list[dict], key: str) -> dict:
    return max((r for r in rows if r[key] is not None), key=lambda r: r[key])


def test_the_card_states_the_probe_scores_the_api_measures(client: TestClient) -> None:
    # the card was measured on one probe of segment length 24, seed 0
    body = client.post("/api/heads", json={"model": "pycode", "probe": {"segment_lengths": [24], "seed": 0}}).json()
    assert body["scored_on"] == "probe" and body["segment_len"] == 24
    prev, ind = best(body["heads"], "previous_token"), best(body["heads"], "induction")
    assert prev["previous_token"] == pytest.approx(CARD["heads"]["previous_token"]["score"], abs=1e-3)
    assert ind["induction"] == pytest.approx(CARD["heads"]["induction"]["score"], abs=1e-3)
    assert f"{ind['layer']}.{ind['head']}" == CARD["heads"]["induction"]["head"]


def test_default_text_has_a_previous_token_head(client: TestClient) -> None:
    body = client.post("/api/heads", json={"model": "pycode", "text": DEFAULT_TEXT}).json()
    prev = best(body["heads"], "previous_token")
    assert prev["previous_token"] >= 0.5
    assert prev["previous_token"] == pytest.approx(CARD["heads"]["previous_token_on_default_text"]["score"], abs=1e-3)


def test_default_text_finds_a_bracket_matching_head(client: TestClient) -> None:
    models = {m["name"]: m for m in client.get("/api/models").json()["models"]}
    assert models["pycode"]["default_text"] == DEFAULT_TEXT
    body = client.post("/api/heads", json={"model": "pycode", "text": DEFAULT_TEXT}).json()
    assert body["scored_on"] == "input"
    top = best(body["heads"], "bracket_match")
    assert top["bracket_match"] >= 0.3
    assert top["bracket_match"] == pytest.approx(CARD["heads"]["bracket_match"]["score"], abs=1e-3)


def test_models_lists_pycode_with_its_card(client: TestClient) -> None:
    entry = next(m for m in client.get("/api/models").json()["models"] if m["name"] == "pycode")
    assert entry["family"] == "llama" and entry["n_kv_heads"] < entry["n_heads"]
    assert entry["card"]["held_out_loss"] == CARD["held_out_loss"] < 4.0  # ln(2048) = 7.62 is chance
    assert "held-out loss" in entry["description"]


def test_pycode_runs_and_predicts_code(client: TestClient) -> None:
    text = "for i in range(len(items)):\n    total += items[i]\nfor i in range(len(items)):\n    total += items[i]\n"
    body = client.post("/api/attention", json={"model": "pycode", "text": text, "include": []})
    assert body.status_code == 200, body.text
    tokens = body.json()["tokens"]
    assert tokens[0] == "<|endoftext|>" and "".join(tokens[1:]) == text


def test_description_says_which_heads_it_has_and_which_it_lacks() -> None:
    card = {
        "heads": {
            "bracket_match": {"head": "2.1", "score": 0.51},
            "induction": {"head": "1.2", "score": 0.04},
        }
    }
    line = heads_line(card)
    assert "bracket-matching head 2.1 (0.51 on the default text)" in line
    assert "no induction head (best 0.04" in line and "previous-token" not in line
    described = PycodeModel.build(None).info.description
    assert heads_line(CARD) in described and f"{CARD['held_out_loss']:.2f} nats per token" in described
    assert f"standard library and {len(CARD['extra_code'])} packages' Python" in described
