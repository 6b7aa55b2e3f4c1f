"""The trigger engine: the scans that find what is to fire, expire, be
rehearsed or escalated, and the cycles that run them (for every wall-clock
agent, or one agent at its own clock).

What fires goes through firing.py, exactly once per occurrence. Scans run
in short transactions over chunks taken with FOR UPDATE SKIP LOCKED, so two
scanners share the work instead of waiting for each other.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from facts.selectors import facts_valid_at_by_ref
from ledger.models import ChainHead, Event
from piper.errors import InvalidInput, NotFound
from piper.provenance import SourceType
from piper.tenancy.clock import now_for, scan_scope
from piper.tenancy.models import Agent, AgentClock

from ..models import (
    EventCursor,
    Intention,
    IntentionStatus,
    PendingItem,
    TriggerType,
)
from . import triggers
from .dependencies import dependents_cancel, lock_dependents_to_cancel
from .escalation import escalate_due
from .firing import ARMED, Fired, fire_safely, fire_time_batch
from .transitions import intention_event, record_transition

logger = logging.getLogger(__name__)

SCAN_CHUNK = 2000  # ids read per pass of a scan; each agent's share fires in one transaction
EVENT_CHUNK = 1000
REHEARSE_AFTER = timedelta(hours=getattr(settings, "PIPER_REHEARSE_AFTER_HOURS", 24))


# --------------------------------------------------------------------------- scans


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
    scope = scan_scope(agent)
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
    fired = {"time": scan_time(), "states": check_states(), "events": []}
    for agent_id in _event_armed_agent_ids():
        fired["events"] += match_events(agent_id=agent_id)
    fired["escalated"] = escalate_due()
    return fired


def expire_due(*, agent: Agent | None = None, now: datetime | None = None) -> int:
    """Expiry is explicit: only intentions with an expires_at in the past.
    Each expiry is its own transaction, recorded in the ledger; the blocked
    dependents it leaves that can never run are cancelled in it
    (dependencies.dependents_cancel)."""
    now = now or (now_for(agent.pk) if agent else timezone.now())
    open_statuses = [
        IntentionStatus.ACTIVE,
        IntentionStatus.BLOCKED,
        IntentionStatus.DUE,
        IntentionStatus.EXECUTING,
    ]
    count = 0
    ids = list(
        Intention.objects.filter(scan_scope(agent), status__in=open_statuses, expires_at__lte=now)
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
            doomed = lock_dependents_to_cancel(intention)  # rows before the chain head
            event = intention_event(
                intention,
                "intention.expired",
                {
                    "occurrence": intention.occurrence,
                    "from": intention.status,
                    "at": now.isoformat(),
                },
                source_type=SourceType.OBSERVATION,
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
            scan_scope(agent), status=IntentionStatus.ACTIVE, trigger_type=TriggerType.STATE
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
    try:
        _, _, facts = facts_valid_at_by_ref(
            agent=agent, subject_ref=subject, predicate_name=predicate, valid_time=at
        )
    except NotFound:
        return []
    return [f.object_value if f.object_entity_id is None else f.object_entity.name for f in facts]


def rehearse(*, agent: Agent | None = None, now: datetime | None = None) -> int:
    """Re-surface intentions pending longer than REHEARSE_AFTER into their thread's
    working state, so nothing waits unseen."""
    count = 0
    candidates = Intention.objects.filter(scan_scope(agent), status__in=ARMED, thread__isnull=False)
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
            intention_event(
                intention,
                "intention.rehearsed",
                {
                    "occurrence": intention.occurrence,
                    "at": at.isoformat(),
                    "thread_id": str(intention.thread_id),
                },
                source_type=SourceType.OBSERVATION,
            )
            count += 1
    return count


def tick(*, agent: Agent) -> dict:
    """One engine cycle for one agent at its own clock (the battery's simulated
    time); escalations last, so one fired in this cycle is measured from now."""
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
