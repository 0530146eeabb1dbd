"""Settings, read from ATTNLAB_* environment variables. Build one per app; no module-level instance."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from engine.vision.images import ImageLimits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNLAB_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when torch sees a GPU
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    # the models to load at start-up, comma-separated: built-in names, "all" (every built-in one), and NAME=DIR for
    # a checkpoint directory served as NAME (engine/models/checkpoint.py); one that cannot load is listed as
    # unavailable, with why, and the server starts without it
    models: str = "all"
    # checkpoints: measure each against transformers' own forward pass at load (GET /api/models `reference`), when
    # transformers is installed; off skips the second load that costs (about as long as attnlab's own)
    reference: bool = True
    # the most parameters a checkpoint may have, read from its config.json before any weight is allocated: 2e9 is
    # 8 GB in float32, twice that while the reference check holds transformers' copy too (this 24 GiB machine)
    checkpoint_parameters: int = Field(2_000_000_000, ge=1)
    # Host headers the server answers (against DNS rebinding): comma-separated names, "*." prefixes, or "*" for any.
    # The loopback names by default, since `make run` serves a person's own machine; set the names a deployment uses.
    allowed_hosts: str = "localhost,127.0.0.1,::1,[::1]"

    # Limits on what one request may ask for. Each is named in the 4xx that enforces it.
    max_tokens: int = Field(512, ge=1)  # positions per sequence (MiniLM's 512 learned positions)
    max_batch: int = Field(16, ge=1)  # texts in one batch
    max_width: int = Field(1024, ge=1)  # d_model of x, custom weights and the random model
    max_heads: int = Field(64, ge=1)  # heads of custom weights and the random model
    max_text_chars: int = Field(20_000, ge=1)  # characters of `text`, and of any one token
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)  # request body size
    # numbers in one response's matrices: 512 tokens x 72 heads (MiniLM) of scores and weights pass
    max_result_values: int = Field(40_000_000, ge=1)
    # bytes of one answer in the form asked (JSON ~12 a number; the arrays form and .npz 2 or 4 by precision): the
    # page's own request (minilm, 512 tokens, every layer, arrays form at float16: ~80 MB) passes, its JSON (~460 MB)
    # does not
    max_result_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    # bytes a request's forward passes hold while they run (server/plan.py WorkShape), estimated before they start: a
    # batch of 16 minilm texts of 512 tokens (~3.5 GB in float32) passes, the same in float64 (~10.6 GB with its
    # float32 comparison) does not
    max_work_bytes: int = Field(4 * 1024**3, ge=1024 * 1024)
    # the limits an analysis declares for itself (server/declare.py Limit, e.g. ATTNLAB_MAX_SWEEP_VALUES), by name:
    # each given by name to Settings(...), else read from its ATTNLAB_ variable, else its declared default, when an
    # app is made (server.analyses.declared_settings)
    declared: dict[str, Any] = Field(default_factory=dict)
    max_concurrent: int = Field(2, ge=1)  # computations at once; later ones wait
    queue_timeout_s: float = Field(30.0, gt=0)  # how long a request waits for a free slot before a 503
    # how long GET /api/progress/{run}?wait_ms may wait for a run that has not arrived yet before its 404: the ask
    # and the run travel on different connections, and the ask can arrive first
    max_progress_wait_ms: int = Field(10_000, ge=0, le=60_000)
    cache_bytes: int = Field(512 * 1024 * 1024, ge=0)  # recent forward passes kept for the requests that repeat them
    read_timeout_s: float = Field(10.0, gt=0)  # time for a request head, and for its body, to arrive
    # a request head's bytes and lines (the request line and each header): past either a 431, the rest never read
    max_head_bytes: int = Field(64 * 1024, ge=1024)
    max_head_lines: int = Field(100, ge=8)
    # time a client may read nothing of its answer before its connection is closed and its work stopped
    write_timeout_s: float = Field(30.0, gt=0)
    # an idle connection kept for the client's next request: longer than clients keep one for reuse (httpx 5 s,
    # aiohttp 15 s), so none sends on a connection the server is closing at that moment
    keep_alive_s: int = Field(20, ge=1)
    # connections and requests in flight: past it a JSON 503 (server.app.Capacity); uvicorn's own plain 503 only
    # past server.transport.backstop, a margin above
    max_connections: int = Field(512, ge=1)
    # every JSON answer of an analysis checked against its declared answer type (server/declare.py), a 500 naming
    # the bad field when it does not fit: on in the test suite, off in service (it costs a second parse)
    check_answers: bool = False

    # an image a request sends (PNG or JPEG, engine/vision/images.py): its file's bytes, and the width x height its
    # header declares, each checked before a pixel is decoded (a decompression bomb stops at the second)
    max_image_bytes: int = Field(5 * 1024 * 1024, ge=1024)
    max_image_pixels: int = Field(4096 * 4096, ge=64)

    # the training lab (POST /api/train): where runs are kept, and what one run may ask for, checked before anything
    # is allocated (engine/trainlab/spec.py check_spec)
    data_dir: Path = Field(default_factory=lambda: default_data_dir())
    # the run store's database: a SQLite file in the data directory when empty; postgresql+psycopg://... for the
    # replicas of a deployment to share one (docker-compose.yml)
    database_url: str = ""
    # this server's name in the runs it trains: at start-up it marks its own unfinished runs interrupted, never
    # another replica's (the container's host name under docker compose)
    instance: str = Field(default_factory=socket.gethostname)
    train_max_parameters: int = Field(5_000_000, ge=1)  # a model's parameters, counted from its spec
    train_max_steps: int = Field(20_000, ge=1)  # optimiser steps of one run
    train_max_tokens_per_step: int = Field(16_384, ge=1)  # batch x positions
    train_max_snapshots: int = Field(401, ge=1)  # snapshots one run keeps (steps // snapshot_every + 1)
    # one snapshot's probe weights (layers x heads x positions^2), sent in every snapshot event: 4 MB in float32
    train_max_probe_values: int = Field(1_048_576, ge=1)
    # runs training at once, each holding one compute slot for its whole run: at most ATTNLAB_MAX_CONCURRENT - 1,
    # so a slot stays free for every other request (a server with one slot trains nothing)
    train_max_runs: int = Field(1, ge=0)

    @field_validator("models")
    @classmethod
    def read_models(cls, value: str) -> str:
        """Each entry a name, "all" or NAME=DIR with NAME a plain identifier no built-in model has, each NAME once."""
        model_entries(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def read_declared(cls, data: Any) -> Any:
        """The limits analyses declare, given by name (Settings(max_sweep_values=100)), kept as given under
        `declared`: create_app reads them against their declarations, with their ATTNLAB_ variables and defaults
        (server.analyses.declared_settings), so reading settings imports no analysis."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        given = dict(data.get("declared") or {})
        given.update({name: data.pop(name) for name in list(data) if name not in cls.model_fields})
        data["declared"] = given
        return data

    def database(self) -> str:
        """The run store's database URL: ATTNLAB_DATABASE_URL, else a SQLite file in the data directory."""
        return self.database_url or f"sqlite:///{self.data_dir / 'attnlab.db'}"

    def training_runs(self) -> int:
        """Runs that may train at once: ATTNLAB_TRAIN_MAX_RUNS, below ATTNLAB_MAX_CONCURRENT."""
        return max(0, min(self.train_max_runs, self.max_concurrent - 1))

    def limit(self, name: str) -> int:
        """A limit an analysis declared (server/declare.py Limit), as this server sets it."""
        if name not in self.declared:
            raise KeyError(f"limit {name} is not set: server.analyses.declared_settings sets every declared limit")
        return int(self.declared[name])

    def host_names(self) -> list[str]:
        return [h.strip() for h in self.allowed_hosts.split(",") if h.strip()]

    def model_names(self, known: list[str]) -> list[str]:
        """The built-in models to load: those named, every one in `known` for "all"."""
        return model_entries(self.models).names(known)

    def checkpoint_loading(self) -> dict[str, Any]:
        """How this server loads a checkpoint (engine/models/checkpoint.py load_checkpoint's keywords): its limits,
        and whether to measure it against transformers."""
        from engine.models.checkpoint import CheckpointLimits

        return {"limits": CheckpointLimits(max_parameters=self.checkpoint_parameters), "reference": self.reference}

    def image_limits(self) -> ImageLimits:
        """The largest image this server decodes (engine/vision/images.py decode_image's limits)."""
        from engine.vision.images import ImageLimits

        return ImageLimits(max_bytes=self.max_image_bytes, max_pixels=self.max_image_pixels)

    def checkpoints(self) -> dict[str, Path]:
        """The checkpoint directories to serve, by the name each is served as (NAME=DIR entries), in order given."""
        return dict(model_entries(self.models).checkpoints)


