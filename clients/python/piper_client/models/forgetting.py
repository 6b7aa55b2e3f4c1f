"""Erasure receipts and retention policies."""

from __future__ import annotations

from typing import Any

from ._base import ApiModel


class ErasurePreview(ApiModel):
    dry_run: bool
    events: int
    event_ids: list[str]
    counts: dict[str, Any]
    removed: dict[str, Any]


class Erasure(ApiModel):
    id: str
    kind: str
    status: str
    selector: Any
    reason: str
    requested_by: str
    legal_hold_lifted: str | None = None
    events: int
    counts: Any = None
    removed: Any = None
    residue_found: int | None = None
    residue: Any = None
    duration_ms: float
    created_at: str


class RetentionPolicy(ApiModel):
    id: str
    name: str
    retention_class: str
    event_type: str | None = None
    source_type: str
    max_age_days: int
    is_active: bool | None = None
    created_at: str
    updated_at: str
