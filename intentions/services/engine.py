"""The trigger engine: moves intentions to *due*, exactly once per occurrence.

`fire` is the only way anything becomes due. Under a row lock it checks the
intention is still armed for this occurrence, writes a Firing (unique per
intention and occurrence), flips the status with a compare-and-set, records
an `intention.fired` ledger event, puts the intention into its thread's
pending list and queues the webhook. A duplicate delivery, a second beat, a
concurrent worker or a retry after a killed worker finds the occurrence
already fired and does nothing.

Scans run in short transactions over chunks taken with FOR UPDATE SKIP
LOCKED, so two scanners share the work instead of waiting for each other.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from ledger.models import ChainHead, Event
from ledger.services import EventDraft, event_append, events_append
from piper.errors import InvalidInput
from piper.ids import uuid7
from piper.provenance import SourceType
from piper.tenancy.clock import now_for, simulated_agent_ids
from piper.tenancy.models import Agent, AgentClock

from ..models import (
    EventCursor,
    Firing,
    Intention,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Transition,
    TriggerType,
    Webhook,
)
from . import triggers

logger = logging.getLogger(__name__)

ARMED = (IntentionStatus.ACTIVE, IntentionStatus.BLOCKED)
SCAN_CHUNK = 2000  # ids read per pass of a scan; each agent's share fires in one transaction
EVENT_CHUNK = 1000
REHEARSE_AFTER = timedelta(hours=getattr(settings, "PIPER_REHEARSE_AFTER_HOURS", 24))


@dataclass(frozen=True)
class Fired:
    intention_id: uuid.UUID
    occurrence: int
    firing_id: uuid.UUID


def record_transition(
    intention: Intention,
    to_status: str,
    *,
    at: datetime,
    reason: str = "",
    event: Event | None = None,
    from_status: str | None = None,
) -> None:
    Transition.objects.create(
        intention=intention,
        from_status=intention.status if from_status is None else from_status,
        to_status=to_status,
        occurrence=intention.occurrence,
        reason=reason,
        at=at,
        event=event,
        # Its event's record time, so a rebuild from the ledger gives it back.
        **({"recorded_at": event.recorded_at} if event is not None else {}),
    )


def fire(
    *,
    intention_id: uuid.UUID,
    occurrence: int | None = None,
    cause: str,
    at: datetime,
    cause_event: Event | None = None,
) -> Fired | None:
    """Make the intention due for its pending occurrence, unless it already is
    (or is no longer armed). Returns what fired, or None. Idempotent."""
    with transaction.atomic():
        intention = (
            Intention.objects.select_for_update(of=("self",), no_key=True)
            .select_related("agent", "thread")
            .filter(pk=intention_id)
            .first()
        )
        if intention is None or intention.status not in ARMED:
            return None
        if intention.expires_at is not None and at >= intention.expires_at:
            return None  # too late: expiry, not a firing
        if occurrence is not None and intention.occurrence != occurrence:
            return None
        if Firing.objects.filter(intention=intention, occurrence=intention.occurrence).exists():
            return None
        firing_id = uuid7()
        event = event_append(
            agent=intention.agent,
            event_type="intention.fired",
            payload={
                "intention_id": str(intention.pk),
                "firing_id": str(firing_id),
                "occurrence": intention.occurrence,
                "cause": cause,
                "cause_event_id": str(cause_event.pk) if cause_event else None,
                "fired_at": at.isoformat(),
                "description": intention.description,
            },
            session_id=intention.inherited_by or intention.source_session,
            source_type=SourceType.OBSERVATION,
            parent_event_id=cause_event.pk if cause_event else None,
        )
        try:
            with transaction.atomic():
                firing = Firing.objects.create(
                    id=firing_id,
                    agent=intention.agent,
                    intention=intention,
                    occurrence=intention.occurrence,
                    fired_at=at,
                    cause=cause,
                    cause_event=cause_event,
                    event=event,
                    recorded_at=event.recorded_at,
                )
        except IntegrityError:  # fired by a racer that did not hold our lock: its firing stands
            raise _AlreadyFired from None
        changed = Intention.objects.filter(
            pk=intention.pk, status=intention.status, occurrence=intention.occurrence
        ).update(status=IntentionStatus.DUE, last_fired_at=at, updated_at=event.recorded_at)
        if not changed:
            raise _AlreadyFired
        record_transition(
            intention, IntentionStatus.DUE, at=at, reason=f"fired by {cause}", event=event
        )
        if intention.thread_id:
            PendingItem.objects.get_or_create(
                thread_id=intention.thread_id,
                intention=intention,
                kind=PendingItem.Kind.FIRED,
                occurrence=intention.occurrence,
                defaults={"agent": intention.agent, "added_at": at},
            )
        _queue_webhook(intention, firing)
        return Fired(intention.pk, intention.occurrence, firing.pk)


class _AlreadyFired(Exception):
    pass


def fire_safely(**kwargs) -> Fired | None:
    """fire(), treating a lost race as 'already fired' (the winner's firing stands)."""
    try:
        return fire(**kwargs)
    except _AlreadyFired:
        return None


def _queue_webhook(intention: Intention, firing: Firing) -> None:
    hook = Webhook.objects.filter(agent_id=intention.agent_id, is_active=True).first()
    if hook is None:
        return
    message = OutboxMessage.objects.create(
        agent_id=intention.agent_id,
        firing=firing,
        payload={
            "type": "intention.fired",
            "firing_id": str(firing.pk),
            "intention_id": str(intention.pk),
            "occurrence": firing.occurrence,
            "description": intention.description,
            "priority": intention.priority,
            "thread": intention.thread.key if intention.thread else None,
            "fired_at": firing.fired_at.isoformat(),
            "cause": firing.cause,
        },
    )
    from ..tasks import deliver_outbox_message

    transaction.on_commit(lambda: deliver_outbox_message.delay(str(message.pk)))


# --------------------------------------------------------------------------- scans


def _agents_on(agent: Agent | None) -> Q:
    """Which intentions a scan looks at: one agent's, or every wall-clock agent's."""
    if agent is not None:
        return Q(agent=agent)
    return ~Q(agent_id__in=simulated_agent_ids())


def scan_time(
    *, agent: Agent | None = None, now: datetime | None = None, chunk: int = SCAN_CHUNK
) -> list[Fired]:
    """Fire every time-triggered intention whose moment has come; expire those
    past expires_at. With `agent`, that agent at its own clock.

    Reads the due ids a chunk at a time and fires each agent's share of the
    chunk in one transaction (fire_time_batch): one chain lock and a handful
    of statements per agent instead of ~16 round trips per intention. Two
    scanners racing over the same rows skip each other's locked rows, and
    never fire an occurrence twice.
    """
    now = now or (now_for(agent.pk) if agent else timezone.now())
    expire_due(agent=agent, now=now)  # first: what has expired must not fire
    fired: list[Fired] = []
    scope = _agents_on(agent)
    after = None
    while True:
        candidates = (
            Intention.objects.filter(
                scope, status=IntentionStatus.ACTIVE, trigger_type=TriggerType.TIME, due_at__lte=now
            )
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .order_by("due_at", "pk")
        )
        if after is not None:
            candidates = candidates.filter(
                Q(due_at__gt=after[0]) | Q(due_at=after[0], pk__gt=after[1])
            )
        rows = list(candidates.values_list("pk", "agent_id", "due_at")[:chunk])
        by_agent: dict[uuid.UUID, list[uuid.UUID]] = {}
        for pk, agent_id, _ in rows:
            by_agent.setdefault(agent_id, []).append(pk)
        for agent_id, ids in by_agent.items():
            fired += fire_time_batch(agent_id=agent_id, intention_ids=ids, at=now)
        if len(rows) < chunk:
            break
        after = (rows[-1][2], rows[-1][0])
    return fired


def fire_time_batch(
    *, agent_id: uuid.UUID, intention_ids: list[uuid.UUID], at: datetime
) -> list[Fired]:
    """fire() for many time-triggered intentions of one agent, in one transaction,
    with the same checks per row under the row lock (still active, still due,
    not expired, occurrence not fired). Rows another scanner holds are skipped:
    it is firing them. Should the batch meet a concurrent firing anyway (the
    unique Firing or the status compare-and-set), it is rolled back and each
    intention goes through fire() alone, where a lost race is harmless."""
    try:
        return _fire_time_batch(agent_id, intention_ids, at)
    except _AlreadyFired:
        results = (
            fire_safely(intention_id=pk, cause=TriggerType.TIME, at=at) for pk in intention_ids
        )
        return [r for r in results if r is not None]


def _fire_time_batch(agent_id: uuid.UUID, intention_ids: list[uuid.UUID], at: datetime):
    with transaction.atomic():
        rows = list(
            Intention.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
            .select_related("thread")
            .filter(
                pk__in=intention_ids,
                agent_id=agent_id,
                status=IntentionStatus.ACTIVE,
                trigger_type=TriggerType.TIME,
                due_at__lte=at,
            )
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=at))
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=at))
            .exclude(
                Exists(
                    Firing.objects.filter(
                        intention=OuterRef("pk"), occurrence=OuterRef("occurrence")
                    )
                )
            )
            .order_by("pk")
        )
        if not rows:
            return []
        agent = Agent.objects.get(pk=agent_id)
        firing_ids = [uuid7() for _ in rows]
        events = events_append(
            agent=agent,
            drafts=[
                EventDraft(
                    event_type="intention.fired",
                    payload={
                        "intention_id": str(i.pk),
                        "firing_id": str(firing_id),
                        "occurrence": i.occurrence,
                        "cause": TriggerType.TIME,
                        "cause_event_id": None,
                        "fired_at": at.isoformat(),
                        "description": i.description,
                    },
                    session_id=i.inherited_by or i.source_session,
                    source_type=SourceType.OBSERVATION,
                )
                for i, firing_id in zip(rows, firing_ids, strict=True)
            ],
        )
        try:
            with transaction.atomic():
                firings = Firing.objects.bulk_create(
                    [
                        Firing(
                            id=firing_id,
                            agent_id=agent_id,
                            intention=i,
                            occurrence=i.occurrence,
                            fired_at=at,
                            cause=TriggerType.TIME,
                            event=e,
                            recorded_at=e.recorded_at,
                        )
                        for i, e, firing_id in zip(rows, events, firing_ids, strict=True)
                    ]
                )
        except IntegrityError:  # a racer fired one without our lock: fall back, row by row
            raise _AlreadyFired from None
        changed = Intention.objects.filter(
            pk__in=[i.pk for i in rows], status=IntentionStatus.ACTIVE
        ).update(status=IntentionStatus.DUE, last_fired_at=at, updated_at=events[0].recorded_at)
        if changed != len(rows):
            raise _AlreadyFired
        Transition.objects.bulk_create(
            [
                Transition(
                    intention=i,
                    from_status=IntentionStatus.ACTIVE,
                    to_status=IntentionStatus.DUE,
                    occurrence=i.occurrence,
                    reason=f"fired by {TriggerType.TIME}",
                    at=at,
                    event=e,
                    recorded_at=e.recorded_at,
                )
                for i, e in zip(rows, events, strict=True)
            ]
        )
        PendingItem.objects.bulk_create(
            [
                PendingItem(
                    agent_id=agent_id,
                    thread_id=i.thread_id,
                    intention=i,
                    kind=PendingItem.Kind.FIRED,
                    occurrence=i.occurrence,
                    added_at=at,
                )
                for i in rows
                if i.thread_id
            ],
            ignore_conflicts=True,
        )
        hook = Webhook.objects.filter(agent_id=agent_id, is_active=True).first()
        if hook is not None:
            for intention, firing in zip(rows, firings, strict=True):
                _queue_webhook(intention, firing)
        return [Fired(i.pk, i.occurrence, f.pk) for i, f in zip(rows, firings, strict=True)]


