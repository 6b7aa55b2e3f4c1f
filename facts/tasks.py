"""Thin, idempotent tasks: keeping the fact texts (facts/fact_texts.py) in step with the facts."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task
from django.db import OperationalError

logger = logging.getLogger(__name__)

# A lock wait longer than this gives way (and the task retries) before
# PostgreSQL's deadlock check (deadlock_timeout, 1 s) could pick the other side.
LOCK_TIMEOUT_MS = 500
MAX_RETRIES = 5
# facts.fact_texts.BACKLOG_TIME_BUDGET_SECONDS (not imported here: fact_texts imports the models)
BACKLOG_BUDGET_SECONDS = 50


def _gave_way(exc: OperationalError) -> bool:
    """lock_not_available (our lock_timeout), deadlock_detected (we were the victim)
    or out_of_memory (the shared lock table was full for a moment): worth a retry."""
    return getattr(exc.__cause__, "sqlstate", None) in ("55P03", "40P01", "53200")


@shared_task(
    bind=True,
    name="facts.index_fact_texts",
    ignore_result=True,
    max_retries=MAX_RETRIES,
    soft_time_limit=120,
    time_limit=150,
)
def index_fact_texts(self, agent_id: str, first_seq: int, last_seq: int) -> None:
    """Re-render the texts of the pairs the agent's events first_seq..last_seq
    touched (queued by the ledger hook after the commit that appended them).
    A re-run renders the same texts and writes nothing; a refresh that had to
    wait too long for a lock is retried with backoff."""
    from piper.tenancy.models import Agent

    from . import fact_texts

    if not Agent.objects.filter(pk=agent_id).exists():
        logger.info("index_fact_texts: agent %s is gone", agent_id)
        return
    agent_uuid = uuid.UUID(agent_id)
    pairs = fact_texts.pairs_touched(agent_uuid, first_seq, last_seq)
    if not pairs:
        return
    try:
        fact_texts.fact_texts_refresh(
            agent_id=agent_uuid, pairs=pairs, lock_timeout_ms=LOCK_TIMEOUT_MS
        )
    except OperationalError as exc:
        if not _gave_way(exc):
            raise
        raise self.retry(exc=exc, countdown=2**self.request.retries) from exc


@shared_task(name="facts.embed_fact_texts", ignore_result=True, soft_time_limit=240, time_limit=300)
def embed_fact_texts(text_ids: list[str]) -> None:
    """Embed the texts that still lack a vector (compare-and-set on the text:
    a vector is stored only for the text it was computed from). Each statement
    runs on its own (autocommit), so it never holds one table while waiting
    for another."""
    from . import fact_texts

    fact_texts.fact_texts_embed(ids=[uuid.UUID(i) for i in text_ids])


@shared_task(
    name="facts.fact_texts_backlog",
    ignore_result=True,
    soft_time_limit=BACKLOG_BUDGET_SECONDS + 60,
    time_limit=BACKLOG_BUDGET_SECONDS + 90,
)
def fact_texts_backlog(
    agent_id: str | None = None,
    grace_seconds: float | None = None,
    time_budget_seconds: float | None = None,
) -> dict[str, int]:
    """celery-beat: render again the fact texts a lost index task left missing
    or stale, and embed those a lost embed task left without a vector
    (facts.fact_texts.fact_texts_backlog)."""
    from . import fact_texts

    return fact_texts.fact_texts_backlog(
        agent_id=uuid.UUID(agent_id) if agent_id else None,
        grace_seconds=fact_texts.BACKLOG_GRACE_SECONDS if grace_seconds is None else grace_seconds,
        time_budget_seconds=fact_texts.BACKLOG_TIME_BUDGET_SECONDS
        if time_budget_seconds is None
        else time_budget_seconds,
    )
