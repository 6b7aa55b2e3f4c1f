"""Every read of working state and prospective memory, scoped to one agent.

Each returns a queryset (or row) with what its API response needs already
joined or prefetched, so a list serializes in a fixed number of queries.
Another agent's thread or intention is NotFound, exactly like a missing one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from django.utils.dateparse import parse_datetime

from piper.api.rendering import RawJSON
from piper.errors import NotFound
from piper.tenancy.models import Agent, AgentClock

from .models import (
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


# The checkpoint's fields that name things outside memory, each with when it was
# last checked and how long that check stays good.
EXTERNAL = ("artifacts", "tool_handles")


def dependencies_to_recheck(state: dict, now: datetime, agent=None) -> list[dict]:
    """Artifacts and tool handles to re-check before relying on them, each with
    its `reason`: `expired`, its last check older than its declared freshness;
    or `changed`, it watches a fact (`watch: {subject, predicate}`) whose current
    value became true after its last check — the dependency really changed,
    whatever its freshness (needs `agent`, whose facts are watched)."""
    stale = []
    for kind in EXTERNAL:
        for item in state.get(kind) or []:
            checked, fresh = item.get("checked_at"), item.get("freshness_seconds")
            if checked is None:
                continue
            age = now - parse_datetime(checked)
            changed = (
                _watched_change(agent, item["watch"], parse_datetime(checked), now)
                if agent is not None and isinstance(item.get("watch"), dict)
                else None
            )
            if changed is not None:
                stale.append(
                    {
                        "kind": kind[:-1],
                        **item,
                        "age_seconds": int(age.total_seconds()),
                        "reason": "changed",
                        **changed,
                    }
                )
            elif fresh is not None and age > timedelta(seconds=fresh):
                stale.append(
                    {
                        "kind": kind[:-1],
                        **item,
                        "age_seconds": int(age.total_seconds()),
                        "reason": "expired",
                    }
                )
    return stale


def _watched_change(agent, watch: dict, checked_at: datetime, now: datetime) -> dict | None:
    """When the watched fact's current value became true after `checked_at`: when,
    and what it is now. None when it did not change (or is not known at all)."""
    from facts.selectors import facts_valid_at_by_ref

    try:
        _, _, facts = facts_valid_at_by_ref(
            agent=agent,
            subject_ref=watch["subject"],
            predicate_name=watch["predicate"],
            valid_time=now,
        )
    except NotFound:
        return None
    newer = [fact.valid_from for fact in facts if fact.valid_from > checked_at]
    if not newer:
        return None
    return {
        "changed_at": max(newer).isoformat(),
        "current_value": [
            fact.object_entity.name if fact.object_entity_id else fact.object_value
            for fact in facts
        ],
    }


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
    escalated: bool | None = None,
) -> QuerySet[Intention]:
    intentions = Intention.objects.filter(agent=agent)
    if escalated is not None:
        intentions = intentions.filter(escalated_at__isnull=not escalated)
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


# The open statuses a resume lists, and their urgency: due, executing, overdue, the rest.
RESUME_STATUSES = (
    IntentionStatus.DUE,
    IntentionStatus.EXECUTING,
    IntentionStatus.ACTIVE,
    IntentionStatus.BLOCKED,
)


def _iso_sql(column: str) -> str:
    """SQL rendering a timestamptz exactly as piper.api.serializers.api_datetime does (UTC,
    'Z', microseconds only when there are any)."""
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"CASE WHEN {column} IS NULL THEN NULL ELSE "
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || "
        f"CASE WHEN date_part('microseconds', {utc})::bigint %% 1000000 = 0 THEN '' "
        f"ELSE to_char({utc}, '.US') END || 'Z' END"
    )


def _resume_intentions_sql() -> str:
    intention = Intention._meta.db_table
    dependency = IntentionDependency._meta.db_table
    when = {
        name: _iso_sql(f"i.{name}")
        for name in (
            "not_before",
            "due_at",
            "expires_at",
            "last_fired_at",
            "last_rehearsed_at",
            "escalated_at",
            "created_at",
            "updated_at",
        )
    }
    urgency = """CASE WHEN {a}status = %s THEN 0 WHEN {a}status = %s THEN 1
                WHEN {a}due_at <= %s THEN 2 ELSE 3 END,
           {a}due_at, {a}priority DESC, {a}created_at, {a}id"""
    # Field for field (and in the same order) what IntentionOutputSerializer returns.
    return f"""
