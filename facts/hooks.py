"""The facts app's ledger listener: the fact texts follow each commit of fact events."""

from __future__ import annotations

from ledger.hooks import Committed

from .fact_texts import TEXT_EVENTS
from .tasks import index_fact_texts


def events_committed(committed: Committed) -> None:
    """Queue a re-render when the commit held events that can change a text."""
    if not committed.event_types.isdisjoint(TEXT_EVENTS):
        index_fact_texts.delay(str(committed.agent_id), committed.first_seq, committed.last_seq)
