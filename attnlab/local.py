"""attnlab.run: the engine in the caller's own process and thread, no server, through the server's own path.

A call is an /api/attention request, run by server/inprocess.py (the server's entry for one request with no HTTP):
the body is validated by the same schema (AttentionRequest), checked and tokenised by server.prepare.prepare under
the same limits (ATTNLAB_* settings, as a server started in this environment would read them), run by the same
engine and serialised by the same serialize_run, so the result is the one /api/attention answers, with its
matrices as NumPy arrays. Errors are the API's too, as attnlab.ApiError. Each model loads once per process; runs
are not kept, and no compute threads start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import pydantic

from attnlab.arrays import jsonable
from attnlab.errors import ApiError
from engine.errors import InputError
from engine.models import BUILDERS, LoadedModels, load_available, model_for
from server import errors as server_errors
from server import inprocess
from server.config import Settings
from server.deps import Runtime

_models = LoadedModels({}, {})
_loading = threading.Lock()


def loaded_models(name: str) -> LoadedModels:
    """The models this process has loaded, with `name` loaded too when attnlab knows it (once per process)."""
    with _loading:
        if name in BUILDERS and name not in _models and name not in _models.unavailable:
            found = load_available([name])
            _models.update(found)
            _models.unavailable.update(found.unavailable)
    return _models


def models_for(name: str | None) -> LoadedModels:
    """The loaded models, with `name` among them (None: a request that names none, which the server refuses); an
    unknown name is the 422 the server gives, naming every model attnlab has rather than those loaded so far."""
    if name is not None and name not in BUILDERS:
        known = ", ".join(sorted(BUILDERS))
        raise server_errors.ApiError(422, "unknown_model", f"unknown model {name!r}; attnlab has {known}", "model")
    return loaded_models(name or "")


@cache
def runtime(device: str, dtype: str) -> Runtime:
    """One runtime per device and dtype in this process (server/inprocess.py's: no threads, no runs kept)."""
    return inprocess.local_runtime(device, dtype)


def run(
    model: str | None = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """Run `model` on `text` (or tokens=, x= with weights=, texts=, source=) in this process, as /api/attention.

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
    return _plain(compute(model, text, masks, layer, device=device, dtype=dtype, **fields))


def compute(
    model: str | None = None,
    text: str | None = None,
    masks: dict[str, Any] | None = None,
    layer: int | None = None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The /api/attention body as server/inprocess.py run_attention returns it, validated and refused as the API does
    (what `run` returns and `attnlab.show` embeds)."""
    settings = Settings()
    body = jsonable({**fields, "model": model, "text": text, "masks": masks, "layer": layer})
    body = {k: v for k, v in body.items() if v is not None or k in fields}
    with api_errors():
        req = inprocess.attention_request(body)
        models = models_for(model_for(req.model, req.x is not None))
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
