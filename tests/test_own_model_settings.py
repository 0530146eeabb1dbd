"""ATTNLAB_MODELS with NAME=DIR checkpoint entries, and `attnlab serve --model NAME=DIR`: what is read, what is
refused before the server starts, and what the server is started with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from server import cli
from server.config import Settings


def test_models_mix_built_in_names_all_and_checkpoints(tmp_path: Path) -> None:
    s = Settings(models=f"textbook, mine={tmp_path}, other = {tmp_path / 'b'} ,random")
    assert s.model_names(["textbook", "random", "custom"]) == ["textbook", "random"]
    assert s.checkpoints() == {"mine": tmp_path, "other": tmp_path / "b"}
    every = Settings(models=f"all,mine={tmp_path}")
    assert every.model_names(["textbook", "random"]) == ["textbook", "random"]
    assert every.checkpoints() == {"mine": tmp_path}
    assert Settings(models="all").checkpoints() == {}
    assert Settings(models="c=~/x").checkpoints() == {"c": Path.home() / "x"}


@pytest.mark.parametrize(
    ("models", "said"),
    [
        ("1st=/tmp/x", "the name before = is '1st'"),
        ("my model=/tmp/x", "the name before = is 'my model'"),
        ("../x=/tmp/x", "the name before = is '../x'"),
        ("textbook=/tmp/x", "textbook is a built-in model's name"),
        ("all=/tmp/x", "all is a built-in model's name"),
        ("mine=", "no directory after ="),
        ("mine=/a,mine=/b", "mine is given twice"),
    ],
)
def test_a_bad_checkpoint_entry_stops_the_settings_naming_it(models: str, said: str) -> None:
    with pytest.raises(ValidationError) as err:
        Settings(models=models)
    assert said in str(err.value) and err.value.errors()[0]["loc"] == ("models",)


def test_checkpoint_loading_keywords_come_from_the_settings() -> None:
    loading = Settings(reference=False, checkpoint_parameters=1234).checkpoint_loading()
    assert loading["reference"] is False and loading["limits"].max_parameters == 1234
    assert Settings().checkpoint_loading()["reference"] is True


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `attnlab serve` would start uvicorn with (uvicorn itself not run)."""
    seen: dict[str, Any] = {}

    def run(server: cli.Serving) -> None:
        seen["settings"] = server.app.state.settings

    monkeypatch.setattr(cli.Serving, "run", run)
    monkeypatch.setattr(cli, "json_logging", lambda level: None)
    return seen


def test_serve_model_adds_checkpoints_to_models(
    started: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cli.main(["serve", "--models", "textbook", "--model", f"a={tmp_path}", "--model", f"b={tmp_path / 'b'}"])
    s = started["settings"]
    assert s.model_names(["textbook", "random"]) == ["textbook"]
    assert s.checkpoints() == {"a": tmp_path, "b": tmp_path / "b"}
    # without --models, to what ATTNLAB_MODELS names
    monkeypatch.setenv("ATTNLAB_MODELS", "random")
    cli.main(["serve", "--model", f"a={tmp_path}"])
    s = started["settings"]
    assert s.model_names(["textbook", "random"]) == ["random"] and s.checkpoints() == {"a": tmp_path}
    monkeypatch.delenv("ATTNLAB_MODELS")
    cli.main(["serve", "--model", f"a={tmp_path}"])  # and to the default, every built-in model
    assert started["settings"].model_names(["textbook", "random"]) == ["textbook", "random"]


def test_serve_model_refused_names_the_option(
    started: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.main(["serve", "--model", f"textbook={tmp_path}"])
    assert stop.value.code == 2 and "settings" not in started
    said = capsys.readouterr().err
    assert said.startswith("attnlab: ATTNLAB_MODELS/--model:") and "textbook is a built-in model's name" in said
