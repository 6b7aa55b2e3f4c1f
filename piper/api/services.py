"""Writes for the shared API machinery (idempotency records)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db.models import UUIDField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from .models import IdempotencyRecord


def idempotency_records_purge(
    *,
    older_than: timedelta | None = None,
    now: datetime | None = None,
    chunk_size: int = 1000,
) -> int:
    """Delete stored Idempotency-Key answers older than ``older_than``
    (default ``settings.PIPER_IDEMPOTENCY_TTL_HOURS``) and return how many went.

    Deletes in chunks of ``chunk_size`` rows, each its own short statement, so a
    large backlog never holds long locks. Idempotent: a second run deletes only
    what has aged past the cutoff since. Records of erased writes are kept: they
    hold no answer, and a retry of the erased write must still be refused.
    """
    if older_than is None:
        older_than = timedelta(hours=settings.PIPER_IDEMPOTENCY_TTL_HOURS)
    cutoff = (now or timezone.now()) - older_than
    deleted = 0
    while True:
        ids = list(
            IdempotencyRecord.objects.filter(created_at__lt=cutoff, erased_at__isnull=True)
            .order_by("created_at")
            .values_list("pk", flat=True)[:chunk_size]
        )
        if not ids:
            return deleted
        count, _ = IdempotencyRecord.objects.filter(pk__in=ids, created_at__lt=cutoff).delete()
        deleted += count
        if len(ids) < chunk_size:
            return deleted


def idempotency_records_erase(
    *, agent_id: uuid.UUID, event_ids: Sequence[uuid.UUID] | RawSQL
) -> int:
    """Drop the stored answers of the agent's writes that appended any of
    `event_ids` (ids, or a subquery of them), and mark them erased (a retry
    then gets 410, never a replay or a new write). Returns how many records it
    marked; a second call marks none."""
    if isinstance(event_ids, RawSQL):
        erased = RawSQL(
            f"ARRAY({event_ids.sql})", event_ids.params, output_field=ArrayField(UUIDField())
        )
    elif event_ids:
        erased = list(event_ids)
    else:
        return 0
    return IdempotencyRecord.objects.filter(
        agent_id=agent_id, event_ids__overlap=erased, erased_at__isnull=True
    ).update(response_body=None, erased_at=timezone.now())
