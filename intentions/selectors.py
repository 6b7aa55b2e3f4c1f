"""Every read of working state and prospective memory, scoped to one agent.

Each returns a queryset (or row) with what its API response needs already
joined or prefetched, so a list serializes in a fixed number of queries.
Another agent's thread or intention is NotFound, exactly like a missing one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from django.db.models import Prefetch, QuerySet, prefetch_related_objects

from piper.errors import NotFound
from piper.tenancy.models import Agent

from .models import (
    AgentClock,
    Firing,
    Handover,
    Intention,
    IntentionDependency,
    IntentionStatus,
    PendingItem,
    Thread,
    Transition,
    Webhook,
    WorkingState,
)

# ------------------------------------------------------------------------- threads


def thread_list(*, agent: Agent, status: str | None = None) -> QuerySet[Thread]:
    threads = Thread.objects.filter(agent=agent)
    if status:
        threads = threads.filter(status=status)
    return threads.order_by("-id")


def thread_get(*, agent: Agent, thread_id: uuid.UUID) -> Thread:
    thread = Thread.objects.filter(agent=agent, pk=thread_id).first()
    if thread is None:
        raise NotFound(f"thread {thread_id} not found")
    return thread


def working_state_get(*, thread: Thread, version: int | None = None) -> WorkingState:
    """The thread's checkpoint at `version` (default: the current one).

    Version 0 is the empty checkpoint every thread starts from: never stored, so
    it has no event and no time. A version the thread never had is NotFound."""
    version = thread.current_version if version is None else version
    if version == 0:
        return WorkingState(
            thread_id=thread.pk,
            version=0,
            based_on=None,
            state={},
            size_bytes=0,
            session_id="",
            source_event_id=None,
            created_at=None,
        )
    state = WorkingState.objects.filter(thread=thread, version=version).first()
    if state is None:
        raise NotFound(
            f"thread {thread.pk} has no version {version}; its current version is "
            f"{thread.current_version}",
            details={"version": [f"between 0 and {thread.current_version}"]},
        )
    return state


def working_state_versions(*, thread: Thread) -> QuerySet[WorkingState]:
    """Every version of the thread's checkpoint, newest first."""
    return WorkingState.objects.filter(thread=thread).order_by("-version")


def pending_items(*, thread: Thread) -> QuerySet[PendingItem]:
    """What the engine put into the thread's working state and the agent has not cleared."""
    return (
        PendingItem.objects.filter(thread=thread, cleared_at__isnull=True)
        .select_related("intention")
        .order_by("added_at", "id")
    )


def handover_open(*, thread: Thread) -> Handover | None:
    return (
        Handover.objects.filter(thread=thread)
        .exclude(status=Handover.Status.ACKNOWLEDGED)
        .order_by("-created_at")
        .first()
    )


# ---------------------------------------------------------------------- intentions


def _dependency_prefetch() -> Prefetch:
    return Prefetch(
        "dependency_links",
        queryset=IntentionDependency.objects.only("id", "intention_id", "depends_on_id").order_by(
            "id"
        ),
        to_attr="dependency_list",
    )


def _for_output(intentions: QuerySet[Intention]) -> QuerySet[Intention]:
    """What every intention response needs beyond its own row: its dependencies."""
    return intentions.prefetch_related(_dependency_prefetch())


def with_dependencies(intentions: Sequence[Intention]) -> Sequence[Intention]:
    """Load the dependencies of intentions a service returned (one query for all)."""
    prefetch_related_objects(list(intentions), _dependency_prefetch())
    return intentions


def intention_list(
    *,
    agent: Agent,
    statuses: Iterable[str] = (),
    trigger_types: Iterable[str] = (),
    thread: Thread | None = None,
) -> QuerySet[Intention]:
    intentions = Intention.objects.filter(agent=agent)
    if statuses := list(statuses):
        intentions = intentions.filter(status__in=statuses)
    if trigger_types := list(trigger_types):
        intentions = intentions.filter(trigger_type__in=trigger_types)
    if thread is not None:
        intentions = intentions.filter(thread=thread)
    return _for_output(intentions).order_by("-id")


def intentions_due(*, agent: Agent, thread: Thread | None = None) -> QuerySet[Intention]:
    """What has fired and waits for the agent: status due, in the order it fired."""
    intentions = Intention.objects.filter(agent=agent, status=IntentionStatus.DUE)
    if thread is not None:
        intentions = intentions.filter(thread=thread)
    return _for_output(intentions).order_by("last_fired_at", "id")


def intention_get(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """One intention with its timeline: transitions (in order) and firings (by occurrence)."""
    intention = (
        _for_output(Intention.objects.filter(agent=agent, pk=intention_id))
        .prefetch_related(
            Prefetch(
                "transitions",
                queryset=Transition.objects.order_by("id"),
                to_attr="transition_list",
            ),
            Prefetch(
                "firings",
                queryset=Firing.objects.order_by("occurrence"),
                to_attr="firing_list",
            ),
        )
        .first()
    )
    if intention is None:
        raise NotFound(f"intention {intention_id} not found")
    return intention


# ------------------------------------------------------------------ engine helpers


def webhook_get(*, agent: Agent) -> Webhook | None:
    return Webhook.objects.filter(agent=agent).first()


def clock_get(*, agent: Agent) -> AgentClock | None:
    return AgentClock.objects.filter(agent=agent).first()
