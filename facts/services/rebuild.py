"""Replay: the facts projection rebuilt from the ledger alone."""

from __future__ import annotations

from django.db import transaction

from ledger.models import Event
from piper.tenancy.models import Agent

from .. import projection as p


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Drop the facts projection (one agent's, or all) and replay the ledger in
    chain order, then re-render the fact texts. Erased events are skipped, and
    so is an event acting on a version only an erased event made. Returns the
    number of events applied."""
    events = Event.objects.filter(
        event_type__in=list(p.HANDLERS), redacted_at__isnull=True
    ).order_by("agent_id", "seq")
    if agent is not None:
        events = events.filter(agent=agent)
    with transaction.atomic():
        applied = p.rebuild(
            events=events.iterator(chunk_size=2000), agent_id=agent.pk if agent else None
        )
        # The fact texts are kept (same pair ids after a replay) and re-rendered;
        # only a text that changed loses its embedding (queued after commit).
        from ..fact_texts import fact_texts_refresh

        agents = [agent.pk] if agent else Agent.objects.order_by("pk").values_list("pk", flat=True)
        for agent_id in agents:
            fact_texts_refresh(agent_id=agent_id)
        return applied
