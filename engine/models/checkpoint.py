"""Load a Hugging Face checkpoint directory as an attnlab model, checking everything before trusting anything.

    directory/config.json          model_type picks the family (engine/models/families/); sizes from it
    directory/tokenizer.json       read by the tokenizers library (engine/tokens.py)
    directory/model.safetensors    the weights, or shards listed by model.safetensors.index.json
    directory/attnlab.json         optional: the model's card (held-out loss, notes), served as it is

In order, each step a CheckpointError with a reason that names the file or config field: config.json is read
and its model_type must be one of SUPPORTED; its sizes must be positive, heads divide, and lie within
CheckpointLimits (parameters counted from the shapes the config implies) before any tensor is read; tokenizer.json
must be there; weights are read only through safetensors, every tensor's shape checked against the header
before it is loaded. A directory whose weights are only a pickle (pytorch_model.bin, *.pt, *.pth, *.ckpt) is
refused with the command that converts it, and the pickle is never opened: unpickling runs code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import safe_open
from tokenizers import Tokenizer
from torch import Tensor

from engine.models.checkpoint_model import CheckpointModel
from engine.models.families import SUPPORTED, CheckpointError, Family, Sizes, family_for

__all__ = [
    "SUPPORTED",
    "CheckpointError",
    "CheckpointLimits",
    "CheckpointModel",
    "from_transformers",
    "load_checkpoint",
]

T = TypeVar("T")
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
CONVERT = (
    'python -c "from transformers import AutoModelForCausalLM as M; '
    "M.from_pretrained('{d}').save_pretrained('{d}', safe_serialization=True)\" "
    "(AutoModelForMaskedLM for an encoder), in an environment you trust with that file"
)


@dataclass(frozen=True)
class CheckpointLimits:
    """The largest checkpoint a server loads, checked from config.json before any tensor is read."""

    max_layers: int = 128
    max_d_model: int = 16384
    max_heads: int = 256
    max_vocab: int = 512_000
    max_positions: int = 1_048_576
    max_parameters: int = 2_000_000_000  # 8 GB in float32


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: cannot read {what} ({err})") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


def family_of(config: Mapping[str, Any]) -> Family:
    model_type = config.get("model_type")
    family = family_for(model_type) if isinstance(model_type, str) else None
    if family is None:
        raise CheckpointError(f"config.json model_type: got {model_type!r}; attnlab reads {', '.join(SUPPORTED)}")
    return family


def check_limits(sizes: Sizes, n_parameters: int, limits: CheckpointLimits) -> None:
    checks = (
        ("max_layers", sizes.n_layers, limits.max_layers, "layers"),
        ("max_d_model", sizes.d_model, limits.max_d_model, "width (hidden size)"),
        ("max_heads", sizes.n_heads, limits.max_heads, "attention heads"),
        ("max_vocab", sizes.vocab_size, limits.max_vocab, "vocabulary entries"),
        ("max_positions", sizes.max_positions, limits.max_positions, "positions"),
        ("max_parameters", n_parameters, limits.max_parameters, "parameters"),
    )
    for name, got, limit, what in checks:
        if got > limit:
            raise CheckpointError(
                f"config.json: its sizes make {got:,} {what}, past this server's limit of {limit:,} ({name}"
                + (", ATTNLAB_CHECKPOINT_PARAMETERS)" if name == "max_parameters" else ")")
            )


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files holding the weights; a CheckpointError naming a pickle where that is all there is."""
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if index.is_file():
        weight_map = read_json(index, "the shard index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: weight_map missing or empty")
        shards = []
        for name in sorted(set(weight_map.values())):
            shard = directory / str(name)
            if Path(str(name)).name != str(name) or shard.suffix != ".safetensors" or not shard.is_file():
                raise CheckpointError(f"{index}: shard {name!r} is not a .safetensors file in {directory}")
            shards.append(shard)
        return shards
    pickles = sorted(p for pattern in PICKLES for p in directory.glob(pattern))
    if pickles:
        raise CheckpointError(
            f"{pickles[0]}: attnlab reads weights only from safetensors and never opens a pickle (unpickling runs "
            f"code); convert it: {CONVERT.format(d=directory)}"
        )
    raise CheckpointError(f"{directory}: no model.safetensors (or model.safetensors.index.json) with the weights")


