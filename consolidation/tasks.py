"""Thin, idempotent consolidation tasks; the work is in consolidation.services.

`consolidate_agent` steps the agent's run for up to CONSOLIDATION_TASK_BUDGET_SECONDS
and, if the run is not done, queues itself again (a long backlog is many short
tasks, not one that outlives its time limit). Each step commits its cursor with
its writes, so a re-delivered task (acks_late; a worker killed mid-run) resumes
the running run where it stands and writes nothing twice. `consolidate_due`
(celery-beat) queues it for every agent with episodes not yet consolidated, and
for runs whose worker died.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError

logger = logging.getLogger(__name__)

MAX_RETRIES = 3


@shared_task(
    bind=True,
    name="consolidation.consolidate_agent",
    acks_late=True,
    max_retries=MAX_RETRIES,
    soft_time_limit=240,
    time_limit=300,
)
def consolidate_agent(
    self, agent_id: str, kind: str = "facts", batch_size: int | None = None
) -> dict:
    """Consolidate one agent's new episodes (start or resume its run)."""
    from piper.tenancy.models import Agent

    from .models import RunStatus
    from .services import consolidate

    agent = Agent.objects.filter(pk=agent_id, is_active=True).first()
    if agent is None:
        logger.warning("consolidate_agent: no active agent %s; nothing to do", agent_id)
        return {"run": None}
    try:
        run = consolidate(
            agent=agent,
            kind=kind,
            batch_size=batch_size,
            time_budget=settings.CONSOLIDATION_TASK_BUDGET_SECONDS,
        )
    except DatabaseError as exc:
        # The run is marked failed with what its steps committed; the retry starts anew there.
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc
    if run is None:
        return {"run": None}
    if run.status == RunStatus.RUNNING:
        consolidate_agent.delay(agent_id, kind, batch_size)
    return {"run": str(run.pk), "status": run.status, "cursor_seq": run.cursor_seq}


@shared_task(
    name="consolidation.consolidate_due", ignore_result=True, soft_time_limit=50, time_limit=60
)
def consolidate_due() -> int:
    """Queue consolidate_agent for each agent and kind with work (celery-beat). Returns
    how many it queued."""
    from .models import RunKind
    from .selectors import agents_due

    queued = 0
    for kind in RunKind.values:
        agents = agents_due(kind=kind, stale_seconds=settings.CONSOLIDATION_STALE_SECONDS)
        for agent_id in agents:
            consolidate_agent.delay(str(agent_id), kind)
        queued += len(agents)
    return queued