def catch_up_events() -> int:
    """match_events for every agent with an armed event intention: the safety
    net for a post-commit task that was lost (Redis flushed, worker killed).
    Returns how many agents were looked at."""
    count = 0
    for agent_id in _event_armed_agent_ids():
        match_events(agent_id=agent_id)
        count += 1
    return count


def _event_armed_agent_ids():
    return (
        Intention.objects.filter(status=IntentionStatus.ACTIVE, trigger_type=TriggerType.EVENT)
        .order_by()  # else Meta.ordering's columns join the DISTINCT: one call per row, not agent
        .values_list("agent_id", flat=True)
        .distinct()
    )


def cycle() -> dict:
    """What tasks.engine_cycle runs, returning what fired (intentions_tick):
    the time scan and expiry and the state re-checks for every wall-clock
    agent, the event catch-up for every agent with an armed event trigger, and
    then the escalations whose condition holds (escalation.escalate_due)."""
    from .escalation import escalate_due

    fired = {"time": scan_time(), "states": check_states(), "events": []}
    for agent_id in _event_armed_agent_ids():
        fired["events"] += match_events(agent_id=agent_id)
    fired["escalated"] = escalate_due()
    return fired


def expire_due(*, agent: Agent | None = None, now: datetime | None = None) -> int:
    """Expiry is explicit: only intentions with an expires_at in the past.
    Each expiry is its own transaction, recorded in the ledger; the blocked
    dependents it leaves that can never run are cancelled in it
    (lifecycle.dependents_cancel)."""
    from .lifecycle import dependents_cancel, dependents_lock

    now = now or (now_for(agent.pk) if agent else timezone.now())
    open_statuses = [
        IntentionStatus.ACTIVE,
        IntentionStatus.BLOCKED,
        IntentionStatus.DUE,
        IntentionStatus.EXECUTING,
    ]
    count = 0
    ids = list(
        Intention.objects.filter(_agents_on(agent), status__in=open_statuses, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)
    )
    for pk in ids:
        with transaction.atomic():
            intention = (
                Intention.objects.select_for_update(of=("self",), no_key=True)
                .select_related("agent")
                .filter(pk=pk, status__in=open_statuses, expires_at__lte=now)
                .first()
            )
            if intention is None:  # finished or expired meanwhile
                continue
            doomed = dependents_lock(intention)  # rows before the chain head
            event = _event(
                intention, "intention.expired", {"from": intention.status, "at": now.isoformat()}
            )
            record_transition(
                intention, IntentionStatus.EXPIRED, at=now, reason="expires_at passed", event=event
            )
            Intention.objects.filter(pk=intention.pk).update(
                status=IntentionStatus.EXPIRED, updated_at=event.recorded_at
            )
            intention.status = IntentionStatus.EXPIRED
            dependents_cancel(intention, doomed, at=now)
            count += 1
    return count


