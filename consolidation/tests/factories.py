"""Helpers for consolidation tests: episodes that state facts, and what a run left."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from consolidation.models import CandidateEvidence, CandidateFact, ConsolidationRun
from episodes.tests.factories import T0, EpisodeFactory
from ledger.models import Event


def said(agent, text: str, *, minutes: int = 0, **fields: Any):
    """An episode whose summary is `text` (an observation by default)."""
    fields.setdefault("occurred_at", T0 + timedelta(minutes=minutes))
    return EpisodeFactory(agent=agent, summary=text, **fields)


def candidates(agent) -> list[tuple]:
    """(subject, predicate, value, status, sources, evidence count), oldest first."""
    return [
        (c.subject, c.predicate, c.value, c.status, c.sources, c.evidence.count())
        for c in CandidateFact.objects.filter(agent=agent).order_by("created_at", "subject", "id")
    ]


def event_types(agent, prefix: str = "consolidation.") -> list[str]:
    return list(
        Event.objects.filter(agent=agent, event_type__startswith=prefix)
        .order_by("seq")
        .values_list("event_type", flat=True)
    )


def state(agent) -> tuple:
    """Everything consolidation wrote for an agent, to compare before and after."""
    return (
        list(ConsolidationRun.objects.filter(agent=agent).order_by("id").values()),
        list(CandidateFact.objects.filter(agent=agent).order_by("id").values()),
        list(CandidateEvidence.objects.filter(agent=agent).order_by("id").values()),
        Event.objects.filter(agent=agent).count(),
    )