SELECT coalesce(json_agg(json_build_object(
    'id', i.id, 'description', i.description, 'priority', i.priority, 'status', i.status,
    'trigger_type', i.trigger_type, 'trigger_spec', i.trigger_spec, 'thread', i.thread_id,
    'not_before', {when["not_before"]}, 'due_at', {when["due_at"]}, 'rrule', i.rrule,
    'expires_at', {when["expires_at"]}, 'occurrence', i.occurrence,
    'last_fired_at', {when["last_fired_at"]}, 'last_rehearsed_at', {when["last_rehearsed_at"]},
    'dependencies', coalesce((SELECT json_agg(d.depends_on_id ORDER BY d.id)
                              FROM {dependency} d WHERE d.intention_id = i.id), '[]'::json),
    'required_context', i.required_context, 'completion_criteria', i.completion_criteria,
    'completion_evidence', i.completion_evidence, 'retry_policy', i.retry_policy,
    'escalation_policy', i.escalation_policy, 'escalated_at', {when["escalated_at"]},
    'escalation', i.escalation, 'source_session', i.source_session,
    'inherited_by', i.inherited_by, 'source_event_id', i.source_event_id,
    'created_at', {when["created_at"]}, 'updated_at', {when["updated_at"]})
  ORDER BY {urgency.format(a="i.")}), '[]'::json)::text
FROM (
    SELECT * FROM {intention} WHERE thread_id = %s AND status = ANY(%s)
    UNION ALL
    (SELECT * FROM {intention}
      WHERE agent_id = %s AND thread_id IS NULL AND status = ANY(%s)
        AND %s <> '' AND source_session = %s
      ORDER BY {urgency.format(a="")}
      LIMIT %s)
    UNION ALL
    (SELECT * FROM {intention}
      WHERE agent_id = %s AND thread_id IS NULL AND status = ANY(%s)
        AND source_session IS DISTINCT FROM %s
      ORDER BY {urgency.format(a="")}
      LIMIT %s)
) i
"""


# A resume also lists the agent's open intentions that belong to no thread (a
# successor inherits the agent's promises, not only the thread's): every one the
# predecessor's session made (up to RESUME_SESSION_INTENTIONS), and the most
# urgent RESUME_AGENT_INTENTIONS of the others, so that an agent with thousands
# of reminders still resumes fast without a successor losing its own session's.
RESUME_AGENT_INTENTIONS = 100
RESUME_SESSION_INTENTIONS = 1000


def open_intentions_rendered(*, thread: Thread, now, session: str = "") -> RawJSON:
    """The open intentions a successor of the thread must see, as the API shows
    them (IntentionOutputSerializer's fields): the thread's, and the agent's that
    belong to no thread (`thread` null): all that `session` (the predecessor's)
    made, and the RESUME_AGENT_INTENTIONS most urgent others; due first, then
    executing, overdue, by due time, priority and age.

    One statement, with the rows rendered to JSON by PostgreSQL: a resume lists
    up to thousands of intentions, and building model instances and serializing
    them was most of a resume (docs/benchmarks.md, working state). The text
    goes into the response as it is (RawJSON); `.parsed()` gives the list.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _resume_intentions_sql(),
            [
                IntentionStatus.DUE,
                IntentionStatus.EXECUTING,
                now,
                thread.pk,
                [str(s) for s in RESUME_STATUSES],
                thread.agent_id,
                [str(s) for s in RESUME_STATUSES],
                session,
                session,
                IntentionStatus.DUE,
                IntentionStatus.EXECUTING,
                now,
                RESUME_SESSION_INTENTIONS,
                thread.agent_id,
                [str(s) for s in RESUME_STATUSES],
                session or None,
                IntentionStatus.DUE,
                IntentionStatus.EXECUTING,
                now,
                RESUME_AGENT_INTENTIONS,
            ],
        )
        return RawJSON(cursor.fetchone()[0])
