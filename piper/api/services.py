"""Writes for the shared API machinery (idempotency records)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
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
    what has aged past the cutoff since.
    """
    if older_than is None:
        older_than = timedelta(hours=settings.PIPER_IDEMPOTENCY_TTL_HOURS)
    cutoff = (now or timezone.now()) - older_than
    deleted = 0
    while True:
        ids = list(
            IdempotencyRecord.objects.filter(created_at__lt=cutoff)
            .order_by("created_at")
            .values_list("pk", flat=True)[:chunk_size]
        )
        if not ids:
            return deleted
        count, _ = IdempotencyRecord.objects.filter(pk__in=ids, created_at__lt=cutoff).delete()
        deleted += count
        if len(ids) < chunk_size:
            return deleted
