"""Load a Hugging Face checkpoint directory as an attnlab model, checking everything before trusting anything.

    directory/config.json          model_type picks the family (engine/models/families/); sizes from it
    directory/tokenizer.json       read by the tokenizers library (engine/tokens.py); an image family (vit, deit,
                                   dinov2) has none: its input is an image's pixels (engine/models/image_model.py)
    directory/preprocessor_config.json   an image checkpoint's: how a caller resizes and normalises an image for it,
                                   kept on the model as it is (optional; image and patch sizes come from config.json)
    directory/model.safetensors    the weights, or shards listed by model.safetensors.index.json
    directory/attnlab.json         optional: the model's card (held-out loss, notes), served as it is

No file outside the directory is read: a link in it whose target lies outside (a card linked to another file on
the server, say) is refused before anything is opened. A reason names the file by its name in the directory and
never the server's paths, since clients are told it (GET /api/models `unavailable`); the server's log has the
directory.

In order, each step a CheckpointError with a reason that names the file or config field: config.json is read and
its model_type must be one of SUPPORTED; its sizes must be positive, heads divide, and lie within CheckpointLimits
(parameters counted from the shapes the config implies) before any tensor is read; tokenizer.json must be there,
every id it gives a row of the embedding, and its normaliser may lengthen a character at most 8 times
(engine/normaliser.py, which bounds each text's work before its tokens are counted); weights are read only through
safetensors, every tensor's shape checked against the header before it is loaded. A directory whose weights are
only a pickle (pytorch_model.bin, *.pt, *.pth, *.ckpt) is refused with the command that converts it, and the
pickle is never opened: unpickling runs code.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import safe_open
from tokenizers import Tokenizer
from torch import Tensor

from engine import normaliser
from engine.models.checkpoint_model import CheckpointModel
from engine.models.families import CheckpointError, Family, Sizes
from engine.models.families.registry import SUPPORTED, family_for
from engine.models.image_model import ImageCheckpointModel

__all__ = [
    "SUPPORTED",
    "CheckpointError",
    "CheckpointLimits",
    "CheckpointModel",
    "ImageCheckpointModel",
    "from_transformers",
    "load_checkpoint",
]

T = TypeVar("T")
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
CONVERT = (
    'python -c "from transformers import AutoModelForCausalLM as M; '
    "M.from_pretrained('DIR').save_pretrained('DIR', safe_serialization=True)\" "
    "with DIR the checkpoint's directory (AutoModelForMaskedLM for an encoder), in an environment you trust with "
    "that file"
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
        raise CheckpointError(f"{path.name}: cannot read {what} ({err})") from err
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name}: {what} must be a JSON object, got {type(data).__name__}")
    return data


# encoder-decoders: a decoder attending to an encoder's output in every layer, which attnlab's families do not map yet
ENCODER_DECODERS = ("t5", "mt5", "umt5", "bart", "mbart", "pegasus", "marian", "m2m_100", "blenderbot", "led")


def family_of(config: Mapping[str, Any]) -> Family:
    model_type = config.get("model_type")
    family = family_for(model_type) if isinstance(model_type, str) else None
    if family is None:
        why = f"config.json model_type: got {model_type!r}"
        if model_type in ENCODER_DECODERS or config.get("is_encoder_decoder") is True:
            why += (
                ": an encoder-decoder (T5, BART), whose decoder attends to the encoder's output in every layer, is not "
                "read yet (a later version maps it); an encoder or a decoder alone is"
            )
        raise CheckpointError(f"{why}; attnlab reads {', '.join(SUPPORTED)}")
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
            raise CheckpointError(f"{index.name}: weight_map missing or empty")
        shards = []
        for name in sorted(set(weight_map.values())):
            shard = directory / str(name)
            if Path(str(name)).name != str(name) or shard.suffix != ".safetensors" or not shard.is_file():
                raise CheckpointError(
                    f"{index.name}: shard {name!r} is not a .safetensors file in the checkpoint's directory"
                )
            shards.append(shard)
        return shards
    pickles = sorted(p for pattern in PICKLES for p in directory.glob(pattern))
    if pickles:
        raise CheckpointError(
            f"{pickles[0].name}: attnlab reads weights only from safetensors and never opens a pickle (unpickling "
            f"runs code); convert it: {CONVERT}"
        )
    raise CheckpointError("no model.safetensors (or model.safetensors.index.json) with the weights")


def read_tensors(files: list[Path], family: Family, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Tensor]:
    """Every tensor `shapes` names, its shape checked against the header before it is loaded, as the file stores
    it: safetensors maps the file, so each tensor is a view of its pages, not a copy (a bfloat16 checkpoint stays
    bfloat16: a run converts one block at a time, engine/stored.py)."""
    found: dict[str, tuple[Path, str]] = {}
    for path in files:
        try:
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
        except Exception as err:  # safetensors raises its own error for a damaged header
            raise CheckpointError(f"{path.name}: not a readable safetensors file ({err})") from err
        for key in keys:
            found.setdefault(family.name(key), (path, key))
    missing = [n for n in shapes if n not in found]
    if missing:
        raise CheckpointError(
            f"{files[0].name}: no tensor {family.prefix}{missing[0]} (or {missing[0]}) in the weights, which the "
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
                out[name] = f.get_tensor(key)
    return out


def check_token_ids(tokenizer: Tokenizer, rows: int, where: str = "tokenizer.json") -> None:
    """Every id the tokenizer can give has a row of the embedding (config.json vocab_size), checked from its
    vocabulary alone before anything is built from the ids: a piece with id 10^9 in a 2,048-row model would make
    a listing of 10^9 labels (7.9 GB at start-up) for ids no text can run on."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    piece, top = max(vocab.items(), key=lambda item: item[1], default=("", -1))
    if top >= rows:
        raise CheckpointError(
            f"{where}: piece {piece!r} has id {top:,}, but the model's vocabulary is {rows:,} ids (config.json "
            f"vocab_size: embedding rows 0 to {rows - 1:,}): the tokenizer does not belong to these weights"
        )


