"""Forgetting: erasure with receipts, and retention policies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, delete, get, operation, paginated, patch, post


class Erasures(Resource):
    @operation
    def request(
        self, *, reason: str, dry_run: bool = True, **selector: Any
    ) -> m.ErasurePreview | m.Erasure:
        """Erase by event_ids, source_id, actor, subject, session_id or a time window
        (occurred_after/before), admin scope. A dry run (the default) answers an
        ErasurePreview of what would go and removes nothing; dry_run=False erases and
        answers the receipt (Erasure)."""
        model = m.ErasurePreview if dry_run else m.Erasure
        return post("/erasure", model, body(reason=reason, dry_run=dry_run, **selector))

    @operation
    def get(self, erasure_id: str) -> m.Erasure:
        return get(f"/erasure/{erasure_id}", m.Erasure)

    @paginated
    def list(self, *, limit: int | None = None) -> Iterator[m.Erasure]:
        """Receipts, newest first."""
        return get("/erasure", m.Erasure, limit=limit)


class RetentionPolicies(Resource):
    """How long events are kept, by retention class, event type or source (admin scope)."""

    @operation
    def create(self, name: str, *, max_age_days: int, **fields: Any) -> m.RetentionPolicy:
        """retention_class, event_type, source_type, is_active, confirm."""
        policy = body(name=name, max_age_days=max_age_days, **fields)
        return post("/retention-policies", m.RetentionPolicy, policy)

    @operation
    def get(self, policy_id: str) -> m.RetentionPolicy:
        return get(f"/retention-policies/{policy_id}", m.RetentionPolicy)

    @paginated
    def list(self) -> Iterator[m.RetentionPolicy]:
        return get("/retention-policies", m.RetentionPolicy)

    @operation
    def update(self, policy_id: str, **changes: Any) -> m.RetentionPolicy:
        return patch(f"/retention-policies/{policy_id}", m.RetentionPolicy, changes)

    @operation
    def delete(self, policy_id: str) -> None:
        return delete(f"/retention-policies/{policy_id}")
