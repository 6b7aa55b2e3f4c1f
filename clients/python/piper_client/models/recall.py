"""Recall: one question routed to the right memory, its evidence and its trace."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel
from .facts import Fact
from .intentions import Intention
from .skills import MatchedSkill


class RecallRoute(ApiModel):
    chosen: str
    explicit: bool
    method: str
    rule: str | None
    matched: list[str]
    scores: dict[str, Any]
    nearest: str | None
    fallback: str | None
    overridden: str | None = None


class EvidenceStatus(ApiModel):
    source: dict[str, Any]
    age_seconds: int | None
    authority: str | None
    currentness: str
    confidence: float | None


class EpisodeBrief(ApiModel):
    id: str
    occurred_at: datetime
    session_id: str
    actor: str
    environment: str
    goal_id: str
    task_id: str
    action: str
    observation: str
    outcome: str
    summary: str
    entities: list[str]


class ChunkBrief(ApiModel):
    id: str
    source_id: str
    ordinal: int
    char_start: int
    char_end: int


class PathBrief(ApiModel):
    entities: list[dict[str, Any]]
    facts: list[Fact]


class Evidence(ApiModel):
    kind: str
    id: str
    text: str
    score: float
    signals: dict[str, Any]
    memory_status: EvidenceStatus | None = None
    fact: Fact | None = None
    episode: EpisodeBrief | None = None
    chunk: ChunkBrief | None = None
    skill: MatchedSkill | None = None
    intention: Intention | None = None
    path: PathBrief | None = None


class EvidenceGroup(ApiModel):
    session_id: str
    evidence: list[str]
    first_at: datetime
    last_at: datetime
    best_score: float


class RecallAnswer(ApiModel):
    id: str
    route: RecallRoute | None = None
    abstained: bool
    evidence: list[Evidence]
    near_misses: list[Evidence]
    groups: list[EvidenceGroup]
    details: dict[str, Any]
    latency_ms: float


class Feedback(ApiModel):
    id: str
    trace: str
    used: list[str]
    outcome: str
    failure_code: str | None
    note: str
    source_event_id: str
    created_at: datetime


class RecallTrace(ApiModel):
    id: str
    query: str
    route: RecallRoute | None = None
    filters: dict[str, Any]
    candidates: list[dict[str, Any]]
    returned: list[dict[str, Any]]
    abstained: bool
    latency_ms: float
    embedding_model: str
    created_at: datetime
    feedback: Feedback | None = None
