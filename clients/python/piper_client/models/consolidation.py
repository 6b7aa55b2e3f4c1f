"""Consolidation: runs and the candidate facts and skills they propose."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class EpisodeExcerpt(ApiModel):
    summary: str
    action: str
    observation: str
    actor: str
    session_id: str
    source_type: str


class CandidateEvidence(ApiModel):
    episode_id: str
    event_id: str
    field: str
    extractor: str
    rule: str
    confidence: float
    source: str
    occurred_at: datetime
    withdrawn_at: datetime | None = None  # its episode version was retracted or corrected
    withdrawn_by_event_id: str | None = None
    episode: EpisodeExcerpt | None = None


class CandidateFact(ApiModel):
    id: str
    run_id: str
    subject: str
    predicate: str
    value: str
    status: str
    extractor: str
    confidence: float
    sources: int
    valid_from: datetime
    evidence_key: str
    fact_id: str | None
    fact_outcome: str
    reason: str
    decided_by: str
    decided_at: datetime | None
    created_at: datetime
    source_event_id: str
    decision_event_id: str | None
    evidence: list[CandidateEvidence]


class SkillEvidence(ApiModel):
    trace_id: str
    event_id: str
    inputs_key: str
    occurred_at: datetime


class CandidateSkill(ApiModel):
    id: str
    run_id: str
    shape_key: str
    tools: list[str]
    task: str
    status: str
    traces: int
    distinct_inputs: int
    skill_id: str | None
    version_id: str | None
    reason: str
    decided_by: str
    decided_at: datetime | None
    created_at: datetime
    source_event_id: str
    decision_event_id: str | None
    evidence: list[SkillEvidence]


class ConsolidationRun(ApiModel):
    id: str
    kind: str
    status: str
    from_seq: int
    to_seq: int
    cursor_seq: int
    episodes_read: int
    episodes_excluded: int
    statements_found: int
    statements_skipped: int
    candidates_proposed: int
    candidates_asserted: int
    steps: int
    details: Any
    error: str
    started_at: datetime
    heartbeat_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    source_event_id: str
    finish_event_id: str | None


class RunStart(ApiModel):
    run: ConsolidationRun | None = None
    queued: bool