def _event(intention: Intention, event_type: str, payload: dict) -> Event:
    return event_append(
        agent=intention.agent,
        event_type=event_type,
        payload={"intention_id": str(intention.pk), "occurrence": intention.occurrence, **payload},
        session_id=intention.inherited_by or intention.source_session,
        source_type=SourceType.OBSERVATION,
    )


def match_events(*, agent_id: uuid.UUID) -> list[Fired]:
    """Match the agent's ledger events not yet read against its armed event
    triggers. The cursor row is locked while reading, so two workers never
    read the same events; a firing would still be unique if they did.

    Matches are found first and their rows locked (in id order) before any is
    fired: firing takes the ledger's chain lock, and the lock order everywhere
    is intention rows first, chain head second.
    """
    if not Agent.objects.filter(pk=agent_id).exists():
        logger.info("match_events: agent %s does not exist", agent_id)
        return []
    fired: list[Fired] = []
    while True:
        with transaction.atomic():
            EventCursor.objects.get_or_create(agent_id=agent_id)
            cursor = EventCursor.objects.select_for_update().get(agent_id=agent_id)
            # Read the head first: events appended after it wait for the next run.
            head = (
                ChainHead.objects.filter(agent_id=agent_id)
                .values_list("last_seq", flat=True)
                .first()
                or 0
            )
            armed = list(
                Intention.objects.filter(
                    agent_id=agent_id, status=IntentionStatus.ACTIVE, trigger_type=TriggerType.EVENT
                ).only("pk", "occurrence", "trigger_spec", "armed_after_seq", "not_before")
            )
            if not armed:  # nothing can match: skip to the head
                EventCursor.objects.filter(pk=agent_id, last_seq__lt=head).update(last_seq=head)
                return fired
            # No armed intention matches events from before it was armed.
            start = max(cursor.last_seq, min(i.armed_after_seq for i in armed))
            events = list(
                Event.objects.filter(agent_id=agent_id, seq__gt=start, seq__lte=head)
                .exclude(event_type="intention.fired")
                .order_by("seq")[:EVENT_CHUNK]
            )
            now = now_for(agent_id)
            # not_before holds a trigger back: a cue before it does not count.
            armed = [i for i in armed if i.not_before is None or i.not_before <= now]
            matches: dict[uuid.UUID, tuple[Intention, Event]] = {}
            for event in events:
                for intention in armed:
                    if (
                        intention.pk not in matches
                        and event.seq > intention.armed_after_seq
                        and triggers.event_matches(intention.trigger_spec, event)
                    ):
                        matches[intention.pk] = (intention, event)
            list(
                Intention.objects.select_for_update(no_key=True)
                .filter(pk__in=sorted(matches))
                .order_by("pk")
                .values_list("pk", flat=True)
            )
            for intention, event in matches.values():
                result = fire_safely(
                    intention_id=intention.pk,
                    occurrence=intention.occurrence,
                    cause=TriggerType.EVENT,
                    at=now,
                    cause_event=event,
                )
                if result:
                    fired.append(result)
            done = len(events) < EVENT_CHUNK
            EventCursor.objects.filter(pk=agent_id).update(
                last_seq=head if done else events[-1].seq
            )
        if done:
            return fired


