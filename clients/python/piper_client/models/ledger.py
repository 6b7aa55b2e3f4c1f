"""The agent, the ledger's events, and sources (documents as evidence) with their chunks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class Agent(ApiModel):
    id: str
    name: str
    description: str
    created_at: datetime
    scopes: list[str]


class Event(ApiModel):
    id: str
    seq: int
    event_type: str
    occurred_at: datetime
    recorded_at: datetime
    session_id: str
    actor: str
    source_type: str
    source_ref: str
    authority: str
    confidence: float
    payload: Any
    payload_hash: str
    payload_salt: str
    hash_version: int
    prev_hash: str
    hash: str
    parent_event_id: str | None
    correction_of: str | None
    privacy_class: str
    retention_class: str
    redacted: bool


class EventReceipt(ApiModel):
    id: str
    seq: int
    hash: str


class EventBatch(ApiModel):
    count: int
    recorded_at: datetime
    events: list[EventReceipt]


class Source(ApiModel):
    id: str
    title: str
    uri: str | None = None
    content_hash: str
    media_type: str | None = None
    content: str | None = None
    source_event_id: str
    created_at: datetime


class SourceSummary(ApiModel):
    id: str
    title: str
    uri: str
    content_hash: str
    media_type: str
    source_event_id: str
    created_at: datetime


class SourceIngest(ApiModel):
    source: SourceSummary | None = None
    created: bool
    chunks: int


class Chunk(ApiModel):
    id: str
    source_id: str
    ordinal: int
    text: str
    char_start: int
    char_end: int
    instruction_like: bool
    created_at: datetime
    embedded: bool
    embedding_model: str
    embedded_at: datetime | None
    embedding: list[float] | None = None


class ChunkHit(ApiModel):
    kind: str
    score: float
    signals: dict[str, Any]
    chunk: Chunk | None = None


class SourceGroup(ApiModel):
    source_id: str
    best_score: float
    chunk_ids: list[str]


class ChunkSearch(ApiModel):
    abstained: bool
    evidence_score: float | None
    threshold: float
    threshold_source: str
    metric: str
    embedding_model: str
    vector_strategy: str
    hits: list[ChunkHit]
    near_misses: list[ChunkHit]
    groups: list[SourceGroup]
