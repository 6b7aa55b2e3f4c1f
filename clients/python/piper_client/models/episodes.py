"""Episodes: what happened, and their hybrid search."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class Episode(ApiModel):
    id: str
    occurred_at: datetime
    session_id: str
    actor: str
    environment: str
    goal_id: str
    task_id: str
    summary: str
    action: str
    observation: str
    outcome: str
    score: float | None
    salience: float
    effective_salience: float
    use_count: int
    last_used_at: datetime | None
    confidence: float
    entities: list[str]
    related_ids: list[str]
    source_id: str | None
    source_type: str
    authority: str
    raw_event_id: str
    instruction_like: bool
    canonical_id: str | None
    status: str
    status_reason: str
    status_changed_at: datetime | None
    supersedes: str | None
    superseded_by: str | None
    created_at: datetime
    embedded: bool
    embedding_model: str
    embedded_at: datetime | None
    embedding: list[float] | None = None


class EpisodeBatch(ApiModel):
    count: int
    episodes: list[Episode]


class EpisodeHit(ApiModel):
    kind: str
    score: float
    signals: dict[str, Any]
    episode: Episode | None = None


class SessionGroup(ApiModel):
    session_id: str
    first_occurred_at: datetime
    last_occurred_at: datetime
    best_score: float
    episode_ids: list[str]


class EpisodeSearch(ApiModel):
    abstained: bool
    evidence_score: float | None
    threshold: float
    threshold_source: str
    metric: str
    embedding_model: str
    vector_strategy: str
    hits: list[EpisodeHit]
    near_misses: list[EpisodeHit]
    groups: list[SessionGroup]