def check_states(*, agent: Agent | None = None, now: datetime | None = None) -> list[Fired]:
    """Fire state-triggered intentions whose condition holds over current facts.

    One statement per distinct (agent, subject, predicate, moment) asked about
    (facts_valid_at_by_ref), shared by every intention watching the same fact."""
    fired: list[Fired] = []
    armed = (
        Intention.objects.filter(
            _agents_on(agent), status=IntentionStatus.ACTIVE, trigger_type=TriggerType.STATE
        )
        .select_related("agent")
        .only("pk", "agent", "occurrence", "not_before", "trigger_spec")
        .order_by("agent_id")
    )
    looked_up: dict[tuple, list] = {}
    moments: dict[uuid.UUID, datetime] = {}  # one "now" per agent and pass, so lookups share
    for intention in armed.iterator(chunk_size=SCAN_CHUNK):
        if intention.agent_id not in moments:
            moments[intention.agent_id] = now or now_for(intention.agent_id)
        at = moments[intention.agent_id]
        if intention.not_before is not None and at < intention.not_before:
            continue  # held back until not_before
        spec = intention.trigger_spec
        key = (intention.agent_id, spec["subject"], spec["predicate"], at)
        if key not in looked_up:
            looked_up[key] = _values_at(intention.agent, spec["subject"], spec["predicate"], at)
        values = looked_up[key]
        op = spec.get("op", "eq")
        if op == "absent":
            holds = not values
        elif op == "exists":
            holds = bool(values)
        else:
            holds = any(triggers.condition_holds(op, True, v, spec.get("value")) for v in values)
        if holds and (
            result := fire_safely(
                intention_id=intention.pk,
                occurrence=intention.occurrence,
                cause=TriggerType.STATE,
                at=at,
            )
        ):
            fired.append(result)
    return fired


