"""The facts projection: how each ledger event changes entities, predicates and facts.

Services validate a request, append its event, then call `apply(event)`; the
rebuild replays the same function over the ledger. Everything a handler
writes is derived from the event alone (ids from the event id, times from its
recorded_at, provenance from its columns) and from the projection as earlier
events left it — so a replay reproduces the projection row for row.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from ledger.models import Event
from piper.provenance import AUTHORITY_ORDER, authority_rank

from .models import (
    AuthorityPolicy,
    Cardinality,
    Entity,
    EntityAlias,
    Fact,
    FactEvidence,
    FactOrigin,
    FactStatus,
    Predicate,
)

ENTITY_CREATED = "facts.entity_created"
ALIAS_ADDED = "facts.alias_added"
PREDICATE_DEFINED = "facts.predicate_defined"
AUTHORITY_ORDER_SET = "facts.authority_order_set"
ASSERTED = "facts.asserted"
RETRACTED = "facts.retracted"
CORRECTED = "facts.corrected"
ENDED = "facts.ended"
CONTEST_RESOLVED = "facts.contest_resolved"


class Outcome:
    CREATED = "created"  # a new believed version
    CONFIRMED = "confirmed"  # same value already believed: evidence added, no version
    CONTESTED = "contested"  # lower authority than what is believed: stored, not in force
    RETRACTED = "retracted"
    CORRECTED = "corrected"
    ENDED = "ended"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


@dataclass
class Applied:
    """What an event did to the projection."""

    outcome: str
    fact: Fact | None = None
    superseded: list[Fact] = field(default_factory=list)
    resolved_contests: list[Fact] = field(default_factory=list)
    obj: Any = None  # the entity, alias, predicate or policy an event made


def derived_id(event: Event, n: int) -> uuid.UUID:
    """The n-th id an event creates: the same on every replay."""
    return uuid.uuid5(event.pk, str(n))


class _Ids:
    def __init__(self, event: Event):
        self.event, self.n = event, 0

    def next(self) -> uuid.UUID:
        self.n += 1
        return derived_id(self.event, self.n)


def lock_subject_predicate(
    agent_id: uuid.UUID, subject_id: uuid.UUID, predicate_id: uuid.UUID
) -> None:
    """Serialise writers of one (agent, subject, predicate) until the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            [f"facts:{agent_id}:{subject_id}:{predicate_id}"],
        )


def authority_order_for(agent_id: uuid.UUID) -> tuple[str, ...]:
    policy = AuthorityPolicy.objects.filter(agent_id=agent_id).only("order").first()
    if policy is None:
        return AUTHORITY_ORDER
    # Levels an agent left out rank below every level it listed, in default order.
    return tuple(policy.order) + tuple(a for a in AUTHORITY_ORDER if a not in policy.order)