def check_normalizer(tokenizer: Tokenizer, where: str = "tokenizer.json") -> None:
    """The tokenizer's normaliser lengthens a character at most normaliser.EXPANSION times (engine/normaliser.py),
    so the work of normalising a text before its tokens are counted is in proportion to the text."""
    why = normaliser.refusal(tokenizer.normalizer)
    if why is not None:
        raise CheckpointError(f"{where} normalizer: {why}")


def load_tokenizer(directory: Path) -> Tokenizer:
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(
            "tokenizer.json: missing; attnlab reads the tokenizer from it (tokenizer.save_pretrained writes it)"
        )
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises its own exception types
        raise CheckpointError(f"tokenizer.json: cannot read it ({err})") from err
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
    image_class: type[ImageCheckpointModel] = ImageCheckpointModel,
) -> CheckpointModel | ImageCheckpointModel:
    """The checkpoint in `directory`, served as `name`; `reference`: compare it with transformers' forward pass
    (engine/models/reference.py) and keep the differences on the model. `model_class` builds a text checkpoint,
    `image_class` an image one (a built-in model's own subclass). A refusal's reason holds no path of the
    server's: a library's message that quotes one has it cut to the file's name in the directory."""
    try:
        return load_inside(name, Path(directory), limits, reference, model_class, image_class)
    except CheckpointError as err:
        raise CheckpointError(unrooted(err.reason, Path(directory))) from err


