"""Rebuild working state from the ledger (DESIGN §1): threads, checkpoint
versions and handovers are a fold of the agent's events, in chain order.

| event | makes |
|---|---|
| thread.created | the thread (its id, key, session, created_at) |
| working_state.written | a version; the thread's current_version, session, updated_at |
| thread.handover_started | a pending handover; the thread frozen |
| thread.resumed | the handover resumed (resumed_at, surfaced) |
| thread.handover_acknowledged | the handover complete; the thread active, the successor's |
| working_state.scrubbed | an erased write's version, with the quotes scrubbed |

Every time is the record time of the event that set it (the row was written in
that event's transaction, where now() is the same). Erased events are skipped,
except a write that an erasure scrubbed: its copy (working_state.scrubbed)
stands where the write stood.

Threads are never deleted here: intentions point at them (Intention.thread is
SET_NULL, PendingItem.thread CASCADE), so a thread keeps its id and row and only
its columns are set from the ledger. Versions and handovers have no dependants:
they are deleted and inserted again.

Older ledgers are read too: a thread with no thread.created is made by its first
event that names it (its key from working_state.written or handover_started),
and an id an event does not carry (versions and handovers written before their
events had them) is the id of the row the same event made, if it is still there.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection

from ledger.models import Event
from ledger.projections import rebuild_each_agent
from piper.ids import uuid7
from piper.tenancy.models import Agent

from ..models import Handover, Thread, WorkingState
from .state import (
    HANDOVER_ACKNOWLEDGED,
    HANDOVER_STARTED,
    STATE_SCRUBBED,
    STATE_WRITTEN,
    THREAD_CREATED,
    THREAD_RESUMED,
    _size,
)

logger = logging.getLogger(__name__)

EVENT_TYPES = (
    THREAD_CREATED,
    STATE_WRITTEN,
    HANDOVER_STARTED,
    THREAD_RESUMED,
    HANDOVER_ACKNOWLEDGED,
    STATE_SCRUBBED,
)
THREAD_COLUMNS = ("key", "status", "session_id", "current_version", "created_at", "updated_at")
HANDOVER_COLUMNS = ("status", "resumed_at", "acknowledged_at", "surfaced")
BATCH = 2000
REBUILD_SETTING = "piper.rebuild"  # transaction-local; migration 0011


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Rebuild threads, working-state versions and handovers (one agent's, or
    every agent's) from the ledger, in one transaction, and return the number of
    events applied.

    The rows come back as they were: ids, versions, states, sessions, statuses,
    times, surfaced. The agents' threads (FOR NO KEY UPDATE, as every write of
    working state takes them) and then their chain heads are locked for the
    duration, so no write interleaves. Thread rows are updated in place, never
    deleted, so the intentions and pending items that point at them stay; a
    thread no surviving event names (its every event erased) is left as it is.
    """
    # Thread first, chain head second: the order working_state_write takes them.
    return rebuild_each_agent(
        agent,
        lock=[Thread.objects.select_for_update(no_key=True)],
        projected=Thread,
        event_types=EVENT_TYPES,
        rebuild_agent=_rebuild_agent,
    )


