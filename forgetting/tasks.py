"""celery-beat's retention sweep: thin, bounded, and safe to run twice at once."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from .services.retention import retention_sweep

logger = logging.getLogger(__name__)


@shared_task(
    name="forgetting.retention_sweep",
    acks_late=True,
    soft_time_limit=240,
    time_limit=300,
)
def sweep_retention() -> dict:
    """Erase what the retention policies let expire, for up to
    FORGETTING_SWEEP_BUDGET_SECONDS; when expired events are left, queue the
    next run at once. A redelivered or concurrent run finds each agent's lock
    held, or nothing left to erase."""
    result = retention_sweep(
        chunk=settings.FORGETTING_SWEEP_CHUNK,
        budget_seconds=settings.FORGETTING_SWEEP_BUDGET_SECONDS,
    )
    if result.erased or result.kept:
        logger.info(
            "retention sweep: %s events erased in %s receipts, %s kept (a younger event "
            "depends on them)",
            result.erased,
            len(result.receipts),
            result.kept,
        )
    if result.more:
        sweep_retention.delay()
    return {
        "agents": result.agents,
        "erased": result.erased,
        "receipts": [str(r) for r in result.receipts],
        "kept": result.kept,
        "more": result.more,
        "skipped_locked": result.skipped_locked,
    }
