"""Factories and helpers for intentions tests.

Every row is made through intentions.services (which append ledger events),
never by Model.objects.create: threads, checkpoints and intentions only exist
the way an agent can make them.

Most engine tests run an agent on a simulated clock (AgentClock, as the battery
does) so "the moment it is due" is an exact instant: `sim_agent()` starts it
at T0 and `at(agent, moment)` moves it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import factory

from intentions.models import (
    EventCursor,
    Firing,
    Handover,
    Intention,
    IntentionDependency,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Thread,
    Transition,
    TriggerType,
    WorkingState,
)
from intentions.services import engine, firing
from intentions.services.lifecycle import (
    IntentionInput,
    intention_cancel,
    intention_complete,
    intention_create,
    intention_expire,
    intention_start,
)
from intentions.services.state import thread_get_or_create
from ledger.models import Event
from ledger.tests.helpers import ledger_state
from piper.tenancy.models import AgentClock
from piper.tenancy.tests.factories import AgentFactory

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)  # a Monday, 09:00 UTC
STATUSES = tuple(IntentionStatus.values)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def sim_agent(name: str | None = None, now: datetime = T0):
    """An agent on a simulated clock: the wall-clock scans leave it alone."""
    agent = AgentFactory(**({"name": name} if name else {}))
    engine.clock_set(agent=agent, now=now)
    return agent


def at(agent, moment: datetime) -> datetime:
    """Move the agent's simulated clock."""
    engine.clock_set(agent=agent, now=moment)
    return moment


class ThreadFactory(factory.Factory):
    """`ThreadFactory(agent=…, key=…)` through thread_get_or_create."""

    class Meta:
        model = Thread

    agent = factory.SubFactory(AgentFactory)
    key = factory.Sequence(lambda n: f"thread-{n}")
    session_id = "session-1"

    @classmethod
    def _create(cls, model_class, **fields):
        return thread_get_or_create(**fields)[0]

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("threads only exist once created: use ThreadFactory()")


class IntentionFactory(factory.Factory):
    """`IntentionFactory(agent=…, trigger_type=…, …IntentionInput fields)` through intention_create.

    Defaults to a manual intention (fires only when asked)."""

    class Meta:
        model = Intention

    agent = factory.SubFactory(AgentFactory)
    description = factory.Sequence(lambda n: f"intention {n}")
    trigger_type = TriggerType.MANUAL

    @classmethod
    def _create(cls, model_class, *, agent, **fields):
        return intention_create(agent=agent, data=IntentionInput(**fields))

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("intentions only exist once created: use IntentionFactory()")


def in_status(agent, status: str, *, recurring: bool = False, **fields: Any) -> Intention:
    """A fresh intention brought to `status` through the services only.

    `recurring=True` gives a time intention with an RRULE of one occurrence, so
    "completed" is a recurring intention that has run out of occurrences."""
    if recurring:
        fields = {
            "trigger_type": TriggerType.TIME,
            "due_at": engine.now_for(agent.pk) + timedelta(days=1),
            "rrule": "FREQ=DAILY;COUNT=1",
            **fields,
        }
    if status == IntentionStatus.BLOCKED:
        dependency = IntentionFactory(agent=agent)
        intention = IntentionFactory(agent=agent, dependencies=[dependency.pk], **fields)
        assert intention.status == IntentionStatus.BLOCKED
        return intention
    intention = IntentionFactory(agent=agent, **fields)
    if status == IntentionStatus.ACTIVE:
        pass
    elif status in (IntentionStatus.DUE, IntentionStatus.EXECUTING):
        firing.fire(
            intention_id=intention.pk, cause=TriggerType.MANUAL, at=engine.now_for(agent.pk)
        )
        if status == IntentionStatus.EXECUTING:
            intention_start(agent=agent, intention_id=intention.pk)
    elif status == IntentionStatus.COMPLETED:
        intention_complete(agent=agent, intention_id=intention.pk, evidence={"done": True})
    elif status == IntentionStatus.CANCELLED:
        intention_cancel(agent=agent, intention_id=intention.pk, reason="not needed")
    elif status == IntentionStatus.EXPIRED:
        intention_expire(agent=agent, intention_id=intention.pk)
    intention.refresh_from_db()
    assert intention.status == status, (intention.status, status)
    return intention


# ------------------------------------------------------------------ exact rows


def event_types(agent, since_seq: int = 0) -> list[str]:
    """The agent's ledger after `since_seq`, as event types in chain order."""
    return list(
        Event.objects.filter(agent=agent, seq__gt=since_seq)
        .order_by("seq")
        .values_list("event_type", flat=True)
    )


def head_seq(agent) -> int:
    return (
        Event.objects.filter(agent=agent).order_by("-seq").values_list("seq", flat=True).first()
        or 0
    )


def timeline(intention: Intention) -> list[tuple[str, str, int, str]]:
    """(from, to, occurrence, reason) of every recorded transition, in order."""
    return list(
        Transition.objects.filter(intention=intention)
        .order_by("id")
        .values_list("from_status", "to_status", "occurrence", "reason")
    )


def firings(intention: Intention) -> list[tuple[int, str, datetime]]:
    """(occurrence, cause, fired_at) of every firing, oldest first."""
    return list(
        Firing.objects.filter(intention=intention)
        .order_by("occurrence")
        .values_list("occurrence", "cause", "fired_at")
    )


def fired_events(agent) -> list[tuple[str, int, str]]:
    """(intention_id, occurrence, cause) of every intention.fired ledger event, in order."""
    return [
        (p["intention_id"], p["occurrence"], p["cause"])
        for p in Event.objects.filter(agent=agent, event_type="intention.fired")
        .order_by("seq")
        .values_list("payload", flat=True)
    ]


def status_of(intention: Intention) -> str:
    return Intention.objects.values_list("status", flat=True).get(pk=intention.pk)


def intentions_state() -> dict:
    """Every row an intentions write could touch. Bad-input tests assert it did not change."""
    return {
        **ledger_state(),
        "threads": sorted(
            Thread.objects.values_list("id", "status", "current_version", "session_id")
        ),
        "states": sorted(WorkingState.objects.values_list("id", "version")),
        "handovers": sorted(Handover.objects.values_list("id", "status")),
        "intentions": sorted(
            Intention.objects.values_list(
                "id", "status", "occurrence", "due_at", "inherited_by", "last_rehearsed_at"
            )
        ),
        "dependencies": sorted(
            IntentionDependency.objects.values_list("intention_id", "depends_on_id")
        ),
        "transitions": Transition.objects.count(),
        "firings": sorted(Firing.objects.values_list("intention_id", "occurrence")),
        "pending": sorted(PendingItem.objects.values_list("id", "cleared_at", "added_at")),
        "outbox": sorted(OutboxMessage.objects.values_list("id", "status", "attempts")),
        "cursors": sorted(EventCursor.objects.values_list("agent_id", "last_seq")),
        "clocks": sorted(AgentClock.objects.values_list("agent_id", "now")),
    }