@dataclass
class _Fold:
    """The working state of one agent, as its events make it."""

    agent_id: Any
    # What is there now, to give back the ids older events do not carry.
    rows: dict[uuid.UUID, dict]
    state_ids: dict[uuid.UUID, uuid.UUID]  # source event -> version id
    handover_ids: dict[uuid.UUID, uuid.UUID]  # succession event -> handover id
    threads: dict[uuid.UUID, dict] = field(default_factory=dict)
    states: dict[uuid.UUID, WorkingState] = field(default_factory=dict)
    handovers: dict[uuid.UUID, Handover] = field(default_factory=dict)
    open_handover: dict[uuid.UUID, uuid.UUID] = field(default_factory=dict)  # thread -> handover
    applied: int = 0

    def thread(self, thread_id: Any, key: str | None, event: Event) -> dict | None:
        """The thread, made from `event` if no thread.created came first (an older ledger)."""
        thread_id = uuid.UUID(str(thread_id))
        if thread_id in self.threads:
            return self.threads[thread_id]
        now = self.rows.get(thread_id)
        key = key or (now or {}).get("key")
        if not key:
            return None
        self.threads[thread_id] = {
            "key": key,
            "status": Thread.Status.ACTIVE,
            "session_id": event.session_id,
            "current_version": 0,
            # When the thread itself was made is in no event: keep what the row says.
            "created_at": now["created_at"] if now else event.recorded_at,
            "updated_at": event.recorded_at,
        }
        return self.threads[thread_id]

    def created(self, event: Event) -> None:
        payload = event.payload
        thread_id = uuid.UUID(payload["thread_id"])
        self.threads[thread_id] = {
            "key": payload["thread"],
            "status": Thread.Status.ACTIVE,
            "session_id": event.session_id,
            "current_version": 0,
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
        }
        self.applied += 1

    def written(
        self, payload: dict, *, at: datetime, session_id: str, source_event_id: uuid.UUID, event
    ) -> None:
        """A version: `payload` is the write's, or its scrubbed copy's (then `at`
        is the write's record time and `source_event_id` the copy)."""
        thread = self.thread(payload["thread_id"], payload.get("thread"), event)
        if thread is None:
            return
        thread_id, version = uuid.UUID(payload["thread_id"]), payload["version"]
        state_id = payload.get("working_state_id") or self.state_ids.get(source_event_id)
        state_id = uuid.UUID(str(state_id)) if state_id else uuid7()
        self.states[state_id] = WorkingState(
            id=state_id,
            agent_id=self.agent_id,
            thread_id=thread_id,
            version=version,
            # A write names the version it read, which is always the one before.
            based_on=version - 1,
            state=payload["state"],
            size_bytes=_size(payload["state"]),
            session_id=session_id,
            source_event_id=source_event_id,
            created_at=at,
        )
        thread.update(
            current_version=version,
            updated_at=at,
            session_id=session_id or thread["session_id"],
        )
        self.applied += 1

    def scrubbed_alone(self, event: Event) -> None:
        """A scrubbed copy whose write is unknown (a copy of a copy, before the
        copies named it): it replaces the version in place, or stands for it."""
        payload = event.payload
        thread_id, version = uuid.UUID(payload["thread_id"]), payload["version"]
        for state in self.states.values():
            if state.thread_id == thread_id and state.version == version:
                state.state, state.size_bytes = payload["state"], _size(payload["state"])
                state.source_event_id = event.pk
                self.applied += 1
                return
        self.written(
            payload,
            at=event.recorded_at,
            session_id=event.session_id,
            source_event_id=event.pk,
            event=event,
        )

    def started(self, event: Event) -> None:
        payload = event.payload
        thread = self.thread(payload["thread_id"], payload.get("thread"), event)
        if thread is None:
            return
        thread_id = uuid.UUID(payload["thread_id"])
        handover_id = payload.get("handover_id") or self.handover_ids.get(event.pk)
        handover_id = uuid.UUID(str(handover_id)) if handover_id else uuid7()
        self.handovers[handover_id] = Handover(
            id=handover_id,
            agent_id=self.agent_id,
            thread_id=thread_id,
            from_session=payload["from_session"],
            to_session=payload["to_session"],
            frozen_version=payload["frozen_version"],
            status=Handover.Status.PENDING,
            note=payload.get("note", ""),
            succession_event_id=event.pk,
            created_at=event.recorded_at,
        )
        self.open_handover[thread_id] = handover_id
        thread.update(status=Thread.Status.HANDING_OVER, updated_at=event.recorded_at)
        self.applied += 1

    def _handover(self, payload: dict) -> Handover | None:
        """The handover a resume or acknowledgement names; an older started event
        did not carry its id, so the thread's open one takes the id named here."""
        handover_id = uuid.UUID(payload["handover_id"])
        if handover_id in self.handovers:
            return self.handovers[handover_id]
        open_id = self.open_handover.get(uuid.UUID(payload["thread_id"]))
        if open_id is None:
            return None
        handover = self.handovers.pop(open_id)
        handover.id = handover_id
        self.handovers[handover_id] = handover
        self.open_handover[handover.thread_id] = handover_id
        return handover

    def resumed(self, event: Event) -> None:
        handover = self._handover(event.payload)
        if handover is None or handover.status != Handover.Status.PENDING:
            return
        handover.status = Handover.Status.RESUMED
        handover.resumed_at = event.recorded_at
        # Resumes recorded before the surfaced list was kept carry none.
        handover.surfaced = event.payload.get("surfaced")
        self.applied += 1

    def acknowledged(self, event: Event) -> None:
        handover = self._handover(event.payload)
        if handover is None or handover.status == Handover.Status.ACKNOWLEDGED:
            return
        handover.status = Handover.Status.ACKNOWLEDGED
        handover.acknowledged_at = event.recorded_at
        self.open_handover.pop(handover.thread_id, None)
        thread = self.threads.get(handover.thread_id)
        if thread is not None:
            thread.update(
                status=Thread.Status.ACTIVE,
                session_id=event.payload["session"],
                updated_at=event.recorded_at,
            )
        self.applied += 1


def _events(agent_id: Any, **filters: Any):
    return (
        Event.objects.filter(agent_id=agent_id, event_type__in=EVENT_TYPES, **filters)
        .order_by("seq")
        .only("id", "seq", "event_type", "payload", "session_id", "recorded_at", "redacted_at")
    )


