"""Firing: an intention becomes due, exactly once per occurrence.

`fire` is the only way anything becomes due. Under a row lock it checks the
intention is still armed for this occurrence, writes a Firing (unique per
intention and occurrence), flips the status with a compare-and-set, records
an `intention.fired` ledger event, puts the intention into its thread's
pending list and queues the webhook. A duplicate delivery, a second beat, a
concurrent worker or a retry after a killed worker finds the occurrence
already fired and does nothing. `fire_time_batch` does the same for many
time-triggered intentions of one agent in one transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q

from ledger.models import Event
from ledger.services import EventDraft, events_append
from piper.ids import uuid7
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from ..models import (
    Firing,
    Intention,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Transition,
    TriggerType,
    Webhook,
)
from .transitions import intention_event, record_transition

ARMED = (IntentionStatus.ACTIVE, IntentionStatus.BLOCKED)


@dataclass(frozen=True)
class Fired:
    intention_id: uuid.UUID
    occurrence: int
    firing_id: uuid.UUID


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
        event = intention_event(
            intention,
            "intention.fired",
            {
                "firing_id": str(firing_id),
                "occurrence": intention.occurrence,
                "cause": cause,
                "cause_event_id": str(cause_event.pk) if cause_event else None,
                "fired_at": at.isoformat(),
                "description": intention.description,
            },
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
