"""`attnlab serve --host H --port P [--model NAME=DIR ...]`: start uvicorn on create_app(Settings())."""

from __future__ import annotations

import argparse
import ctypes
import logging
import sys
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from pydantic import ValidationError

from server.config import Settings
from server.hosts import start_line
from server.observability import json_logging
from server.transport import connection_options

if TYPE_CHECKING:
    from fastapi import FastAPI

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def give_back_freed_memory() -> None:
    """glibc keeps a freed block below its mmap threshold in its heaps for reuse, and raises that threshold (up to
    32 MiB) each time it frees a larger block: a server that makes tensors of every size grows by what it has freed
    and cannot reuse (the soak in bench/README.md: 5.8 GB after 20 minutes, where its caches hold 2.5 GiB). A fixed
    threshold of 128 KiB maps every larger block on its own and gives it back when it is freed."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc: its allocator's own ways stand
        return
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="attnlab", description="attnlab: an attention visualiser")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the web server")
    serve.add_argument("--host", help="address to bind (default 127.0.0.1, or ATTNLAB_HOST)")
    serve.add_argument("--port", type=int, help="port to bind (default 8000, or ATTNLAB_PORT)")
    serve.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to compute (ATTNLAB_DEVICE)")
    serve.add_argument(
        "--models", help="comma-separated models to load: names, 'all', NAME=DIR checkpoints (ATTNLAB_MODELS)"
    )
    serve.add_argument(
        "--model",
        action="append",
        metavar="NAME=DIR",
        help="also serve the checkpoint directory DIR as NAME (repeatable); added to --models or ATTNLAB_MODELS",
    )
    args = parser.parse_args(argv)

    added = args.model or []
    overrides = {k: v for k, v in vars(args).items() if k not in ("command", "model") and v is not None}
    try:
        if added:  # to the models given, or to those ATTNLAB_MODELS (or its default) names
            base = overrides.get("models") or Settings(**overrides).models
            overrides["models"] = ",".join([base, *added])
        settings = Settings(**overrides)
    except ValidationError as err:
        # one line per bad setting, named as the person set it, instead of a traceback
        for e in err.errors():
            name = str(e["loc"][0]) if e["loc"] else "settings"
            where = f"--{name.replace('_', '-')}" if name in overrides else f"ATTNLAB_{name.upper()}"
            if name == "models" and added:
                where = "--models/--model" if args.models is not None else "ATTNLAB_MODELS/--model"
            sys.stderr.write(f"attnlab: {where}: {e['msg']} (got {e.get('input')!r})\n")
        raise SystemExit(2) from None
    from server.app import create_app  # every analysis, the engine and torch: only once the arguments are good

    json_logging(logging.INFO)
    give_back_freed_memory()
    # attnlab logs one JSON line per request itself (with its request id), so uvicorn's access log is off
    try:
        app = create_app(settings)
    except ValueError as err:  # a declared limit set wrong (ATTNLAB_MAX_...): the message names its variable
        sys.stderr.write(f"attnlab: {err}\n")
        raise SystemExit(2) from None
    # one line: where it listens, the names it answers (its own addresses too when bound for a class), the setting
    logging.getLogger("attnlab").info(start_line(app.state.allowed_hosts, settings.host, settings.port))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        **connection_options(settings, app.state.load),
    )
    Serving(config, app).run()


class Serving(uvicorn.Server):
    """uvicorn's server, whose first stop signal also stops the training runs: uvicorn waits for every open
    connection to close before the app's shutdown, and a client following a run's events (GET
    /api/train/{id}/events) holds its connection until the run ends. Each run stops at its next step, is marked
    interrupted with its snapshots kept, and its followers' streams end with that."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        trainer = getattr(self.app.state, "trainer", None)  # none before the lifespan has started
        if not self.should_exit and trainer is not None:
            trainer.stop_all()
        super().handle_exit(sig, frame)


if __name__ == "__main__":
    main()
