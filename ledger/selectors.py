"""Reads of the ledger. Every query is scoped to one agent."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from piper.errors import NotFound
from piper.tenancy.models import Agent

from .hashing import LABELS, event_hash, event_payload_hash
from .models import GENESIS_HASH, ChainHead, Event, Source, Tombstone


def event_list(
    *,
    agent: Agent,
    event_types: list[str] | None = None,
    session_id: str | None = None,
    actor: str | None = None,
    occurred_after: datetime | None = None,
    occurred_before: datetime | None = None,
    recorded_after: datetime | None = None,
    recorded_before: datetime | None = None,
) -> QuerySet[Event]:
    """Events on both time axes; '_after' bounds are inclusive, '_before' exclusive."""
    qs = Event.objects.filter(agent=agent)
    if event_types:
        qs = qs.filter(event_type__in=event_types)
    if session_id is not None:
        qs = qs.filter(session_id=session_id)
    if actor is not None:
        qs = qs.filter(actor=actor)
    if occurred_after:
        qs = qs.filter(occurred_at__gte=occurred_after)
    if occurred_before:
        qs = qs.filter(occurred_at__lt=occurred_before)
    if recorded_after:
        qs = qs.filter(recorded_at__gte=recorded_after)
    if recorded_before:
        qs = qs.filter(recorded_at__lt=recorded_before)
    return qs


def event_get(*, agent: Agent, event_id: uuid.UUID) -> Event:
    """One event of this agent; another agent's event raises NotFound like a missing one."""
    event = Event.objects.filter(agent=agent, pk=event_id).first()
    if event is None:
        raise NotFound(f"event {event_id} not found")
    return event


def source_list(*, agent: Agent) -> QuerySet[Source]:
    """Newest first by the time-ordered id (created_at ties within a transaction)."""
    return Source.objects.filter(agent=agent).order_by("-id")


def source_get(*, agent: Agent, source_id: uuid.UUID) -> Source:
    source = Source.objects.filter(agent=agent, pk=source_id).first()
    if source is None:
        raise NotFound(f"source {source_id} not found")
    return source


@dataclass(frozen=True)
class ChainBreak:
    seq: int
    event_id: str
    reason: str


@dataclass(frozen=True)
class ChainReport:
    agent_id: str
    agent_name: str
    events_checked: int
    first_break: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.first_break is None


PAYLOAD_ALTERED = {
    1: "payload does not match payload_hash (payload altered)",
    2: "payload or labels do not match payload_hash (payload, actor, session or source_ref altered)",
}
REDACTED_WITHOUT_PURGE = "marked redacted without a purge (payload altered or no tombstone)"


def chain_verify(*, agent: Agent, chunk_size: int = 5000) -> ChainReport:
    """Walk the agent's chain in seq order and report the first broken link.

    Checks, per event: seq continuity, prev_hash = previous hash, the payload
    against payload_hash (a purged event: an empty payload and a tombstone),
    and the event's own hash; finally that the chain head agrees with the
    last event.
    """
    expected_prev, expected_seq, checked = GENESIS_HASH, 1, 0
    # Appends go on while the chain is walked: the head is read first, and
    # only the events it covers are walked (an append commits its events and
    # the head together, so every event up to the head is visible by then).
    # Read after the walk, a head moved on by an append looked like removed events.
    head = ChainHead.objects.filter(agent=agent).first()
    # redacted_at is outside the hash (the purge sets it), so a redaction
    # counts only with the tombstone the purge path writes beside it. A purge
    # commits both together, so tombstones are read after the events: read
    # before, a purge in between looked like a redaction without one.
    redacted: dict[uuid.UUID, dict] = {}  # event id -> where, in seq order

    def report(brk: ChainBreak | None) -> ChainReport:
        tombstoned = set(
            Tombstone.objects.filter(agent=agent, event_id__in=list(redacted)).values_list(
                "event_id", flat=True
            )
            if redacted
            else ()
        )
        # Each redacted event came before `brk`: the first without its tombstone is the break.
        unpurged = next((w for pk, w in redacted.items() if pk not in tombstoned), None)
        if unpurged is not None:
            brk = ChainBreak(**unpurged, reason=REDACTED_WITHOUT_PURGE)
        return ChainReport(str(agent.pk), agent.name, checked, brk)

    events = Event.objects.filter(agent=agent)
    if head is not None:
        events = events.filter(seq__lte=head.last_seq)
    for event in events.order_by("seq").iterator(chunk_size=chunk_size):
        checked += 1
        where = {"seq": event.seq, "event_id": str(event.pk)}
        if event.seq != expected_seq:
            return report(
                ChainBreak(
                    **where,
                    reason=f"seq {event.seq} where {expected_seq} was expected (missing event)",
                )
            )
        if event.prev_hash != expected_prev:
            return report(
                ChainBreak(**where, reason="prev_hash does not match the previous event's hash")
            )
        if event.redacted_at is None and event_payload_hash(event) != event.payload_hash:
            return report(ChainBreak(**where, reason=PAYLOAD_ALTERED[event.hash_version]))
        if event.redacted_at is not None and (
            event.payload != {}
            or event.payload_salt
            or (event.hash_version > 1 and any(getattr(event, n) for n in LABELS))
        ):
            return report(ChainBreak(**where, reason=REDACTED_WITHOUT_PURGE))
        if event.redacted_at is not None:
            redacted[event.pk] = where
        if event_hash(event) != event.hash:
            return report(
                ChainBreak(**where, reason="hash does not match the event's fields (event altered)")
            )
        expected_prev, expected_seq = event.hash, expected_seq + 1
    if head is not None and (head.last_seq, head.last_hash) != (expected_seq - 1, expected_prev):
        return report(
            ChainBreak(
                seq=head.last_seq,
                event_id="",
                reason=f"chain head says seq {head.last_seq} but the chain ends at {expected_seq - 1} (events removed)",
            )
        )
    if head is not None:
        # An event past the head is an append committed since (its head moved
        # with it, so reading the head again after it shows that), or a row
        # written around the chain.
        beyond = Event.objects.filter(agent=agent, seq__gt=head.last_seq).order_by("seq").first()
        if beyond is not None and (
            ChainHead.objects.filter(agent=agent).values_list("last_seq", flat=True).first()
            == head.last_seq
        ):
            return report(
                ChainBreak(
                    seq=beyond.seq,
                    event_id=str(beyond.pk),
                    reason=f"seq {beyond.seq} lies past the chain head ({head.last_seq}): "
                    "not appended through the chain",
                )
            )
    return report(None)
