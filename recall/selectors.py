"""Reads of retrieval telemetry, scoped to one agent (another agent's trace is NotFound)."""

from __future__ import annotations

import uuid
from datetime import date

from django.db.models import Count, QuerySet
from django.db.models.functions import TruncDate

from piper.errors import NotFound
from piper.tenancy.models import Agent

from .models import RecallFeedback, RetrievalTrace


def trace_get(*, agent: Agent, trace_id: uuid.UUID) -> RetrievalTrace:
    """One trace with its feedback (if any) in one query."""
    trace = (
        RetrievalTrace.objects.filter(agent=agent, pk=trace_id).select_related("feedback").first()
    )
    if trace is None:
        raise NotFound(f"recall {trace_id} not found")
    return trace


def trace_list(*, agent: Agent) -> QuerySet[RetrievalTrace]:
    return RetrievalTrace.objects.filter(agent=agent).order_by("-created_at", "-id")


def failure_taxonomy(
    *, feedback: QuerySet[RecallFeedback] | None = None
) -> list[tuple[date, dict[str, int]]]:
    """Feedback counts per day (newest first), per failure code — "" for
    feedback without one (successes, unexplained failures)."""
    feedback = RecallFeedback.objects.all() if feedback is None else feedback
    rows = (
        feedback.annotate(day=TruncDate("created_at"))
        .values("day", "failure_code")
        .annotate(n=Count("id"))
        .order_by("-day", "failure_code")
    )
    days: dict[date, dict[str, int]] = {}
    for row in rows:
        days.setdefault(row["day"], {})[row["failure_code"]] = row["n"]
    return list(days.items())
