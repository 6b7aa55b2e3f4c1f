"""Intentions: commitments with triggers, their transitions and firings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from ._base import ApiModel


class Transition(ApiModel):
    # "from" is a Python keyword; None on the first transition (the schema omits that).
    from_: str | None = Field(alias="from")
    to: str
    at: datetime
    reason: str
    occurrence: int
    event_id: str | None


class Firing(ApiModel):
    id: str
    occurrence: int
    fired_at: datetime
    cause: str
    cause_event_id: str | None
    event_id: str


class Escalation(ApiModel):
    """Why and when the engine escalated an intention's pending occurrence."""

    id: str
    reason: str  # "failures" or "overdue"
    occurrence: int
    attempts: int
    after_failures: int | None
    overdue_seconds: int | None
    to_session: str
    note: str
    notify: list[str]
    event_id: str


class Intention(ApiModel):
    id: str
    description: str
    priority: int
    status: str
    trigger_type: str
    trigger_spec: dict[str, Any]
    thread: str | None
    not_before: datetime | None
    due_at: datetime | None
    rrule: str
    expires_at: datetime | None
    occurrence: int
    last_fired_at: datetime | None
    last_rehearsed_at: datetime | None
    dependencies: list[str]
    required_context: list[Any]
    completion_criteria: str
    completion_evidence: Any
    retry_policy: dict[str, Any]
    escalation_policy: dict[str, Any]
    escalated_at: datetime | None
    escalation: Escalation | None
    source_session: str
    inherited_by: str
    source_event_id: str
    created_at: datetime
    updated_at: datetime


class IntentionDetail(Intention):
    """An intention with its history: what moved it, and each time it fired."""

    transitions: list[Transition]
    firings: list[Firing]


class Fired(ApiModel):
    intention_id: str
    occurrence: int
    firing_id: str
    cause: str


class Escalated(ApiModel):
    intention_id: str
    occurrence: int
    reason: str
    escalation_id: str


class Tick(ApiModel):
    now: datetime
    fired: list[Fired]
    rehearsed: int
    escalated: list[Escalated]


class Webhook(ApiModel):
    url: str
    is_active: bool
    created_at: datetime
