"""One step of a run: its measures, the probe's attention weights for every head, and the weights themselves.

`write(directory)` makes a checkpoint directory that engine/models/checkpoint.py loads as it loads a user's:

    config.json          transformers' gpt2 (scale_attn_weights as the run's scale); under "attnlab" the run's
                         causal, task, mlp, init, step and seed (causal false: open it with the causal mask off)
    model.safetensors    GPT2LMHeadModel's tensor names (model.gpt2_state)
    tokenizer.json       the task's tokenizer (tasks.tokenizer_json)
    attnlab.json         the model's card: the run's spec, the step, its held-out loss, and the probe as the text a
                         view opens it on (default_text)
    probe.safetensors    "weights": the probe's attention weights [layers, heads, T, T]; its metadata the tokens
    measures.json        the measures, as handed to the run's callback
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor

from engine.trainlab.model import gpt2_config
from engine.trainlab.spec import TrainSpec
from engine.trainlab.tasks import tokenizer_json, vocab_size


def jsonable(value: Any) -> Any:
    """Nested lists and dicts of floats with every inf or NaN (a diverged run) as None, so JSON stays strict."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Snapshot:
    step: int
    measures: dict[str, Any]  # JSON-able; keys in measures.py and the contract
    weights: Tensor  # (layers, heads, T, T) float32: the probe's attention weights
    probe_tokens: list[str]
    spec: TrainSpec = field(repr=False)
    state: dict[str, Tensor] = field(repr=False)  # the model's weights under gpt2's names, a copy taken at `step`

    def config(self) -> dict[str, Any]:
        return gpt2_config(self.spec, vocab_size(self.spec.task), self.step)

    def card(self) -> dict[str, Any]:
        """attnlab.json: what the run was, and the probe as text. The text task's tokenizer puts <|endoftext|> first
        and a window cut from a file may split differently when read again, so its text leaves two pieces off."""
        if self.spec.task == "text":
            text = "".join(self.probe_tokens[: max(1, len(self.probe_tokens) - 2)])
        else:
            text = " ".join(self.probe_tokens)
        return {
            "trained_by": "attnlab's training lab",
            "spec": asdict(self.spec),
            "step": self.step,
            "held_out_loss": self.measures.get("held_out_loss"),
            "default_text": text,
        }

    def write(self, directory: Path) -> None:
        """The checkpoint directory (see the module's docstring); `directory` is made if missing."""
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(self.config(), indent=2), encoding="utf-8")
        save_file(self.state, str(directory / "model.safetensors"), metadata={"format": "pt"})
        (directory / "tokenizer.json").write_text(tokenizer_json(self.spec.task), encoding="utf-8")
        (directory / "attnlab.json").write_text(json.dumps(self.card(), allow_nan=False, indent=2), encoding="utf-8")
        probe_meta = {"tokens": json.dumps(self.probe_tokens), "step": str(self.step)}
        save_file({"weights": self.weights.contiguous()}, str(directory / "probe.safetensors"), metadata=probe_meta)
        (directory / "measures.json").write_text(json.dumps(self.measures, allow_nan=False), encoding="utf-8")
