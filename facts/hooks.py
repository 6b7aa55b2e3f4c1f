"""The facts app's ledger listener: the fact texts follow each commit of fact events."""

from __future__ import annotations

import uuid

from .search import TEXT_EVENTS
from .tasks import index_fact_texts


def events_committed(
    agent_id: uuid.UUID, first_seq: int, last_seq: int, event_types: frozenset[str]
) -> None:
    """Queue a re-render when the commit held events that can change a text."""
    if not event_types.isdisjoint(TEXT_EVENTS):
        index_fact_texts.delay(str(agent_id), first_seq, last_seq)
