"""Threads, their working-state checkpoints, handovers and resume packages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel
from .intentions import Intention


class WorkingState(ApiModel):
    thread_id: str
    version: int
    based_on: int | None
    state: dict[str, Any]
    size_bytes: int
    session_id: str
    source_event_id: str | None
    created_at: datetime | None


class PendingItem(ApiModel):
    id: int
    kind: str
    intention_id: str
    description: str
    priority: int
    status: str
    occurrence: int
    added_at: datetime


class Thread(ApiModel):
    id: str
    key: str
    status: str
    session_id: str
    current_version: int
    created_at: datetime
    updated_at: datetime


class Handover(ApiModel):
    id: str
    thread_id: str
    from_session: str
    to_session: str
    frozen_version: int
    status: str
    note: str
    succession_event_id: str
    created_at: datetime
    resumed_at: datetime | None
    acknowledged_at: datetime | None


class ThreadDetail(Thread):
    """A thread with its latest checkpoint, what is pending on it and its open handover."""

    checkpoint: WorkingState | None = None
    pending: list[PendingItem]
    handover: Handover | None = None


class RecheckItem(ApiModel):
    kind: str
    checked_at: datetime
    freshness_seconds: int
    age_seconds: int


class Resume(ApiModel):
    checkpoint: WorkingState | None = None
    intentions: list[Intention]
    recheck: list[RecheckItem]
    failed_branches: list[dict[str, Any]]
    pending: list[PendingItem]
    thread: Thread | None = None
    handover: Handover | None = None
    now: datetime


class PendingClear(ApiModel):
    cleared: int
    pending: list[PendingItem]
