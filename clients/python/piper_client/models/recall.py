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
    stale: bool = False
    source_event_id: str
    created_at: datetime


class LookDecision(ApiModel):
    """Whether the agent looked in memory before acting on a task, and whether it needed to."""

    id: str
    task: str
    looked: bool
    needed: bool | None
    trace: str | None
    session_id: str
    note: str
    created_at: datetime


class CarryOverRates(ApiModel):
    open_item_survival_rate: float | None
    open_item_execution_rate: float | None
    skill_success_rate: float | None
    skill_reuse_rate: float | None
    skill_follow_rate: float | None
    retrieval_without_use_rate: float | None
    feedback_coverage: float | None
    stale_answer_rate: float | None
    look_rate: float | None
    missed_look_rate: float | None


class CarryOver(ApiModel):
    """The agent's live carry-over (suite H) over a window; a rate with nothing to count is None."""

    window_start: datetime
    window_end: datetime
    grace_seconds: int
    successions: int
    open_items: int
    surfaced: int
    in_flight: int
    items_judged: int
    executed: int
    cancelled: int
    executing: int
    not_yet_due: int
    skill_runs: int
    skill_runs_succeeded: int
    skills_run: int
    skills_reused: int
    skill_matches: int
    skill_matches_followed: int
    reads: int
    reads_with_feedback: int
    reads_unused: int
    feedback: int
    stale_answers: int
    decisions: int
    looked: int
    needed: int
    missed_looks: int
    rates: CarryOverRates


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
