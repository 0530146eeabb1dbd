"""Schemas of /api/heads and /api/heads/top: head-type scores and top heads for a pair."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from server.schemas.attention import AttentionRequest, Text


class HeadTypesRequest(AttentionRequest):
    """The /api/attention body (text, tokens or x are optional here) plus the induction probe's settings."""

    model: Text | None = Field(None, description="a name from GET /api/models")
    segment_len: int = Field(24, ge=2, description="L: the induction probe is L random tokens, then the same L again")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seeds the probe's random tokens")


class HeadTypeRow(BaseModel):
    layer: int
    head: int
    previous_token: float | None
    duplicate_token: float | None
    induction: float | None
    mean_distance: float | None
    entropy: float | None


class HeadTypesResult(BaseModel):
    model: str
    scored_on: Literal["probe", "input"]
    probe_tokens: list[str] | None
    segment_len: int
    seed: int
    n_layers: int
    n_heads: int
    heads: list[HeadTypeRow]


class TopHeadsRequest(AttentionRequest):
    query: int = Field(ge=0, description="query position (a row)")
    key: int = Field(ge=0, description="key position (a column)")
    k: int = Field(10, ge=1, le=1000, description="how many heads to return")


class TopHead(BaseModel):
    layer: int
    head: int
    weight: float


class TopHeadsResult(BaseModel):
    model: str
    tokens: list[str]
    query: int
    key: int
    masked: bool = Field(False, description="true: the masks exclude this cell, so every head gives it exactly 0")
    reasons: list[str] = Field(
        default_factory=list, description="the masks that exclude the cell (causal, window, padding, blocked)"
    )
    heads: list[TopHead] = Field(description="highest weight first; empty when the pair is masked")