def load_inside(
    name: str,
    given: Path,
    limits: CheckpointLimits,
    reference: bool,
    model_class: type[CheckpointModel],
    image_class: type[ImageCheckpointModel] = ImageCheckpointModel,
) -> CheckpointModel | ImageCheckpointModel:
    if not given.is_dir():
        raise CheckpointError("the checkpoint's directory is missing or not a directory")
    directory = given.resolve()
    check_links(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError("config.json: missing; a Hugging Face checkpoint has config.json (save_pretrained)")
    config = read_json(config_path, "config.json")
    family = family_of(config)
    sizes = reading_config(family.sizes, config)
    check_limits(sizes, 0, limits)  # the layer count bounds the work of listing the shapes
    shapes = reading_config(family.shapes, config)
    check_limits(sizes, parameters(shapes), limits)
    tokenizer = None if family.reads == "pixels" else load_tokenizer(directory)
    if tokenizer is not None:
        check_token_ids(tokenizer, sizes.vocab_size)
        check_normalizer(tokenizer)
    files = weight_files(directory)
    tensors = read_tensors(files, family, shapes)
    card_path = directory / "attnlab.json"
    card = read_json(card_path, "the model card") if card_path.is_file() else {}
    mapped = reading_config(lambda c: family.build(c, tensors), config)
    model_type = str(config["model_type"])
    model: CheckpointModel | ImageCheckpointModel
    if tokenizer is None:
        pre_path = directory / "preprocessor_config.json"
        pre = read_json(pre_path, "the image preprocessor's settings") if pre_path.is_file() else {}
        model = image_class(name, model_type, sizes, mapped, directory=directory, card=card, preprocessor=pre)
    else:
        model = model_class(name, model_type, sizes, mapped, tokenizer, directory=directory, card=card)
    if reference:
        from engine.models.reference import compare

        model.reference = compare(model, directory)
    return model


def roots(directory: Path) -> tuple[Path, ...]:
    """Where the files of the (resolved) `directory` may really lie: in it, and for a Hugging Face hub snapshot
    (hub/models--org--name/snapshots/REV, whose files link to ../../blobs/HASH) in its repository's blobs."""
    if directory.parent.name == "snapshots" and directory.parent.parent.name.startswith("models--"):
        return (directory, directory.parent.parent / "blobs")
    return (directory,)


def check_links(directory: Path) -> None:
    """Every link among the directory's files leads inside it (roots), before any file is opened: the loader, and
    transformers for the reference check, then read only files of the checkpoint, never one elsewhere on the
    server (a card linked to another file would be served to every client)."""
    inside = roots(directory)
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.is_symlink():
                continue
            try:
                target = Path(entry.path).resolve()
            except (OSError, RuntimeError) as err:  # a loop of links: RuntimeError before Python 3.13
                raise CheckpointError(f"{entry.name}: a link that leads to no file ({type(err).__name__})") from err
            if not any(target.is_relative_to(root) for root in inside):
                raise CheckpointError(
                    f"{entry.name}: a link to a file outside the checkpoint's directory; attnlab reads only the "
                    "files in it (copy the file in)"
                )


def unrooted(reason: str, directory: Path) -> str:
    """`reason` with the checkpoint's directory, as given and as resolved, cut from every path it quotes."""
    forms = {str(directory), str(directory.absolute())}
    with contextlib.suppress(OSError, RuntimeError):  # a loop of links: RuntimeError before Python 3.13
        forms.add(str(directory.resolve()))
    for form in sorted((f for f in forms if len(f) > 1), key=len, reverse=True):
        reason = reason.replace(form + os.sep, "").replace(form, "the checkpoint's directory")
    return reason


def from_transformers(name: str, model: Any, tokenizer: Any, *, reference: bool = True) -> CheckpointModel:
    """A transformers PreTrainedModel and its tokenizer, in this process, through the same mapping."""
    config = model.config.to_dict()
    family = family_of(config)
    if family.reads == "pixels":  # in memory transformers 5 names their tensors otherwise than the file does
        raise CheckpointError(
            f"{type(model).__name__}: an image model is read from its directory (save_pretrained, then load that)"
        )
    sizes = family.sizes(config)
    shapes = family.shapes(config)
    state = {family.name(k): v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}
    for key, shape in shapes.items():
        if key not in state:
            raise CheckpointError(f"{type(model).__name__}: no tensor {key}, which its config implies")
        if tuple(state[key].shape) != tuple(shape):
            raise CheckpointError(f"{key}: shape {list(state[key].shape)}, expected {list(shape)} from its config")
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    check_token_ids(backend, sizes.vocab_size, f"{type(tokenizer).__name__}")
    check_normalizer(backend, f"{type(tokenizer).__name__}")
    out = CheckpointModel(name, str(config["model_type"]), sizes, family.build(config, state), backend)
    if reference:
        from engine.models.reference import compare

        out.reference = compare(out, model)
    return out
