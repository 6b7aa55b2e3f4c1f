"""Periodic checks of the ledger. Read-only in the database, so re-running one is
harmless; the anchors file (settings.PIPER_LEDGER_ANCHORS) is rewritten whole."""

from __future__ import annotations

import logging
from pathlib import Path

from celery import shared_task
from django.conf import settings

from piper.tenancy.models import Agent

from .anchors import AnchorsUnreadable, anchors_read, anchors_write, chain_verify_anchored

logger = logging.getLogger(__name__)


@shared_task(name="ledger.verify_chains", soft_time_limit=3000, time_limit=3300)
def verify_chains() -> dict:
    """Walk every active, non-throwaway agent's hash chain, and check it against
    its anchor (ledger/anchors.py) when settings.PIPER_LEDGER_ANCHORS names a file.

    Logs an ERROR per broken chain and returns a summary:
    ``{"agents_checked", "events_checked", "broken": [...], "events_by_agent": {name: n},
    "anchors": {"file", "checked", "moved", "error"}}``. The anchors of the chains
    that verify move to their ends; a broken chain's stays. An unreadable anchors
    file is reported (and logged) and left as it is: the chains are walked without.
    """
    path = Path(settings.PIPER_LEDGER_ANCHORS) if settings.PIPER_LEDGER_ANCHORS else None
    kept: dict[str, dict] = {}
    anchors = {"file": str(path) if path else None, "checked": 0, "moved": 0, "error": None}
    if path is not None:
        try:
            kept = anchors_read(path)
        except AnchorsUnreadable as exc:
            anchors["error"] = str(exc)
            logger.error("ledger anchors not checked: %s", exc)
    agents = Agent.objects.filter(is_active=True, is_throwaway=False).order_by("name")
    summary: dict = {
        "agents_checked": 0,
        "events_checked": 0,
        "broken": [],
        "events_by_agent": {},
        "anchors": anchors,
    }
    for agent in agents.iterator():
        report, anchored, moved = chain_verify_anchored(agent=agent, anchors=kept)
        anchors["checked"] += anchored
        anchors["moved"] += moved and path is not None
        summary["agents_checked"] += 1
        summary["events_checked"] += report.events_checked
        summary["events_by_agent"][agent.name] = report.events_checked
        if report.ok:
            continue
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
    if path is not None and anchors["error"] is None and anchors["moved"]:
        anchors_write(path, kept)
    return summary