def read_tensors(files: list[Path], family: Family, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """Every tensor `shapes` names, its shape checked against the header before it is loaded, as float32."""
    found: dict[str, tuple[Path, str]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
        except Exception as err:  # safetensors raises its own error for a damaged header
            raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from err
        for key in keys:
            found.setdefault(family.name(key), (path, key))
    missing = [n for n in shapes if n not in found]
    if missing:
        raise CheckpointError(
            f"{files[0].parent}: no tensor {family.prefix}{missing[0]} (or {missing[0]}) in the weights, which the "
            f"config implies ({len(missing)} missing)"
        )
    out: dict[str, Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name, (where, key) in found.items():
                if where != path or name not in shapes:
                    continue
                got = tuple(f.get_slice(key).get_shape())
                if got != tuple(shapes[name]):
                    raise CheckpointError(
                        f"{path.name}: tensor {key} has shape {list(got)}, expected {list(shapes[name])} "
                        "from config.json"
                    )
                out[name] = f.get_tensor(key).to(torch.float32)
    return out


def load_tokenizer(directory: Path) -> Tokenizer:
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(
            f"{path}: missing; attnlab reads the tokenizer from tokenizer.json (tokenizer.save_pretrained writes it)"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises its own exception types
        raise CheckpointError(f"{path}: cannot read it ({err})") from err
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def reading_config(step: Callable[[dict[str, Any]], T], config: dict[str, Any]) -> T:
    """A family's step on config.json; a value of the wrong kind that the family reads without checking (a string
    for a number, say) is a CheckpointError about config.json rather than a crash."""
    try:
        return step(config)
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(
            f"config.json: a field has a value of the wrong kind ({type(err).__name__}: {err})"
        ) from err


def parameters(shapes: Mapping[str, tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes.values())


def load_checkpoint(
    name: str,
    directory: str | Path,
    *,
    limits: CheckpointLimits = CheckpointLimits(),
    reference: bool = True,
    model_class: type[CheckpointModel] = CheckpointModel,
) -> CheckpointModel:
    """The checkpoint in `directory`, served as `name`; `reference`: compare it with transformers' forward pass
    (engine/models/reference.py) and keep the differences on the model."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{config_path}: missing; a Hugging Face checkpoint has config.json (save_pretrained)")
    config = read_json(config_path, "config.json")
    family = family_of(config)
    sizes = reading_config(family.sizes, config)
    check_limits(sizes, 0, limits)  # the layer count bounds the work of listing the shapes
    shapes = reading_config(family.shapes, config)
    check_limits(sizes, parameters(shapes), limits)
    tokenizer = load_tokenizer(directory)
    files = weight_files(directory)
    tensors = read_tensors(files, family, shapes)
    card_path = directory / "attnlab.json"
    card = read_json(card_path, "the model card") if card_path.is_file() else {}
    mapped = reading_config(lambda c: family.build(c, tensors), config)
    model = model_class(name, str(config["model_type"]), sizes, mapped, tokenizer, directory=directory, card=card)
    if reference:
        from engine.models.reference import compare

        model.reference = compare(model, directory)
    return model


def from_transformers(name: str, model: Any, tokenizer: Any, *, reference: bool = True) -> CheckpointModel:
    """A transformers PreTrainedModel and its tokenizer, in this process, through the same mapping."""
    config = model.config.to_dict()
    family = family_of(config)
    sizes = family.sizes(config)
    shapes = family.shapes(config)
    state = {family.name(k): v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    for key, shape in shapes.items():
        if key not in state:
            raise CheckpointError(f"{type(model).__name__}: no tensor {key}, which its config implies")
        if tuple(state[key].shape) != tuple(shape):
            raise CheckpointError(f"{key}: shape {list(state[key].shape)}, expected {list(shape)} from its config")
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    out = CheckpointModel(name, str(config["model_type"]), sizes, family.build(config, state), backend)
    if reference:
        from engine.models.reference import compare

        out.reference = compare(out, model)
    return out