def _values_at(agent: Agent, subject: str, predicate: str, at: datetime) -> list:
    """The believed values of subject.predicate at `at` (an entity's name for a
    relation); none when the subject or predicate is unknown."""
    from facts.selectors import facts_valid_at_by_ref
    from piper.errors import NotFound

    try:
        _, _, facts = facts_valid_at_by_ref(
            agent=agent, subject_ref=subject, predicate_name=predicate, valid_time=at
        )
    except NotFound:
        return []
    return [f.object_value if f.object_entity_id is None else f.object_entity.name for f in facts]


def unmet(dependencies) -> bool:
    """Is any of these intentions not yet done? Done means completed — for a
    recurring one, one occurrence completed (it is active again, for its next
    occurrence, or its series is over); a skipped occurrence is not done, so a
    series that ran out with every occurrence skipped was never done."""
    pending = [
        d.pk for d in dependencies if not (d.status == IntentionStatus.COMPLETED and not d.rrule)
    ]
    if not pending:
        return False
    done = set(
        Transition.objects.filter(intention_id__in=pending, to_status=IntentionStatus.COMPLETED)
        .exclude(reason="skipped")
        .values_list("intention_id", flat=True)
    )
    return any(pk not in done for pk in pending)


def _blocked_dependents(intention: Intention):
    """The blocked intentions that wait directly on `intention`."""
    return Intention.objects.filter(
        dependency_links__depends_on=intention, status=IntentionStatus.BLOCKED
    )


