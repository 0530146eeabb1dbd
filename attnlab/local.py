"""attnlab.run: the engine in the caller's own process and thread, no server, through the server's own path.

A call is an /api/attention request, run by server/inprocess.py (the server's entry for one request with no HTTP):
the body is validated by the same schema (AttentionRequest), checked and tokenised by server.plan.make_plan under
the same limits (ATTNLAB_* settings, as a server started in this environment would read them), run by the same
engine and serialised by the same serialize_run, so the result is the one /api/attention answers, with its
matrices as NumPy arrays. Errors are the API's too, as attnlab.ApiError. Each model loads once per process; runs
are not kept, and no compute threads start.

A model is named as on a server, or given as itself: a checkpoint directory (str or Path), a model that
attnlab.load returned, or a transformers model object with its tokenizer (`tokenizer=`); each is registered in this
process under its name, as a server lists a NAME=DIR entry.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pydantic
from fastapi.exceptions import RequestValidationError

from attnlab.arrays import jsonable
from attnlab.errors import ApiError
from engine.errors import InputError
from engine.models import BUILDERS, AttentionModel, LoadedModels, load_available, model_for
from server import errors as server_errors
from server import inprocess
from server.config import Settings
from server.deps import Runtime

TRAINED_PREFIX = "train:"  # server/trained.py's PREFIX: a training run's snapshot, which only a server opens
_models = LoadedModels({}, {})
_loading = threading.Lock()
_directories: dict[Path, str] = {}  # checkpoint directories loaded here, by resolved path -> the name they run as


def loaded_models(name: str) -> LoadedModels:
    """The models this process has loaded, with `name` loaded too when attnlab knows it (once per process)."""
    with _loading:
        if name in BUILDERS and name not in _models and name not in _models.unavailable:
            found = load_available([name])
            _models.update(found)
            _models.unavailable.update(found.unavailable)
    return _models


def models_for(name: str | None, field: str = "model") -> LoadedModels:
    """The loaded models, with `name` among them (None: a request that names none, which the server refuses); an
    unknown name is the 422 the server gives, naming every model attnlab has rather than those loaded so far, and
    `field`, where the body names it ("model", "b.model"). A training run's snapshot ("train:RUN@STEP") is kept by
    a server's training store, which this process does not open: refused, saying so."""
    if name is not None and name.startswith(TRAINED_PREFIX) and name not in _models:
        raise server_errors.ApiError(
            422,
            "unknown_model",
            f"{name[:100]!r} names a training run's snapshot, which a server keeps (attnlab serve, GET /api/train): "
            "ask that server with attnlab.Client, or give the snapshot's checkpoint directory here",
            field,
        )
    if name is not None and name not in BUILDERS and name not in _models:
        known = ", ".join(sorted({*BUILDERS, *_models}))
        raise server_errors.ApiError(
            422,
            "unknown_model",
            f"unknown model {name!r}; attnlab has {known}, or give a checkpoint directory",
            field,
        )
    return loaded_models(name or "")


def load(directory: str | os.PathLike[str], name: str | None = None) -> AttentionModel:
    """The checkpoint in `directory` (config.json, *.safetensors, tokenizer.json), loaded and checked as a server
    loads a NAME=DIR entry (its limits, ATTNLAB_REFERENCE), and registered in this process under `name` (default:
    the directory's own name), so attnlab.run and attnlab.show can name it. Loaded afresh on every call.

    The model printed says its name, family, size and how closely it matched transformers (`.reference`). Raises
    attnlab.ApiError (422, field "model") with the loader's reason when the directory cannot load: a pickle-only
    checkpoint, an unknown model_type, a missing file, a config past the limits."""
    from engine.models.checkpoint import CheckpointError, load_checkpoint

    path = Path(directory).expanduser().resolve()
    with _loading:
        served = name or _directories.get(path) or free_name(path.name)
        if served in BUILDERS:
            raise ApiError(422, "invalid_request", f"{served} is a built-in model's name: give another name=", "model")
        try:
            model = load_checkpoint(served, path, **Settings().checkpoint_loading())
        except CheckpointError as err:
            raise ApiError(422, "model_unavailable", f"model: {err.reason}", "model") from err
        _models[served] = model
        _models.unavailable.pop(served, None)
        _directories[path] = served
    return model


def from_model(model: Any, tokenizer: Any, name: str | None = None) -> AttentionModel:
    """A transformers model object and its tokenizer (in this process) as attnlab's model, registered under `name`
    (default: the model's name_or_path's last part, or its model_type). Converted afresh on every call, so a model
    changed since (trained further, say) runs as it is now."""
    from engine.models.checkpoint import CheckpointError, from_transformers

    if tokenizer is None:
        raise ApiError(422, "invalid_request", "tokenizer: give the model's tokenizer too (tokenizer=)", "tokenizer")
    config = getattr(model, "config", None)
    base = str(getattr(config, "name_or_path", "") or "").rstrip("/").rsplit("/", 1)[-1]
    with _loading:
        served = name or free_name(base or str(getattr(config, "model_type", "") or "model"), keep=id(model))
        try:
            converted = from_transformers(served, model, tokenizer, reference=Settings().reference)
        except CheckpointError as err:
            raise ApiError(422, "model_unavailable", f"model: {err.reason}", "model") from err
        _models[served] = converted
        _objects[served] = id(model)
    return converted


_objects: dict[str, int] = {}  # transformers model objects converted here: name -> the object's id