def parse_time(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


# ------------------------------------------------------------------ entities & co.


def _entity_created(event: Event) -> Applied:
    p = event.payload
    entity = Entity.objects.create(
        id=uuid.UUID(p["entity_id"]),
        agent_id=event.agent_id,
        name=p["name"],
        entity_type=p["entity_type"],
        created_at=event.recorded_at,
        source_event=event,
    )
    ids = _Ids(event)
    EntityAlias.objects.bulk_create(
        [
            EntityAlias(
                id=ids.next(),
                agent_id=event.agent_id,
                entity=entity,
                alias=alias,
                created_at=event.recorded_at,
                source_event=event,
            )
            for alias in p["aliases"]
        ]
    )
    return Applied(Outcome.CREATED, obj=entity)


def _alias_added(event: Event) -> Applied:
    p = event.payload
    alias = EntityAlias.objects.create(
        id=derived_id(event, 1),
        agent_id=event.agent_id,
        entity_id=uuid.UUID(p["entity_id"]),
        alias=p["alias"],
        created_at=event.recorded_at,
        source_event=event,
    )
    return Applied(Outcome.CREATED, obj=alias)


def _predicate_defined(event: Event) -> Applied:
    p = event.payload
    fields = {
        "name": p["name"],
        "cardinality": p["cardinality"],
        "value_type": p["value_type"],
        "volatility_seconds": p["volatility_seconds"],
        "description": p["description"],
    }
    predicate, created = Predicate.objects.update_or_create(
        id=uuid.UUID(p["predicate_id"]),
        defaults=fields,
        create_defaults={
            **fields,
            "agent_id": event.agent_id,
            "created_at": event.recorded_at,
            "source_event": event,
        },
    )
    # The exclusion constraint reads cardinality from each row.
    Fact.objects.filter(predicate=predicate).exclude(
        single_valued=predicate.cardinality == Cardinality.ONE
    ).update(single_valued=predicate.cardinality == Cardinality.ONE)
    return Applied(Outcome.CREATED if created else Outcome.CONFIRMED, obj=predicate)


def _authority_order_set(event: Event) -> Applied:
    policy, _ = AuthorityPolicy.objects.update_or_create(
        agent_id=event.agent_id,
        defaults={
            "order": event.payload["order"],
            "updated_at": event.recorded_at,
            "source_event": event,
        },
    )
    return Applied(Outcome.CREATED, obj=policy)


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Claim:
    """A value for (subject, predicate) over [valid_from, valid_to), with provenance."""

    subject_id: uuid.UUID
    predicate: Predicate
    object_value: Any
    object_entity_id: uuid.UUID | None
    valid_from: datetime
    valid_to: datetime | None  # None: "until the next known change" (or open)
    authority: str
    confidence: float

    def same_object(self, fact: Fact) -> bool:
        if self.object_entity_id is not None:
            return fact.object_entity_id == self.object_entity_id
        return fact.object_entity_id is None and fact.object_value == self.object_value


def _overlaps(fact: Fact, start: datetime, end: datetime | None) -> bool:
    return (end is None or fact.valid_from < end) and (
        fact.valid_to is None or fact.valid_to > start
    )


def _covers(fact: Fact, start: datetime, end: datetime | None) -> bool:
    if fact.valid_from > start:
        return False
    if fact.valid_to is None:
        return True
    return end is not None and fact.valid_to >= end


class _Writer:
    """Collects one event's changes to the facts of one subject+predicate."""

    def __init__(self, event: Event):
        self.event = event
        self.ids = _Ids(event)
        self.now = event.recorded_at
        self.order = authority_order_for(event.agent_id)

    def rank(self, authority: str) -> int:
        return authority_rank(authority, self.order)

    def believed(self, claim_or_fact: Claim | Fact) -> list[Fact]:
        c = claim_or_fact
        predicate_id = c.predicate.pk if isinstance(c, Claim) else c.predicate_id
        return list(
            Fact.objects.select_for_update()
            .filter(
                agent_id=self.event.agent_id,
                subject_id=c.subject_id,
                predicate_id=predicate_id,
                status=FactStatus.ACTIVE,
                superseded_at__isnull=True,
            )
            .order_by("valid_from")
        )

    def new_fact(
        self, *, like: Claim | Fact, valid_from, valid_to, status, origin, fact_id=None, **extra
    ) -> Fact:
        if isinstance(like, Claim):
            values = {
                "subject_id": like.subject_id,
                "predicate_id": like.predicate.pk,
                "object_value": None if like.object_entity_id else like.object_value,
                "object_entity_id": like.object_entity_id,
                "single_valued": like.predicate.cardinality == Cardinality.ONE,
                "authority": like.authority,
                "confidence": like.confidence,
                "source_event": self.event,
                "last_confirmed_at": self.now,
            }
        else:  # a remainder keeps everything of the version it came from
            values = {
                name: getattr(like, name)
                for name in (
                    "subject_id",
                    "predicate_id",
                    "object_value",
                    "object_entity_id",
                    "single_valued",
                    "authority",
                    "confidence",
                    "source_event_id",
                    "last_confirmed_at",
                )
            }
        values.update(extra)
        fact = Fact.objects.create(
            id=fact_id or self.ids.next(),
            agent_id=self.event.agent_id,
            valid_from=valid_from,
            valid_to=valid_to,
            recorded_at=self.now,
            status=status,
            origin=origin,
            **values,
        )
        if isinstance(like, Claim):
            FactEvidence.objects.create(fact=fact, event=self.event, recorded_at=self.now)
        return fact

    def close(self, fact: Fact, *, status: str, superseded_by_id: uuid.UUID | None) -> None:
        # superseded_by may name a row inserted later in this transaction:
        # Django's foreign keys are deferred to commit.
        fact.status, fact.superseded_at, fact.superseded_by_id = status, self.now, superseded_by_id
        Fact.objects.filter(pk=fact.pk).update(
            status=status, superseded_at=self.now, superseded_by_id=superseded_by_id
        )

    def confirm(self, fact: Fact) -> None:
        FactEvidence.objects.get_or_create(
            fact=fact, event=self.event, defaults={"recorded_at": self.now}
        )
        fact.last_confirmed_at = self.now
        Fact.objects.filter(pk=fact.pk).update(last_confirmed_at=self.now)

    def supersede(
        self, claim: Claim, overlapping: list[Fact], start, end, *, origin: str
    ) -> Applied:
        """Close `overlapping`, keep the parts of them outside [start, end), insert the claim.

        Closing comes first: the exclusion constraint checks every row as it
        is written, so the new version may only appear once the old is closed.
        """
        new_id = self.ids.next()
        for old in overlapping:
            self.close(old, status=FactStatus.SUPERSEDED, superseded_by_id=new_id)
        new = self.new_fact(
            like=claim,
            valid_from=start,
            valid_to=end,
            status=FactStatus.ACTIVE,
            origin=origin,
            fact_id=new_id,
            supersedes=overlapping[0] if overlapping else None,
        )
        remainders: list[tuple[Fact, Fact]] = []
        for old in overlapping:
            if old.valid_from < start:
                remainders.append(
                    (
                        old,
                        self.new_fact(
                            like=old,
                            valid_from=old.valid_from,
                            valid_to=start,
                            status=FactStatus.ACTIVE,
                            origin=FactOrigin.SPLIT,
                            supersedes=old,
                        ),
                    )
                )
            if end is not None and (old.valid_to is None or old.valid_to > end):
                remainders.append(
                    (
                        old,
                        self.new_fact(
                            like=old,
                            valid_from=end,
                            valid_to=old.valid_to,
                            status=FactStatus.ACTIVE,
                            origin=FactOrigin.SPLIT,
                            supersedes=old,
                        ),
                    )
                )
        resolved = self.settle_contests(overlapping, new, start, end, remainders)
        return Applied(
            Outcome.CREATED, fact=new, superseded=overlapping, resolved_contests=resolved
        )

    def settle_contests(self, closed, new, start, end, remainders) -> list[Fact]:
        """A claim of equal or higher authority resolves the contests it overlaps;
        contests of the parts it left alone follow those parts."""
        if not closed:
            return []
        resolved = []
        open_contests = Fact.objects.select_for_update().filter(
            contests__in=closed, status=FactStatus.CONTESTED, superseded_at__isnull=True
        )
        for contest in open_contests:
            if _overlaps(contest, start, end):
                self.close(contest, status=FactStatus.CONTESTED, superseded_by_id=new.pk)
                resolved.append(contest)
                continue
            for old, part in remainders:
                if old.pk == contest.contests_id and _overlaps(
                    contest, part.valid_from, part.valid_to
                ):
                    Fact.objects.filter(pk=contest.pk).update(contests=part)
                    break
        return resolved

    def contest(self, claim: Claim, start, end, against: Fact) -> Applied:
        fact = self.new_fact(
            like=claim,
            valid_from=start,
            valid_to=end,
            status=FactStatus.CONTESTED,
            origin=FactOrigin.ASSERTED,
            contests=against,
        )
        return Applied(Outcome.CONTESTED, fact=fact)


def claim_from_event(event: Event, *, object_key: str = "value") -> Claim:
    p = event.payload
    predicate = Predicate.objects.get(pk=uuid.UUID(p["predicate_id"]))
    object_entity_id = p.get("object_entity_id")
    return Claim(
        subject_id=uuid.UUID(p["subject_id"]),
        predicate=predicate,
        object_value=p.get(object_key),
        object_entity_id=uuid.UUID(object_entity_id) if object_entity_id else None,
        valid_from=parse_time(p.get("valid_from")) or event.recorded_at,
        valid_to=parse_time(p.get("valid_to")),
        authority=event.authority,
        confidence=event.confidence,
    )


def _asserted(event: Event) -> Applied:
    claim = claim_from_event(event)
    lock_subject_predicate(event.agent_id, claim.subject_id, claim.predicate.pk)
    w = _Writer(event)
    believed = w.believed(claim)
    start = claim.valid_from
    if claim.predicate.cardinality == Cardinality.MANY:
        return _assert_many(w, claim, believed)
    # "Until the next change": late evidence never overwrites later knowledge.
    end = claim.valid_to
    if end is None:
        end = next((f.valid_from for f in believed if f.valid_from > start), None)
    overlapping = [f for f in believed if _overlaps(f, start, end)]
    covering_same = next(
        (f for f in overlapping if claim.same_object(f) and _covers(f, start, end)), None
    )
    if covering_same and w.rank(claim.authority) <= w.rank(covering_same.authority):
        w.confirm(covering_same)
        return Applied(Outcome.CONFIRMED, fact=covering_same)
    stronger = [f for f in overlapping if w.rank(f.authority) > w.rank(claim.authority)]
    if stronger:
        same = next((f for f in stronger if claim.same_object(f)), None)
        if same and _covers(same, start, end):
            w.confirm(same)
            return Applied(Outcome.CONFIRMED, fact=same)
        against = max(stronger, key=lambda f: (w.rank(f.authority), f.valid_from))
        return w.contest(claim, start, end, against)
    return w.supersede(claim, overlapping, start, end, origin=FactOrigin.ASSERTED)


def _assert_many(w: _Writer, claim: Claim, believed: list[Fact]) -> Applied:
    """Many values at a time: other values are untouched; the same value is
    confirmed, or merged with the versions of it that it overlaps."""
    start, end = claim.valid_from, claim.valid_to
    same = [f for f in believed if claim.same_object(f) and _overlaps(f, start, end)]
    covering = next((f for f in same if _covers(f, start, end)), None)
    if covering and w.rank(claim.authority) <= w.rank(covering.authority):
        w.confirm(covering)
        return Applied(Outcome.CONFIRMED, fact=covering)
    if same:
        start = min([start, *(f.valid_from for f in same)])
        ends = [end, *(f.valid_to for f in same)]
        end = None if any(e is None for e in ends) else max(ends)
    new_id = w.ids.next()
    for old in same:
        w.close(old, status=FactStatus.SUPERSEDED, superseded_by_id=new_id)
    new = w.new_fact(
        like=claim,
        valid_from=start,
        valid_to=end,
        status=FactStatus.ACTIVE,
        origin=FactOrigin.ASSERTED,
        fact_id=new_id,
        supersedes=same[0] if same else None,
    )
    return Applied(Outcome.CREATED, fact=new, superseded=same)


def _target(event: Event) -> tuple[_Writer, Fact]:
    fact = Fact.objects.select_related("predicate").get(pk=uuid.UUID(event.payload["fact_id"]))
    lock_subject_predicate(event.agent_id, fact.subject_id, fact.predicate_id)
    fact = Fact.objects.select_for_update().select_related("predicate").get(pk=fact.pk)
    return _Writer(event), fact


def _retracted(event: Event) -> Applied:
    w, fact = _target(event)
    status = FactStatus.CONTESTED if fact.status == FactStatus.CONTESTED else FactStatus.RETRACTED
    w.close(fact, status=status, superseded_by_id=None)
    return Applied(Outcome.RETRACTED, fact=fact)


def _corrected(event: Event) -> Applied:
    w, fact = _target(event)
    p = event.payload
    claim = Claim(
        subject_id=fact.subject_id,
        predicate=fact.predicate,
        object_value=p.get("value"),
        object_entity_id=uuid.UUID(p["object_entity_id"]) if p.get("object_entity_id") else None,
        valid_from=fact.valid_from,
        valid_to=fact.valid_to,
        authority=event.authority,
        confidence=event.confidence,
    )
    if w.rank(claim.authority) < w.rank(fact.authority):
        return w.contest(claim, fact.valid_from, fact.valid_to, fact)
    applied = w.supersede(
        claim, [fact], fact.valid_from, fact.valid_to, origin=FactOrigin.CORRECTED
    )
    applied.outcome = Outcome.CORRECTED
    return applied


def _ended(event: Event) -> Applied:
    w, fact = _target(event)
    valid_to = parse_time(event.payload["valid_to"])
    new_id = w.ids.next()
    w.close(fact, status=FactStatus.SUPERSEDED, superseded_by_id=new_id)
    new = w.new_fact(
        like=fact,
        valid_from=fact.valid_from,
        valid_to=valid_to,
        status=FactStatus.ACTIVE,
        origin=FactOrigin.ENDED,
        fact_id=new_id,
        supersedes=fact,
        source_event_id=event.pk,
        last_confirmed_at=w.now,
    )
    FactEvidence.objects.create(fact=new, event=event, recorded_at=w.now)
    return Applied(Outcome.ENDED, fact=new, superseded=[fact])


def _contest_resolved(event: Event) -> Applied:
    w, contested = _target(event)
    if not event.payload["accept"]:
        w.close(contested, status=FactStatus.CONTESTED, superseded_by_id=None)
        return Applied(Outcome.REJECTED, fact=contested)
    claim = Claim(
        subject_id=contested.subject_id,
        predicate=contested.predicate,
        object_value=contested.object_value,
        object_entity_id=contested.object_entity_id,
        valid_from=contested.valid_from,
        valid_to=contested.valid_to,
        authority=event.authority,  # the operator now vouches for it
        confidence=contested.confidence,
    )
    believed = w.believed(claim)
    overlapping = [f for f in believed if _overlaps(f, claim.valid_from, claim.valid_to)]
    applied = w.supersede(
        claim, overlapping, claim.valid_from, claim.valid_to, origin=FactOrigin.ACCEPTED
    )
    # Unless it was among the contests the new version just resolved, close it too.
    Fact.objects.filter(pk=contested.pk, superseded_at__isnull=True).update(
        superseded_at=w.now, superseded_by=applied.fact
    )
    applied.outcome = Outcome.ACCEPTED
    return applied


HANDLERS: dict[str, Callable[[Event], Applied]] = {
    ENTITY_CREATED: _entity_created,
    ALIAS_ADDED: _alias_added,
    PREDICATE_DEFINED: _predicate_defined,
    AUTHORITY_ORDER_SET: _authority_order_set,
    ASSERTED: _asserted,
    RETRACTED: _retracted,
    CORRECTED: _corrected,
    ENDED: _ended,
    CONTEST_RESOLVED: _contest_resolved,
}


def apply(event: Event) -> Applied:
    return HANDLERS[event.event_type](event)


PROJECTION_TABLES = (  # children first
    FactEvidence,
    Fact,
    EntityAlias,
    Entity,
    Predicate,
    AuthorityPolicy,
)


def clear(*, agent_id: uuid.UUID | None = None) -> None:
    """Delete the projection's rows (one agent's, or all) in plain SQL: the ORM
    would load every row to cascade, and there may be millions."""
    with connection.cursor() as cursor:
        for model in PROJECTION_TABLES:
            table = model._meta.db_table
            if agent_id is None:
                cursor.execute(f"DELETE FROM {table}")
            elif model is FactEvidence:
                cursor.execute(
                    f"DELETE FROM {table} WHERE fact_id IN (SELECT id FROM facts_fact WHERE agent_id = %s)",
                    [agent_id],
                )
            else:
                cursor.execute(f"DELETE FROM {table} WHERE agent_id = %s", [agent_id])


def rebuild(*, events: Iterable[Event], agent_id: uuid.UUID | None = None) -> int:
    """Clear the projection and replay `events` (in chain order). Returns events applied."""
    clear(agent_id=agent_id)
    count = 0
    for event in events:
        if event.event_type in HANDLERS:
            apply(event)
            count += 1
    return count
