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
    # Where the walked chain ends: an anchor to keep outside the database.
    last_seq: int = 0
    last_hash: str = GENESIS_HASH

    @property
    def ok(self) -> bool:
        return self.first_break is None


PAYLOAD_ALTERED = {
    1: "payload does not match payload_hash (payload altered)",
    2: "payload or labels do not match payload_hash (payload, actor, session or source_ref altered)",
}
REDACTED_WITHOUT_PURGE = "marked redacted without a purge (payload altered or no tombstone)"
PREV_HASH_MISMATCH = "prev_hash does not match the previous event's hash"
# When an event's own fields still hash to its stored hash, it is intact and the
# link is broken by the event before it: say so, and point there.
PREVIOUS_REWRITTEN = (
    "the next event does not chain to this one's hash: this event was rewritten "
    "(its hash recomputed)"
)
PREVIOUS_INSERTED = (
    "the next event chains to the event before this one: this event was inserted "
    "(the ones after it renumbered)"
)


def _broken_link(event: Event, previous: Event | None, before_previous_hash: str) -> ChainBreak:
    """Where a prev_hash mismatch points: the event, or the one before it."""
    if previous is not None and event.prev_hash == before_previous_hash:
        return ChainBreak(seq=previous.seq, event_id=str(previous.pk), reason=PREVIOUS_INSERTED)
    if previous is not None and event_hash(event) == event.hash:
        return ChainBreak(seq=previous.seq, event_id=str(previous.pk), reason=PREVIOUS_REWRITTEN)
    return ChainBreak(seq=event.seq, event_id=str(event.pk), reason=PREV_HASH_MISMATCH)


def _purged_by(agent: Agent, event_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The events among `event_ids` whose tombstone names a purge event of this
    agent that lists them: a tombstone written around the purge path names a
    purge that did not take the event."""
    tombstones = list(
        Tombstone.objects.filter(agent=agent, event_id__in=event_ids).values_list(
            "event_id", "purge_event_id"
        )
    )
    purges = {
        pk: (payload, redacted_at)
        for pk, payload, redacted_at in Event.objects.filter(
            agent=agent, pk__in={purge for _, purge in tombstones}
        ).values_list("pk", "payload", "redacted_at")
    }
    confirmed = set()
    for event_id, purge_id in tombstones:
        payload, redacted_at = purges.get(purge_id, (None, None))
        # A purge event erased in its turn lists nothing any more: its own
        # tombstone (checked the same way) is what is left to trust.
        listed = isinstance(payload, dict) and str(event_id) in payload.get("event_ids", ())
        if listed or (payload is not None and redacted_at is not None):
            confirmed.add(event_id)
    return confirmed


def chain_verify(
    *, agent: Agent, chunk_size: int = 5000, anchor: tuple[int, str] | None = None
) -> ChainReport:
    """Walk the agent's chain in seq order and report the first broken link.

    Checks, per event: seq continuity, prev_hash = previous hash, the payload
    against payload_hash (a purged event: an empty payload and a tombstone
    whose purge event lists it), and the event's own hash; finally that the
    chain head agrees with the last event. A broken link whose event is
    intact points at the event before it (rewritten, or inserted).

    What it cannot see alone: the chain is keyless, so someone who can write
    the database and recomputes every hash from the tampered event on, the
    chain head included (or removes the last events and rewinds the head),
    leaves a chain that verifies. `anchor` — a (seq, hash) this chain had,
    kept outside the database by an earlier run (`ledger_verify --anchors`) —
    catches that for every event up to the anchor (docs/reliability.md).
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
        tombstoned = _purged_by(agent, list(redacted)) if redacted else set()
        # Each redacted event came before `brk`: the first without its tombstone is the break.
        unpurged = next((w for pk, w in redacted.items() if pk not in tombstoned), None)
        if unpurged is not None:
            brk = ChainBreak(**unpurged, reason=REDACTED_WITHOUT_PURGE)
        return ChainReport(str(agent.pk), agent.name, checked, brk, expected_seq - 1, expected_prev)

    events = Event.objects.filter(agent=agent)
    if head is not None:
        events = events.filter(seq__lte=head.last_seq)
    previous, before_previous_hash = None, ""
    anchored_hash = None  # the hash the chain has at the anchor's seq
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
            return report(_broken_link(event, previous, before_previous_hash))
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
        if anchor is not None and event.seq == anchor[0]:
            anchored_hash = event.hash
        before_previous_hash, previous = expected_prev, event
        expected_prev, expected_seq = event.hash, expected_seq + 1
    if head is not None and previous is not None and head.last_seq == previous.seq:
        if head.last_hash != previous.hash:
            return report(
                ChainBreak(
                    seq=previous.seq,
                    event_id=str(previous.pk),
                    reason="the chain head's hash is not the last event's: this event was "
                    "rewritten (its hash recomputed)",
                )
            )
    elif head is not None and (head.last_seq, head.last_hash) != (
        expected_seq - 1,
        expected_prev,
    ):
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
    if anchor is not None and anchor[0] > 0 and anchored_hash != anchor[1]:
        seq = anchor[0]
        return report(
            ChainBreak(
                seq=seq,
                event_id="",
                reason=f"the anchor kept outside the database holds seq {seq} with hash "
                f"{anchor[1][:12]}…, "
                + (
                    f"but the chain ends at seq {expected_seq - 1} (events removed, head rewound)"
                    if anchored_hash is None
                    else f"but seq {seq} hashes to {anchored_hash[:12]}… now (the chain was "
                    f"rewritten at or before seq {seq}, its hashes recomputed)"
                ),
            )
        )
    return report(None)
