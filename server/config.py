"""Settings, read from ATTNLAB_* environment variables. Build one per app; no module-level instance."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNLAB_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when torch sees a GPU
    dtype: Literal["float32", "float64", "bfloat16", "float16"] = "float32"
    models: str = "all"  # comma-separated model names to load at start-up, or "all"
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
    # q.k products of one /api/scale-sweep (samples x keys x the sum of its widths): the chapter's Figure 21.5 and the
    # default widths (32.7M) pass
    max_sweep_values: int = Field(64_000_000, ge=1)
    # FLOPs of the one layer /api/cost measures with `measure: true` (three runs of it): minilm's shape at 512 tokens
    # is ~1.0 GFLOP
    max_measure_flops: int = Field(20_000_000_000, ge=1)
    max_concurrent: int = Field(2, ge=1)  # computations at once; later ones wait
    queue_timeout_s: float = Field(30.0, gt=0)  # how long a request waits for a free slot before a 503
    cache_bytes: int = Field(512 * 1024 * 1024, ge=0)  # recent forward passes kept for the requests that repeat them
    read_timeout_s: float = Field(10.0, gt=0)  # time for a request head, and for its body, to arrive
    # connections and requests in flight: past it a JSON 503 (server.app.Capacity); uvicorn's own plain 503 only
    # past server.transport.backstop, a margin above
    max_connections: int = Field(512, ge=1)
    # every JSON answer of an analysis checked against its declared answer type (server/declare.py), a 500 naming
    # the bad field when it does not fit: on in the test suite, off in service (it costs a second parse)
    check_answers: bool = False

    def host_names(self) -> list[str]:
        return [h.strip() for h in self.allowed_hosts.split(",") if h.strip()]

    def model_names(self, known: list[str]) -> list[str]:
        if self.models.strip() == "all":
            return list(known)
        return [m.strip() for m in self.models.split(",") if m.strip()]
