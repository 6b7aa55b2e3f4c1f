"""Periodic upkeep of the shared API machinery. Thin: each task calls a service."""

import logging

from celery import shared_task

from .services import idempotency_records_purge

logger = logging.getLogger(__name__)


@shared_task(name="api.purge_idempotency_records", soft_time_limit=540, time_limit=600)
def purge_idempotency_records() -> int:
    """Delete expired Idempotency-Key answers. Safe to run twice or concurrently."""
    deleted = idempotency_records_purge()
    if deleted:
        logger.info("purged %d expired idempotency records", deleted)
    return deleted
