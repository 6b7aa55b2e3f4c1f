"""An agent's 'now': the wall clock, or its simulated clock (battery agents)."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from .models import Agent, AgentClock


def now_for(agent_id: uuid.UUID) -> datetime:
    clock = AgentClock.objects.filter(agent_id=agent_id).values_list("now", flat=True).first()
    return clock or timezone.now()


def simulated_agent_ids():
    """Agents on a simulated clock: the wall-clock scans leave them alone."""
    return AgentClock.objects.values("agent_id")


def scan_scope(agent: Agent | None) -> Q:
    """Which rows (with an `agent`) a scan looks at: one agent's, at its own
    clock; or every wall-clock agent's."""
    if agent is not None:
        return Q(agent=agent)
    return ~Q(agent_id__in=simulated_agent_ids())
