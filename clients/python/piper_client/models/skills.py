"""Skills: versioned procedures, matches, executions, validations and traces."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class SkillRate(ApiModel):
    executions: int
    successes: int
    success_rate: float | None


class SkillStats(ApiModel):
    executions: int
    successes: int
    failures: int
    verified_successes: int
    success_rate: float | None
    recent: SkillRate | None = None
    transfer: SkillRate | None = None
    last_used_at: datetime | None
    last_validated_at: datetime | None
    last_validation_status: str | None


class SkillVersionSummary(ApiModel):
    id: str
    skill_id: str
    number: int
    status: str
    purpose: str
    supersedes: str | None
    created_at: datetime
    status_changed_at: datetime
    stats: SkillStats | None = None


class Skill(ApiModel):
    id: str
    name: str
    created_at: datetime
    source_event_id: str
    validated_version: str | None
    versions: list[SkillVersionSummary]


class SkillTransition(ApiModel):
    from_status: str
    to_status: str
    reason: str
    actor: str
    event_id: str
    at: datetime


class SkillProvenance(ApiModel):
    events: list[str]
    episodes: list[str]


class SkillVersion(ApiModel):
    id: str
    skill_id: str
    number: int
    status: str
    purpose: str
    supersedes: str | None
    created_at: datetime
    status_changed_at: datetime
    stats: SkillStats | None = None
    skill_name: str
    scope: str
    trigger: dict[str, Any]
    preconditions: list[dict[str, Any]]
    contraindications: list[dict[str, Any]]
    required_tools: list[str]
    required_permissions: list[str]
    parameter_schema: dict[str, Any]
    procedure: str
    entry_point: str
    validator: str
    rollback: str
    examples: list[dict[str, Any]]
    holdout: list[dict[str, Any]]
    provenance: SkillProvenance | None = None
    superseded_by: list[str]
    source_event_id: str
    transitions: list[SkillTransition]


class TriggerMatch(ApiModel):
    matched: bool
    regex_matched: bool
    keywords_found: list[str]
    strength: float


class MatchedSkill(ApiModel):
    version_id: str
    skill_id: str
    skill_name: str
    number: int
    status: str
    purpose: str
    scope: str
    parameter_schema: dict[str, Any]
    required_tools: list[str]
    similarity: float
    score: float
    trigger: TriggerMatch | None = None
    reasons: list[dict[str, Any]]


class SkillMatch(ApiModel):
    applicable: list[MatchedSkill]
    no_applicable_skill: bool
    near_misses: list[MatchedSkill]


class Execution(ApiModel):
    id: str
    version_id: str
    source: str
    status: str
    version_status: str
    params: dict[str, Any]
    novel_params: bool
    task: str
    context: dict[str, Any]
    outcome: str
    succeeded: bool | None
    result: Any
    verdict: dict[str, Any] | None
    validator_passed: bool | None
    externally_verified: bool
    evidence: Any
    error: str
    stdout: str
    stderr: str
    tool_calls: list[dict[str, Any]]
    duration_ms: int | None
    session_id: str
    source_event_id: str
    created_at: datetime
    finished_at: datetime | None


class ValidationCase(ApiModel):
    index: int
    params: dict[str, Any]
    expected: Any
    has_expected: bool
    outcome: str
    passed: bool
    result: Any
    verdict: dict[str, Any] | None
    error: str
    stdout: str
    stderr: str
    duration_ms: int


class Validation(ApiModel):
    id: str
    version_id: str
    kind: str
    status: str
    cases_total: int
    cases_passed: int
    error: str
    created_at: datetime
    finished_at: datetime | None
    cases: list[ValidationCase]


class SkillTrace(ApiModel):
    id: str
    task: str
    inputs: dict[str, Any]
    steps: list[dict[str, Any]]
    output: Any
    succeeded: bool
    verified: bool
    verification: dict[str, Any] | None
    source_type: str
    instruction_like: bool
    session_id: str
    task_id: str
    source_event_id: str
    created_at: datetime