def free_name(base: str, keep: int | None = None) -> str:
    """A name for a model given as a directory or an object: `base` made a plain identifier, numbered past the
    names built-in models and other models here already have (a name stays its object's: `keep`, its id)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.")[:60] or "model"
    name = name if name[0].isalpha() else f"m-{name}"
    taken = {*BUILDERS, *_models}
    candidate, n = name, 1
    while candidate in taken and (keep is None or _objects.get(candidate) != keep):
        n += 1
        candidate = f"{name}-{n}"
    return candidate


def model_named(model: Any, tokenizer: Any = None) -> str | None:
    """The name a run asks for: `model` itself when it is one (or None), else the model it stands for, registered
    here: a directory (loaded once per process), a model attnlab.load returned, a transformers model object."""
    if model is None:
        return None
    if isinstance(model, AttentionModel):
        with _loading:
            _models[model.name] = model
        return model.name
    if isinstance(model, str) and (model in BUILDERS or model in _models):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = Path(model).expanduser()
        if not path.is_dir():
            return str(model)  # a name this process does not have: models_for says so
        known = _directories.get(path.resolve())
        return known if known is not None and known in _models else load(path).name
    if hasattr(model, "config") and hasattr(model, "state_dict"):
        return from_model(model, tokenizer).name
    raise ApiError(
        422,
        "invalid_request",
        f"model: got a {type(model).__name__}; give a model's name, a checkpoint directory, attnlab.load's model "
        "or a transformers model with tokenizer=",
        "model",
    )


_runtimes: dict[tuple[str, str], Runtime] = {}


def runtime(device: str, dtype: str) -> Runtime:
    """One runtime per device and dtype in this process (server/inprocess.py's: no threads, no forward passes kept;
    the long runs of attnlab.runs kept for their tiles)."""
    with _loading:
        if (device, dtype) not in _runtimes:
            _runtimes[device, dtype] = inprocess.local_runtime(device, dtype)
        return _runtimes[device, dtype]


def runtimes() -> list[Runtime]:
    """Every runtime this process has made, first made first."""
    with _loading:
        return list(_runtimes.values())


def run(
    model: Any = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    tokenizer: Any = None,
    **fields: Any,
) -> dict[str, Any]:
    """Run `model` on `text` (or tokens=, x= with weights=, texts=, source=) in this process, as /api/attention.

    `model`: a name ("minilm"), a checkpoint directory (str or Path), a model attnlab.load returned, or a
    transformers model object with its tokenizer as `tokenizer=`.

    `masks` ({"causal", "padding" | "padded", "window", "blocked"}; omitted: the model's defaults), `layer` (one
    index; all when omitted) and every other /api/attention field by name (options, include, scale, all_masked,
    precision, heads, kv_heads, demo_bug). `device` and `dtype` default to ATTNLAB_DEVICE and ATTNLAB_DTYPE.

    Returns the /api/attention result as a dict with NumPy arrays:
    `tokens` (list of str); `eligible` (S x S bool, True = may attend); `reasons` ({mask: bool grid of
    eligible's shape, True where that mask excludes the cell}); `layers[i]["index"]`,
    `layers[i]["heads"][h]["scores"]` and `["weights"]`
    (S x S float32, float64 under dtype float64; a batch adds a leading axis), `["contexts"]`, `["q"/"k"/"v"]`
    when included, `["stats"]` (entropy per query, masked weight, score range, mean distance, head health),
    `layers[i]["head_similarity"]` and `["output"]`; `config` (widths, heads, scale, device, dtype), `masks` (those
    in force), `shapes`, `timings_ms`, and `audit` when included. Raises attnlab.ApiError as the API would.
    """
    return _plain(compute(model, text, masks, layer, device=device, dtype=dtype, tokenizer=tokenizer, **fields))


def compute(
    model: Any = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    tokenizer: Any = None,
    **fields: Any,
) -> dict[str, Any]:
    """The /api/attention body as server/inprocess.py run_attention returns it, validated and refused as the API does
    (what `run` returns and `attnlab.show` embeds)."""
    settings = Settings()
    with api_errors():
        model = model_named(model, tokenizer)
    body = jsonable({**fields, "model": model, "text": text, "masks": masks, "layer": layer})
    body = {k: v for k, v in body.items() if v is not None or k in fields}
    with api_errors():
        req = inprocess.attention_request(body)
        models = models_for(model_for(req.model, req.x is not None, req.scores is not None or req.pattern is not None))
        where = runtime(device or settings.device, dtype or settings.dtype)
        return inprocess.run_attention(req, settings, models, where)


@contextmanager
def api_errors() -> Iterator[None]:
    """A refusal inside (a validation error, the engine's InputError, the server's ApiError) raised as the API's
    answer would read: attnlab.ApiError."""
    try:
        yield
    except pydantic.ValidationError as err:
        raise _validation_error(err) from err
    except RequestValidationError as err:  # a declared analysis's body, checked as its route checks it
        message, field, details = server_errors.validation_summary(err.errors())
        raise ApiError(422, "invalid_request", message, field, details) from err
    except InputError as err:
        raise ApiError(422, err.code, f"{err.field}: {err.message}", err.field, err.details()) from err
    except server_errors.ApiError as err:
        message = f"{err.field}: {err.message}" if err.field else err.message
        raise ApiError(err.status, err.code, message, err.field) from err


def _plain(value: Any) -> Any:
    """Tuples as lists, as in the API's answer (the arrays stay arrays)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _validation_error(err: pydantic.ValidationError) -> ApiError:
    """The 422 the server's handler makes of the same validation error."""
    message, field, details = server_errors.validation_summary(err.errors())
    return ApiError(422, "invalid_request", message, field, details)
