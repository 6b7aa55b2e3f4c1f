"""Periodic checks of the ledger. Read-only, so re-running one is harmless."""

from __future__ import annotations

import logging

from celery import shared_task

from piper.tenancy.models import Agent

from .selectors import chain_verify

logger = logging.getLogger(__name__)


@shared_task(name="ledger.verify_chains", soft_time_limit=3000, time_limit=3300)
def verify_chains() -> dict:
    """Walk every active, non-throwaway agent's hash chain.

    Logs an ERROR per broken chain and returns a summary:
    ``{"agents_checked", "events_checked", "broken": [...], "events_by_agent": {name: n}}``.
    """
    agents = Agent.objects.filter(is_active=True, is_throwaway=False).order_by("name")
    summary: dict = {"agents_checked": 0, "events_checked": 0, "broken": [], "events_by_agent": {}}
    for agent in agents.iterator():
        report = chain_verify(agent=agent)
        summary["agents_checked"] += 1
        summary["events_checked"] += report.events_checked
        summary["events_by_agent"][agent.name] = report.events_checked
        if not report.ok:
            brk = report.first_break
            logger.error(
                "ledger chain broken: agent %s (%s), first break at seq %s%s: %s",
                agent.name,
                agent.pk,
                brk.seq,
                f" (event {brk.event_id})" if brk.event_id else "",
                brk.reason,
            )
            summary["broken"].append(
                {
                    "agent": agent.name,
                    "agent_id": str(agent.pk),
                    "seq": brk.seq,
                    "event_id": brk.event_id,
                    "reason": brk.reason,
                }
            )
    return summary
