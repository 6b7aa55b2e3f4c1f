"""Thin, idempotent tasks: keeping the fact texts (facts/search.py) in step with the facts."""

from __future__ import annotations

import logging
import uuid

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="facts.index_fact_texts", ignore_result=True, soft_time_limit=120, time_limit=150)
def index_fact_texts(agent_id: str, first_seq: int, last_seq: int) -> None:
    """Re-render the texts of the pairs the agent's events first_seq..last_seq
    touched (queued by the ledger hook after the commit that appended them).
    A re-run renders the same texts and writes nothing."""
    from piper.tenancy.models import Agent

    from . import search

    if not Agent.objects.filter(pk=agent_id).exists():
        logger.info("index_fact_texts: agent %s is gone", agent_id)
        return
    agent_uuid = uuid.UUID(agent_id)
    pairs = search.pairs_touched(agent_uuid, first_seq, last_seq)
    if pairs:
        search.fact_texts_refresh(agent_id=agent_uuid, pairs=pairs)


@shared_task(name="facts.embed_fact_texts", ignore_result=True, soft_time_limit=240, time_limit=300)
def embed_fact_texts(text_ids: list[str]) -> None:
    """Embed the texts that still lack a vector (compare-and-set on the text:
    a vector is stored only for the text it was computed from)."""
    from . import search

    search.fact_texts_embed(ids=[uuid.UUID(i) for i in text_ids])