def _fold(agent_id: Any, *, excluding: Any = None) -> _Fold:
    """The agent's working state as its events make it; `excluding` (ids, or a
    subquery of them) are events an erasure is about to remove, read as erased."""
    fold = _Fold(
        agent_id=agent_id,
        rows={
            row["id"]: row
            for row in Thread.objects.filter(agent_id=agent_id).values("id", "key", "created_at")
        },
        state_ids=dict(
            WorkingState.objects.filter(agent_id=agent_id).values_list("source_event_id", "id")
        ),
        handover_ids=dict(
            Handover.objects.filter(agent_id=agent_id).values_list("succession_event_id", "id")
        ),
    )
    events = _events(agent_id)
    if excluding is not None:
        events = events.exclude(pk__in=excluding)
    # An erased write that an erasure scrubbed comes back from its last copy.
    copies: dict[str, Event] = {}
    for copy in events.filter(event_type=STATE_SCRUBBED, redacted_at__isnull=True).iterator(
        chunk_size=BATCH
    ):
        written = copy.payload.get("written_event_id") or copy.payload["replaces_event_id"]
        copies[written] = copy
    used: set[uuid.UUID] = set()
    for event in events.iterator(chunk_size=BATCH):
        kind = event.event_type
        if event.redacted_at is not None:
            copy = copies.get(str(event.pk)) if kind == STATE_WRITTEN else None
            if copy is not None:
                used.add(copy.pk)
                fold.written(
                    copy.payload,
                    at=event.recorded_at,
                    session_id=copy.session_id,
                    source_event_id=copy.pk,
                    event=event,
                )
        elif kind == THREAD_CREATED:
            fold.created(event)
        elif kind == STATE_WRITTEN:
            fold.written(
                event.payload,
                at=event.recorded_at,
                session_id=event.session_id,
                source_event_id=event.pk,
                event=event,
            )
        elif kind == HANDOVER_STARTED:
            fold.started(event)
        elif kind == THREAD_RESUMED:
            fold.resumed(event)
        elif kind == HANDOVER_ACKNOWLEDGED:
            fold.acknowledged(event)
        elif kind == STATE_SCRUBBED and event.pk not in used:
            fold.scrubbed_alone(event)
    return fold


def threads_refold(*, agent: Agent, thread_ids: set[uuid.UUID], excluding: Any) -> None:
    """Erasure's step: these threads, and their handovers that survive, get the
    columns the agent's other events give them — what a rebuild after the purge
    will give them (current_version, session, status, updated_at; a handover's
    status, resumed_at, acknowledged_at, surfaced). The versions and handovers
    the erased events made are the caller's to delete, first. A thread no other
    event names keeps its row, at version 0 if no version of it is left."""
    if not thread_ids:
        return
    fold = _fold(agent.pk, excluding=excluding)
    for thread_id in thread_ids:
        columns = fold.threads.get(thread_id)
        if columns is None:
            latest = WorkingState.objects.filter(thread_id=thread_id).order_by("-version").first()
            columns = {"current_version": latest.version if latest else 0}
        Thread.objects.filter(agent=agent, pk=thread_id).update(**columns)
    for handover in Handover.objects.filter(agent=agent, thread_id__in=thread_ids):
        refolded = fold.handovers.get(handover.pk)
        if refolded is not None:
            Handover.objects.filter(pk=handover.pk).update(
                **{name: getattr(refolded, name) for name in HANDOVER_COLUMNS}
            )


def _rebuild_agent(agent_id: Any) -> int:
    fold = _fold(agent_id)
    with connection.cursor() as cursor:
        # Versions are history (a trigger refuses to delete them): a rebuild may (0011).
        cursor.execute("SELECT set_config(%s, 'on', true)", [REBUILD_SETTING])
        WorkingState.objects.filter(agent_id=agent_id).delete()
        cursor.execute("SELECT set_config(%s, 'off', true)", [REBUILD_SETTING])
    Handover.objects.filter(agent_id=agent_id).delete()
    existing = {t.pk: t for t in Thread.objects.filter(agent_id=agent_id)}
    changed, new = [], []
    for thread_id, columns in fold.threads.items():
        thread = existing.get(thread_id) or Thread(id=thread_id, agent_id=agent_id)
        for name, value in columns.items():
            setattr(thread, name, value)
        (changed if thread_id in existing else new).append(thread)
    Thread.objects.bulk_update(changed, THREAD_COLUMNS, batch_size=BATCH)
    Thread.objects.bulk_create(new, batch_size=BATCH)
    WorkingState.objects.bulk_create(fold.states.values(), batch_size=BATCH)
    Handover.objects.bulk_create(fold.handovers.values(), batch_size=BATCH)
    left = set(existing) - set(fold.threads)
    if left:
        logger.warning(
            "working state rebuild: %d thread(s) of agent %s named by no surviving event, kept",
            len(left),
            agent_id,
        )
    return fold.applied