def default_data_dir() -> Path:
    """Where a person's runs are kept when ATTNLAB_DATA_DIR is not set: $XDG_DATA_HOME/attnlab, else
    ~/.local/share/attnlab."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "attnlab"


# a checkpoint's name in requests, the page and URLs: a letter, then letters, digits, "_", "-" or "." (64 at most)
CHECKPOINT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class ModelEntries:
    """ATTNLAB_MODELS read: the built-in names given (or "all"), and NAME=DIR checkpoints in order."""

    every: bool = False
    given: tuple[str, ...] = ()
    checkpoints: tuple[tuple[str, Path], ...] = field(default=())

    def names(self, known: list[str]) -> list[str]:
        if not self.every:
            return list(self.given)
        return list(known) + [n for n in self.given if n not in known]


def model_entries(value: str) -> ModelEntries:
    """ATTNLAB_MODELS ("textbook,all,mine=/path/to/dir") read, or a ValueError that names the entry and says why."""
    every, given, checkpoints = False, [], {}
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if entry == "all":
            every = True
        elif "=" not in entry:
            if entry not in given:
                given.append(entry)
        else:
            from engine.models import FAMILIES  # the engine's registry imports torch: only for a NAME=DIR entry

            name, _, directory = (part.strip() for part in entry.partition("="))
            if not CHECKPOINT_NAME.fullmatch(name):
                raise ValueError(
                    f"{entry!r}: the name before = is {name!r}; give a letter, then letters, digits, _ - or . "
                    "(64 at most), as in mine=/path/to/checkpoint"
                )
            if name in FAMILIES or name == "all":
                raise ValueError(f"{entry!r}: {name} is a built-in model's name; serve the checkpoint as another name")
            if not directory:
                raise ValueError(f"{entry!r}: no directory after =; give NAME=DIR, as in mine=/path/to/checkpoint")
            if name in checkpoints:
                raise ValueError(f"{entry!r}: {name} is given twice; give each checkpoint a name of its own")
            checkpoints[name] = Path(directory).expanduser()
    return ModelEntries(every, tuple(given), tuple(checkpoints.items()))