def lock_dependents(intention: Intention) -> None:
    """Lock the rows release_dependents may change, before the caller writes to
    the ledger: the lock order everywhere is intention rows, then chain head."""
    list(
        _blocked_dependents(intention)
        .select_for_update(no_key=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def release_dependents(*, intention: Intention, at: datetime) -> list[Fired]:
    """An intention completed. Its blocked dependents with every dependency now
    done are released: a dependency trigger fires; any other trigger is re-armed
    (active) and fires on its own cue."""
    fired = []
    for dependent in _blocked_dependents(intention).select_related("agent"):
        if unmet(
            [link.depends_on for link in dependent.dependency_links.select_related("depends_on")]
        ):
            continue
        if dependent.trigger_type == TriggerType.DEPENDENCY:
            result = fire_safely(
                intention_id=dependent.pk,
                occurrence=dependent.occurrence,
                cause=TriggerType.DEPENDENCY,
                at=at,
            )
            if result:
                fired.append(result)
            continue
        event = _event(
            dependent,
            "intention.rearmed",
            {"from": "blocked", "reason": "dependencies met", "at": at.isoformat()},
        )
        record_transition(
            dependent, IntentionStatus.ACTIVE, at=at, reason="dependencies met", event=event
        )
        Intention.objects.filter(pk=dependent.pk, status=IntentionStatus.BLOCKED).update(
            status=IntentionStatus.ACTIVE, updated_at=event.recorded_at
        )
    return fired


def rehearse(*, agent: Agent | None = None, now: datetime | None = None) -> int:
    """Re-surface intentions pending longer than REHEARSE_AFTER into their thread's
    working state, so nothing waits unseen."""
    count = 0
    candidates = Intention.objects.filter(_agents_on(agent), status__in=ARMED, thread__isnull=False)
    for intention in candidates.select_related("agent").iterator(chunk_size=SCAN_CHUNK):
        at = now or now_for(intention.agent_id)
        # Set at creation (the agent had it in mind then), on the engine's clock.
        seen = intention.last_rehearsed_at or intention.created_at
        if at - seen < REHEARSE_AFTER:
            continue
        with transaction.atomic():
            changed = Intention.objects.filter(
                pk=intention.pk, last_rehearsed_at=intention.last_rehearsed_at
            ).update(last_rehearsed_at=at)
            if not changed:
                continue
            item, created = PendingItem.objects.get_or_create(
                thread_id=intention.thread_id,
                intention=intention,
                kind=PendingItem.Kind.REHEARSED,
                occurrence=intention.occurrence,
                defaults={"agent_id": intention.agent_id, "added_at": at},
            )
            if not created:
                PendingItem.objects.filter(pk=item.pk).update(added_at=at, cleared_at=None)
            _event(
                intention,
                "intention.rehearsed",
                {"at": at.isoformat(), "thread_id": str(intention.thread_id)},
            )
            count += 1
    return count


def tick(*, agent: Agent) -> dict:
    """One engine cycle for one agent at its own clock (the battery's simulated
    time); escalations last, so one fired in this cycle is measured from now."""
    from .escalation import escalate_due

    now = now_for(agent.pk)
    return {
        "now": now,
        "time": scan_time(agent=agent, now=now),
        "events": match_events(agent_id=agent.pk),
        "states": check_states(agent=agent, now=now),
        "rehearsed": rehearse(agent=agent, now=now),
        "escalated": escalate_due(agent=agent, now=now),
    }


def clock_set(*, agent: Agent, now: datetime) -> AgentClock:
    """Put an agent on a simulated clock; the wall-clock scans then leave it alone.
    The API allows it only for the Memory Battery's throwaway agents."""
    if now.tzinfo is None:
        raise InvalidInput("now must carry a time zone", details={"now": ["naive"]})
    clock, _ = AgentClock.objects.update_or_create(agent=agent, defaults={"now": now})
    return clock


def clock_clear(*, agent: Agent) -> None:
    """Back to the wall clock."""
    AgentClock.objects.filter(agent=agent).delete()
