"""Memories for recall tests, made through each app's services (never Model.objects.create)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from facts.fact_texts import fact_texts_refresh
from facts.tests.factories import at, by, claim
from intentions.models import IntentionStatus, TriggerType
from intentions.tests.factories import in_status
from ledger.models import Event
from piper.provenance import Authority
from recall.models import RecallFeedback, RetrievalTrace

US, TP = Authority.USER_STATEMENT, Authority.THIRD_PARTY


def deployment_window(agent, *, embed: str = "now") -> None:
    """Alice's deployment window was Monday 10:00 (2024) and is Tuesday 14:00 (2025 on)."""
    claim(agent, "Alice", "deployment_window", "Monday 10:00", at(2024), authority=US)
    claim(agent, "Alice", "deployment_window", "Tuesday 14:00", at(2025), authority=US)
    claim(agent, "Alice", "city", "Berlin", at(2024), authority=US)
    fact_texts_refresh(agent_id=agent.pk, embed=embed)


def services(agent) -> None:
    """The Sparrow service is owned by Search and runs in eu-west-3; the Avocet
    service is healthy. Nothing about a Starling service or an Avocet portal."""
    claim(agent, "Sparrow service", "owning_team", "Search", at(2024), authority=US)
    claim(agent, "Sparrow service", "primary_region", "eu-west-3", at(2024), authority=US)
    claim(agent, "Avocet service", "health_status", "healthy", at(2024), authority=US)
    fact_texts_refresh(agent_id=agent.pk, embed="now")


def org_chart(agent) -> None:
    """Alice works at Acme, Acme is based in Berlin; Bob works at Initech."""
    claim(agent, "Alice", "works_at", object_entity="Acme", valid_from=at(2024), authority=US)
    claim(agent, "Acme", "based_in", object_entity="Berlin", valid_from=at(2024), authority=TP)
    claim(agent, "Bob", "works_at", object_entity="Initech", valid_from=at(2024), authority=US)


def commitments(agent) -> dict:
    """One of each: due, active (time, due in a week), blocked, cancelled, completed."""
    return {
        "due": in_status(agent, IntentionStatus.DUE, description="Send Bob the invoice summary"),
        "active": in_status(
            agent,
            IntentionStatus.ACTIVE,
            description="Renew the TLS certificate of the billing site",
            trigger_type=TriggerType.TIME,
            due_at=timezone.now() + timedelta(days=7),
        ),
        "cancelled": in_status(agent, IntentionStatus.CANCELLED, description="Call the bank"),
        "completed": in_status(
            agent, IntentionStatus.COMPLETED, description="File the expense report"
        ),
    }


def written(agent=None) -> dict:
    """What recall and feedback could write: traces, feedback, the ledger."""
    events = Event.objects.all() if agent is None else Event.objects.filter(agent=agent)
    return {
        "traces": RetrievalTrace.objects.count(),
        "feedback": RecallFeedback.objects.count(),
        "events": events.count(),
    }


def T(year: int, month: int = 1, day: int = 1) -> datetime:
    return datetime(year, month, day, tzinfo=UTC)


__all__ = [
    "at",
    "by",
    "claim",
    "commitments",
    "deployment_window",
    "org_chart",
    "services",
    "written",
]
