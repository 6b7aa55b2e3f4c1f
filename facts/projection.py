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
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils.dateparse import parse_datetime

from ledger.models import Event
from piper.canonical import canonical_json
from piper.locks import advisory_xact_locks
from piper.provenance import AUTHORITY_ORDER, Authority, authority_rank

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
    recorded_at: datetime | None = None  # the event's record time: what as_known_at keys on


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
    lock_pairs(agent_id, [(subject_id, predicate_id)])


def lock_pairs(agent_id: uuid.UUID, pairs: Iterable[tuple[Any, Any]]) -> None:
    """Take the advisory locks of many pairs in one statement, in lock order, so
    two batches touching the same pairs cannot deadlock (piper.locks: a bounded
    number of locks however many pairs)."""
    advisory_xact_locks(f"facts:{agent_id}", (f"{s}:{p}" for s, p in pairs))


def admission_for(agent_id: uuid.UUID) -> str:
    """The agent's admission threshold (AuthorityPolicy.admit_from), or "" for none."""
    return (
        AuthorityPolicy.objects.filter(agent_id=agent_id)
        .values_list("admit_from", flat=True)
        .first()
        or ""
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


def _entity_created(event: Event, store: Store) -> Applied:
    p = event.payload
    entity = Entity(
        id=uuid.UUID(p["entity_id"]),
        agent_id=event.agent_id,
        name=p["name"],
        entity_type=p["entity_type"],
        created_at=event.recorded_at,
        source_event=event,
    )
    ids = _Ids(event)
    store.add_entity(
        entity,
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
        ],
    )
    return Applied(Outcome.CREATED, obj=entity)


def _alias_added(event: Event, store: Store) -> Applied:
    p = event.payload
    alias = EntityAlias(
        id=derived_id(event, 1),
        agent_id=event.agent_id,
        entity_id=uuid.UUID(p["entity_id"]),
        alias=p["alias"],
        created_at=event.recorded_at,
        source_event=event,
    )
    store.add_entity(None, [alias])
    return Applied(Outcome.CREATED, obj=alias)


def _predicate_defined(event: Event, store: Store) -> Applied:
    p = event.payload
    fields = {
        "name": p["name"],
        "cardinality": p["cardinality"],
        "value_type": p["value_type"],
        "volatility_seconds": p["volatility_seconds"],
        "description": p["description"],
        "aliases": p.get("aliases", []),  # events before aliases existed have none
        "examples": p.get("examples", []),  # nor examples
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
    if created:
        # Nothing was stated with it yet: the store's cache stays good (a batch that
        # defines a predicate keeps the versions it preloaded for its claims).
        return Applied(Outcome.CREATED, obj=predicate)
    store.forget()  # cached versions carry the old cardinality
    # The exclusion constraint reads cardinality from each row.
    Fact.objects.filter(predicate=predicate).exclude(
        single_valued=predicate.cardinality == Cardinality.ONE
    ).update(single_valued=predicate.cardinality == Cardinality.ONE)
    return Applied(Outcome.CONFIRMED, obj=predicate)


def _authority_order_set(event: Event, store: Store) -> Applied:
    store.orders.pop(event.agent_id, None)
    store.admissions.pop(event.agent_id, None)
    policy, _ = AuthorityPolicy.objects.update_or_create(
        agent_id=event.agent_id,
        defaults={
            "order": event.payload["order"],
            "admit_from": event.payload.get("admit_from", ""),
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
    # The value tries to instruct whoever reads it (piper.safety, recorded in the event).
    instruction_like: bool = False

    def same_object(self, fact: Fact) -> bool:
        if self.object_entity_id is not None:
            return fact.object_entity_id == self.object_entity_id
        # As JSON, not Python: true is not 1, and [1] is not [true].
        return fact.object_entity_id is None and canonical_json(
            fact.object_value
        ) == canonical_json(self.object_value)


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


Pair = tuple[uuid.UUID, uuid.UUID, uuid.UUID]  # agent, subject, predicate

OPEN_STATUSES = (FactStatus.ACTIVE, FactStatus.CONTESTED)


def _update_versions(facts: list[Fact]) -> None:
    """Write what a batch changed on existing versions in one statement
    (Django's bulk_update compiles a CASE per row and field: 50x slower)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE facts_fact AS f
               SET status = v.status, superseded_at = v.superseded_at,
                   superseded_by_id = v.superseded_by_id, contests_id = v.contests_id,
                   last_confirmed_at = v.last_confirmed_at
              FROM unnest(%s::uuid[], %s::text[], %s::timestamptz[], %s::uuid[], %s::uuid[],
                          %s::timestamptz[])
                   AS v(id, status, superseded_at, superseded_by_id, contests_id, last_confirmed_at)
             WHERE f.id = v.id
            """,
            [
                [f.pk for f in facts],
                [f.status for f in facts],
                [f.superseded_at for f in facts],
                [f.superseded_by_id for f in facts],
                [f.contests_id for f in facts],
                [f.last_confirmed_at for f in facts],
            ],
        )


@dataclass
class PairState:
    """The open versions of one (agent, subject, predicate): believed values in
    valid-time order, and the contests still open against them."""

    believed: list[Fact] = field(default_factory=list)
    contests: list[Fact] = field(default_factory=list)
    # Believed versions that ended at or before this moment were not loaded
    # (a batch asserting from T never touches them); None: all are loaded.
    loaded_from: datetime | None = None


class Store:
    """A unit of work over the facts a batch of events touches.

    Applying events one at a time would cost a handful of round trips each;
    the store loads the open versions of every (subject, predicate) a batch
    touches in one query, lets each event change them in memory — so a later
    event in the batch sees an earlier one's effect — and writes the net
    result in a few statements at flush(): new entities and aliases (INSERT),
    closes and re-links (UPDATE), new versions (INSERT), evidence (INSERT). Updates go first, so the exclusion
    constraint only ever sees the final, non-overlapping set.

    Callers hold the advisory lock of every pair they touch (or are the
    rebuild, which runs alone), so the cached state cannot go stale.
    """

    def __init__(self) -> None:
        self.pairs: dict[Pair, PairState] = {}
        self.facts: dict[uuid.UUID, Fact] = {}
        self.inserted: dict[uuid.UUID, Fact] = {}
        self.dirty: dict[uuid.UUID, Fact] = {}
        self.evidence: list[FactEvidence] = []
        self.entities: list[Entity] = []
        self.aliases: list[EntityAlias] = []
        self.predicates: dict[uuid.UUID, Predicate] = {}
        self.orders: dict[uuid.UUID, tuple[str, ...]] = {}
        self.admissions: dict[uuid.UUID, str] = {}

    # reads ---------------------------------------------------------------

    def predicate(self, predicate_id: uuid.UUID) -> Predicate:
        if predicate_id not in self.predicates:
            self.predicates[predicate_id] = Predicate.objects.get(pk=predicate_id)
        return self.predicates[predicate_id]

    def authority_order(self, agent_id: uuid.UUID) -> tuple[str, ...]:
        if agent_id not in self.orders:
            self.orders[agent_id] = authority_order_for(agent_id)
        return self.orders[agent_id]

    def admission(self, agent_id: uuid.UUID) -> str:
        if agent_id not in self.admissions:
            self.admissions[agent_id] = admission_for(agent_id)
        return self.admissions[agent_id]

    def preload(
        self,
        agent_id: uuid.UUID,
        pairs: Iterable[tuple[uuid.UUID, uuid.UUID]],
        since: datetime | None = None,
    ) -> None:
        """Load the open versions of many (subject, predicate) pairs in one query.

        With `since`, believed versions that ended at or before it are left out:
        a claim valid from `since` on never touches them, and a long history
        would otherwise be read in full for every batch (open contests are
        always loaded: they are few, and may lie anywhere).
        """
        wanted = {(agent_id, s, p) for s, p in pairs} - self.pairs.keys()
        if not wanted:
            return
        for key in wanted:
            self.pairs[key] = PairState(loaded_from=since)
        rows = Fact.objects.filter(
            agent_id=agent_id,
            subject_id__in={s for _, s, _ in wanted},
            predicate_id__in={p for _, _, p in wanted},
            status__in=OPEN_STATUSES,
            superseded_at__isnull=True,
        )
        if since is not None:
            rows = rows.filter(
                Q(status=FactStatus.CONTESTED) | Q(valid_to__isnull=True) | Q(valid_to__gt=since)
            )
        for fact in rows.order_by("valid_from", "recorded_at", "id"):
            key = (agent_id, fact.subject_id, fact.predicate_id)
            if key in wanted:
                self._remember(key, fact)

    def preload_from(
        self, agent_id: uuid.UUID, starts: dict[tuple[uuid.UUID, uuid.UUID], datetime]
    ) -> None:
        """preload() with a moment per pair: each pair's believed versions still
        valid after its own start (and every open contest), in one statement —
        a batch whose claims spread over a year reads ~one version per pair,
        not the year's history of every pair."""
        wanted = {pair: at for pair, at in starts.items() if (agent_id, *pair) not in self.pairs}
        if not wanted:
            return
        for (s, p_), at in wanted.items():
            self.pairs[(agent_id, s, p_)] = PairState(loaded_from=at)
        keys = list(wanted)
        rows = Fact.objects.raw(
            f"""
            SELECT f.* FROM {Fact._meta.db_table} f
              JOIN unnest(%s::uuid[], %s::uuid[], %s::timestamptz[]) AS w(s, p, since)
                ON f.subject_id = w.s AND f.predicate_id = w.p
             WHERE f.agent_id = %s AND f.status = ANY(%s) AND f.superseded_at IS NULL
               AND (f.status = %s OR f.valid_to IS NULL OR f.valid_to > w.since)
             ORDER BY f.valid_from, f.recorded_at, f.id
            """,
            [
                [s for s, _ in keys],
                [p_ for _, p_ in keys],
                [wanted[k] for k in keys],
                agent_id,
                list(OPEN_STATUSES),
                FactStatus.CONTESTED,
            ],
        )
        for fact in rows:
            self._remember((agent_id, fact.subject_id, fact.predicate_id), fact)

    def state(
        self,
        agent_id: uuid.UUID,
        subject_id: uuid.UUID,
        predicate_id: uuid.UUID,
        since: datetime | None = None,
    ) -> PairState:
        """The pair's open versions — at least those still valid after `since`
        (all, when since is None)."""
        key = (agent_id, subject_id, predicate_id)
        if key not in self.pairs:
            self.preload(agent_id, [(subject_id, predicate_id)], since)
            return self.pairs[key]
        state = self.pairs[key]
        if state.loaded_from is not None and (since is None or since < state.loaded_from):
            # Read the earlier versions too. None of them is in memory, so none
            # has been changed by this batch: they can simply be added.
            earlier = Fact.objects.filter(
                agent_id=agent_id,
                subject_id=subject_id,
                predicate_id=predicate_id,
                status=FactStatus.ACTIVE,
                superseded_at__isnull=True,
                valid_to__lte=state.loaded_from,
            )
            if since is not None:
                earlier = earlier.filter(valid_to__gt=since)
            for fact in earlier:
                if fact.pk not in self.facts:
                    self._remember(key, fact)
            state.loaded_from = since
        return state

    def fact(self, fact_id: uuid.UUID) -> Fact:
        """One version, the same instance the pair state holds if it is open."""
        if fact_id in self.facts:
            return self.facts[fact_id]
        fact = Fact.objects.get(pk=fact_id)
        self.state(fact.agent_id, fact.subject_id, fact.predicate_id)
        return self.facts.setdefault(fact_id, fact)

    def _remember(self, key: Pair, fact: Fact) -> None:
        self.facts[fact.pk] = fact
        state = self.pairs[key]
        if fact.superseded_at is None and fact.status == FactStatus.ACTIVE:
            state.believed.append(fact)
            state.believed.sort(key=lambda f: f.valid_from)
        elif fact.superseded_at is None and fact.status == FactStatus.CONTESTED:
            state.contests.append(fact)

    # writes --------------------------------------------------------------

    def add(self, fact: Fact) -> Fact:
        self.inserted[fact.pk] = fact
        self._remember((fact.agent_id, fact.subject_id, fact.predicate_id), fact)
        return fact

    def change(self, fact: Fact, **values: Any) -> None:
        for name, value in values.items():
            setattr(fact, name, value)
        if fact.pk not in self.inserted:
            self.dirty[fact.pk] = fact

    def close(
        self, fact: Fact, *, status: str, superseded_by_id: uuid.UUID | None, at: datetime
    ) -> None:
        state = self.pairs.get((fact.agent_id, fact.subject_id, fact.predicate_id))
        if state is not None:
            state.believed = [f for f in state.believed if f.pk != fact.pk]
            state.contests = [f for f in state.contests if f.pk != fact.pk]
        self.change(fact, status=status, superseded_at=at, superseded_by_id=superseded_by_id)

    def add_evidence(self, fact: Fact, event: Event) -> None:
        self.evidence.append(
            FactEvidence(
                id=uuid.uuid5(event.pk, f"evidence:{fact.pk}"),
                fact_id=fact.pk,
                event_id=event.pk,
                recorded_at=event.recorded_at,
            )
        )

    def add_entity(self, entity: Entity | None, aliases: list[EntityAlias]) -> None:
        """Names wait for flush() too: a batch naming 1,000 new people is two
        INSERTs, not 2,000 round trips."""
        if entity is not None:
            self.entities.append(entity)
        self.aliases.extend(aliases)

    def flush(self) -> None:
        # Entities and their names first: the facts below refer to them.
        if self.entities:
            Entity.objects.bulk_create(self.entities, batch_size=1000)
        if self.aliases:
            EntityAlias.objects.bulk_create(self.aliases, batch_size=2000)
        self.entities, self.aliases = [], []
        if self.dirty:
            _update_versions(list(self.dirty.values()))
        if self.inserted:
            Fact.objects.bulk_create(list(self.inserted.values()), batch_size=1000)
        if self.evidence:
            FactEvidence.objects.bulk_create(self.evidence, batch_size=2000)
        self.dirty, self.inserted, self.evidence = {}, {}, []

    def forget(self) -> None:
        """Drop every cache (after flush), e.g. when a predicate's definition changed."""
        self.flush()
        self.pairs, self.facts, self.predicates, self.orders = {}, {}, {}, {}
        self.admissions = {}


class _Writer:
    """One event's changes to the facts of one subject+predicate, through the store."""

    def __init__(self, event: Event, store: Store):
        self.event, self.store = event, store
        self.ids = _Ids(event)
        self.now = event.recorded_at
        self.order = store.authority_order(event.agent_id)
        self.admit_from = store.admission(event.agent_id)

    def rank(self, authority: str) -> int:
        return authority_rank(authority, self.order)

    def unvetted(self, authority: str) -> bool:
        """Below the agent's admission threshold: never believed on its own word."""
        return bool(self.admit_from) and self.rank(authority) < self.rank(self.admit_from)

    def state(
        self, subject_id: uuid.UUID, predicate_id: uuid.UUID, since: datetime | None = None
    ) -> PairState:
        return self.store.state(self.event.agent_id, subject_id, predicate_id, since)

    def contests(self, subject_id: uuid.UUID, predicate_id: uuid.UUID) -> list[Fact]:
        """The pair's open contests (always loaded in full, whatever `since` was)."""
        key = (self.event.agent_id, subject_id, predicate_id)
        state = self.store.pairs.get(key) or self.state(subject_id, predicate_id)
        return state.contests

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
                "source_event_id": self.event.pk,
                "last_confirmed_at": self.now,
                "instruction_like": like.instruction_like,
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
                    "instruction_like",
                )
            }
        values.update(extra)
        fact = self.store.add(
            Fact(
                id=fact_id or self.ids.next(),
                agent_id=self.event.agent_id,
                valid_from=valid_from,
                valid_to=valid_to,
                recorded_at=self.now,
                status=status,
                origin=origin,
                **values,
            )
        )
        if isinstance(like, Claim):
            self.store.add_evidence(fact, self.event)
        return fact

    def close(self, fact: Fact, *, status: str, superseded_by_id: uuid.UUID | None) -> None:
        # superseded_by may name a row inserted later: Django's foreign keys
        # are deferred to commit.
        self.store.close(fact, status=status, superseded_by_id=superseded_by_id, at=self.now)

    def confirm(self, fact: Fact) -> None:
        self.store.add_evidence(fact, self.event)
        self.store.change(fact, last_confirmed_at=self.now)

    def supersede(
        self, claim: Claim, overlapping: list[Fact], start, end, *, origin: str
    ) -> Applied:
        """Close `overlapping`, keep the parts of them outside [start, end), insert the claim."""
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
            supersedes_id=overlapping[0].pk if overlapping else None,
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
                            supersedes_id=old.pk,
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
                            supersedes_id=old.pk,
                        ),
                    )
                )
        resolved = self.settle_contests(claim, overlapping, new, start, end, remainders)
        return Applied(
            Outcome.CREATED, fact=new, superseded=overlapping, resolved_contests=resolved
        )

    def settle_contests(self, claim, closed, new, start, end, remainders) -> list[Fact]:
        """A claim of equal or higher authority resolves the contests it overlaps —
        of the versions it closed, or of versions no longer believed at all
        (retracted); contests of the parts it left alone follow those parts."""
        closed_ids = {f.pk for f in closed}
        resolved = []
        for contest in list(self.contests(claim.subject_id, claim.predicate.pk)):
            if contest.contests_id in closed_ids:
                if _overlaps(contest, start, end):
                    resolved.append(contest)
                    continue
                for old, part in remainders:
                    if old.pk == contest.contests_id and _overlaps(
                        contest, part.valid_from, part.valid_to
                    ):
                        self.store.change(contest, contests_id=part.pk)
                        break
                continue
            target = self.store.fact(contest.contests_id) if contest.contests_id else None
            abandoned = target is None or target.superseded_at is not None
            if (
                abandoned
                and _overlaps(contest, start, end)
                and (target is None or self.rank(claim.authority) >= self.rank(target.authority))
            ):
                resolved.append(contest)
        for contest in resolved:
            self.close(contest, status=FactStatus.CONTESTED, superseded_by_id=new.pk)
        return resolved

    def contest(
        self, claim: Claim, start, end, against: Fact | None, *, origin: str = FactOrigin.ASSERTED
    ) -> Applied:
        """Store a claim that a stronger believed version outranks — or, against
        None, one that outranks nothing but may not be believed on its own word
        (below the admission threshold, or instruction-like text quarantined).
        The same claim again adds evidence to the open contest instead of
        queueing a copy."""
        against_id = against.pk if against is not None else None
        for open_contest in self.contests(claim.subject_id, claim.predicate.pk):
            if (
                open_contest.contests_id == against_id
                and claim.same_object(open_contest)
                and _covers(open_contest, start, end)
                and self.rank(claim.authority) <= self.rank(open_contest.authority)
            ):
                self.confirm(open_contest)
                return Applied(Outcome.CONTESTED, fact=open_contest)
        fact = self.new_fact(
            like=claim,
            valid_from=start,
            valid_to=end,
            status=FactStatus.CONTESTED,
            origin=origin,
            contests_id=against_id,
        )
        return Applied(Outcome.CONTESTED, fact=fact)

    def quarantined(self, claim: Claim) -> bool:
        """An instruction-like value from below a user's authority is never put in force:
        it is kept as a contested claim until a user, an operator or the system says so."""
        return claim.instruction_like and self.rank(claim.authority) < self.rank(
            Authority.USER_STATEMENT
        )


def claim_from_event(event: Event, store: Store) -> Claim:
    p = event.payload
    object_entity_id = p.get("object_entity_id")
    return Claim(
        subject_id=uuid.UUID(p["subject_id"]),
        predicate=store.predicate(uuid.UUID(p["predicate_id"])),
        object_value=p.get("value"),
        object_entity_id=uuid.UUID(object_entity_id) if object_entity_id else None,
        valid_from=parse_time(p.get("valid_from")) or event.recorded_at,
        valid_to=parse_time(p.get("valid_to")),
        authority=event.authority,
        confidence=event.confidence,
        instruction_like=_instruction_like(p),
    )


def _instruction_like(payload: dict) -> bool:
    """What the event recorded of the value's safety verdict (none: not flagged)."""
    return bool((payload.get("safety") or {}).get("instruction_like"))


def _quarantine(w: _Writer, claim: Claim, believed: list[Fact], start, end) -> Applied:
    """Store a quarantined claim as contested: against the strongest believed version
    it overlaps, or against nothing."""
    overlapping = [f for f in believed if _overlaps(f, start, end)]
    against = max(overlapping, key=lambda f: (w.rank(f.authority), f.valid_from), default=None)
    return w.contest(claim, start, end, against)


def _asserted(event: Event, store: Store) -> Applied:
    claim = claim_from_event(event, store)
    w = _Writer(event, store)
    believed = list(w.state(claim.subject_id, claim.predicate.pk, since=claim.valid_from).believed)
    start = claim.valid_from
    if w.quarantined(claim):
        return _quarantine(w, claim, believed, start, claim.valid_to)
    if claim.predicate.cardinality == Cardinality.MANY:
        return _assert_many(w, claim, believed)
    # "Until the next change": late evidence never overwrites later knowledge.
    # A known change is the next version's start — or, when the claim repeats
    # the value already believed at its start, that version's known end.
    end = claim.valid_to
    if end is None:
        end = next((f.valid_from for f in believed if f.valid_from > start), None)
        holding = next((f for f in believed if _covers(f, start, start)), None)
        if holding is not None and claim.same_object(holding) and holding.valid_to is not None:
            end = holding.valid_to if end is None else min(end, holding.valid_to)
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
    if w.unvetted(claim.authority):
        # Kept as evidence, not believed: contested against what it would replace (if anything).
        against = max(overlapping, key=lambda f: w.rank(f.authority)) if overlapping else None
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
    if w.unvetted(claim.authority):
        return w.contest(claim, start, end, covering)
    return _merge_many(w, claim, start, end, same, replaced=[], origin=FactOrigin.ASSERTED)


def _merge_many(
    w: _Writer, claim: Claim, start, end, same: list[Fact], *, replaced: list[Fact], origin: str
) -> Applied:
    """One version of the claim's value spanning [start, end) and every
    same-value version it overlaps, closing those and `replaced`. The merged
    version keeps the strongest authority and confidence among them."""
    if same:
        start = min([start, *(f.valid_from for f in same)])
        ends = [end, *(f.valid_to for f in same)]
        end = None if any(e is None for e in ends) else max(ends)
    strongest = max([claim, *same], key=lambda c: w.rank(c.authority))
    closing = [*replaced, *same]
    new_id = w.ids.next()
    for old in closing:
        w.close(old, status=FactStatus.SUPERSEDED, superseded_by_id=new_id)
    new = w.new_fact(
        like=claim,
        valid_from=start,
        valid_to=end,
        status=FactStatus.ACTIVE,
        origin=origin,
        fact_id=new_id,
        supersedes_id=closing[0].pk if closing else None,
        authority=strongest.authority,
        confidence=max(c.confidence for c in [claim, *same]),
    )
    return Applied(Outcome.CREATED, fact=new, superseded=closing)


def _target(event: Event, store: Store) -> tuple[_Writer, Fact]:
    """The version an event acts on, with its pair locked before its state is read."""
    fact_id = uuid.UUID(event.payload["fact_id"])
    if fact_id not in store.facts:
        subject_id, predicate_id = (
            Fact.objects.filter(pk=fact_id).values_list("subject_id", "predicate_id").get()
        )
        lock_subject_predicate(event.agent_id, subject_id, predicate_id)
    return _Writer(event, store), store.fact(fact_id)


def _retracted(event: Event, store: Store) -> Applied:
    w, fact = _target(event, store)
    status = FactStatus.CONTESTED if fact.status == FactStatus.CONTESTED else FactStatus.RETRACTED
    w.close(fact, status=status, superseded_by_id=None)
    return Applied(Outcome.RETRACTED, fact=fact)


def _corrected(event: Event, store: Store) -> Applied:
    w, fact = _target(event, store)
    p = event.payload
    claim = Claim(
        subject_id=fact.subject_id,
        predicate=store.predicate(fact.predicate_id),
        object_value=p.get("value"),
        object_entity_id=uuid.UUID(p["object_entity_id"]) if p.get("object_entity_id") else None,
        valid_from=fact.valid_from,
        valid_to=fact.valid_to,
        authority=event.authority,
        confidence=event.confidence,
        instruction_like=_instruction_like(p),
    )
    if w.rank(claim.authority) < w.rank(fact.authority) or w.quarantined(claim):
        return w.contest(claim, fact.valid_from, fact.valid_to, fact, origin=FactOrigin.CORRECTED)
    if claim.predicate.cardinality == Cardinality.MANY:
        # The right value may already be held: merge with it, never hold it twice.
        believed = w.state(claim.subject_id, claim.predicate.pk).believed
        same = [
            f
            for f in believed
            if f.pk != fact.pk
            and claim.same_object(f)
            and _overlaps(f, fact.valid_from, fact.valid_to)
        ]
        applied = _merge_many(
            w,
            claim,
            fact.valid_from,
            fact.valid_to,
            same,
            replaced=[fact],
            origin=FactOrigin.CORRECTED,
        )
    else:
        applied = w.supersede(
            claim, [fact], fact.valid_from, fact.valid_to, origin=FactOrigin.CORRECTED
        )
    applied.outcome = Outcome.CORRECTED
    return applied


def _ended(event: Event, store: Store) -> Applied:
    w, fact = _target(event, store)
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
        supersedes_id=fact.pk,
        source_event_id=event.pk,
        last_confirmed_at=w.now,
    )
    store.add_evidence(new, event)
    # Open contests challenged the value, which the ended version still holds.
    for contest in w.state(fact.subject_id, fact.predicate_id).contests:
        if contest.contests_id == fact.pk:
            store.change(contest, contests_id=new.pk)
    return Applied(Outcome.ENDED, fact=new, superseded=[fact])


def _contest_resolved(event: Event, store: Store) -> Applied:
    w, contested = _target(event, store)
    if not event.payload["accept"]:
        w.close(contested, status=FactStatus.CONTESTED, superseded_by_id=None)
        return Applied(Outcome.REJECTED, fact=contested)
    claim = Claim(
        subject_id=contested.subject_id,
        predicate=store.predicate(contested.predicate_id),
        object_value=contested.object_value,
        object_entity_id=contested.object_entity_id,
        valid_from=contested.valid_from,
        valid_to=contested.valid_to,
        authority=event.authority,  # the operator now vouches for it
        confidence=contested.confidence,
        instruction_like=contested.instruction_like,
    )
    believed = w.state(claim.subject_id, claim.predicate.pk).believed
    overlapping = [f for f in believed if _overlaps(f, claim.valid_from, claim.valid_to)]
    applied = w.supersede(
        claim, overlapping, claim.valid_from, claim.valid_to, origin=FactOrigin.ACCEPTED
    )
    # Unless it was among the contests the new version just resolved, close it too.
    if contested.superseded_at is None:
        w.close(contested, status=FactStatus.CONTESTED, superseded_by_id=applied.fact.pk)
    applied.outcome = Outcome.ACCEPTED
    return applied


HANDLERS: dict[str, Callable[[Event, Store], Applied]] = {
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


def apply(event: Event, store: Store | None = None) -> Applied:
    """Apply one event. With a store, its fact changes wait for store.flush()."""
    own_store = store is None
    store = store or Store()
    applied = HANDLERS[event.event_type](event, store)
    applied.recorded_at = event.recorded_at
    if own_store:
        store.flush()
    return applied


REBUILD_FLUSH_EVERY = 2000

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


def apply_surviving(event: Event, store: Store) -> Applied | None:
    """apply(), for a replay after an erasure: an erased event (its payload is
    gone) is skipped, and so is one acting on a version that only an erased
    event made — it has nothing left to act on. None when skipped."""
    if event.redacted_at is not None:
        return None
    try:
        return apply(event, store)
    except Fact.DoesNotExist:  # raised by _target before anything changed
        return None


def rebuild(*, events: Iterable[Event], agent_id: uuid.UUID | None = None) -> int:
    """Clear the projection and replay `events` (in chain order). Returns events applied."""
    clear(agent_id=agent_id)
    store, count = Store(), 0
    for event in events:
        if event.event_type in HANDLERS and apply_surviving(event, store) is not None:
            count += 1
            if count % REBUILD_FLUSH_EVERY == 0:
                store.forget()  # bound memory on a long ledger
    store.flush()
    return count


TARGETING = (RETRACTED, CORRECTED, ENDED, CONTEST_RESOLVED)


def pair_facts(
    agent_id: uuid.UUID, pairs: Iterable[tuple[uuid.UUID, uuid.UUID]]
) -> list[uuid.UUID]:
    """Every version (believed or not) of the agent's facts about these pairs."""
    pairs = sorted(set(pairs))
    if not pairs:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT f.id FROM {Fact._meta.db_table} f "
            "JOIN unnest(%s::uuid[], %s::uuid[]) AS w(s, p) "
            "ON f.subject_id = w.s AND f.predicate_id = w.p WHERE f.agent_id = %s",
            [[s for s, _ in pairs], [p_ for _, p_ in pairs], agent_id],
        )
        return [row[0] for row in cursor.fetchall()]


def events_of_facts(agent_id: uuid.UUID, fact_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The events these versions came from or were acted on by: each version's
    claim, its evidence, and every retraction, correction, end or contest
    resolution naming it."""
    if not fact_ids:
        return set()
    ids = set(Fact.objects.filter(pk__in=fact_ids).values_list("source_event_id", flat=True))
    ids |= set(FactEvidence.objects.filter(fact_id__in=fact_ids).values_list("event_id", flat=True))
    ids |= set(
        Event.objects.filter(
            agent_id=agent_id,
            event_type__in=TARGETING,
            payload__fact_id__in=[str(f) for f in fact_ids],
        )
        .order_by()
        .values_list("id", flat=True)
    )
    return ids


def replay_pairs(
    *,
    agent_id: uuid.UUID,
    pairs: Iterable[tuple[uuid.UUID, uuid.UUID]],
    without: Iterable[uuid.UUID] | RawSQL = (),
) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Drop every version of these (subject, predicate) pairs and replay, in
    chain order, the events they came from but those `without` (being erased)
    or already erased: the pairs are then what a rebuild of the surviving
    ledger would make of them.

    A pair's versions depend only on its own events, the predicate's
    definition and the agent's authority order at the time of each event;
    those are replayed too, into the store only (the rows keep their current
    definition, as the definitions' own events left them). Returns the ids of
    the versions dropped and of those made.
    """
    pairs = sorted(set(pairs))
    dropped = pair_facts(agent_id, pairs)
    event_ids = events_of_facts(agent_id, dropped)
    predicate_ids = {p_ for _, p_ in pairs}
    config = Event.objects.filter(agent_id=agent_id, redacted_at__isnull=True).filter(
        Q(event_type=AUTHORITY_ORDER_SET)
        | Q(
            event_type=PREDICATE_DEFINED,
            payload__predicate_id__in=[str(p_) for p_ in predicate_ids],
        )
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {FactEvidence._meta.db_table} WHERE fact_id = ANY(%s)", [dropped]
        )
        cursor.execute(f"DELETE FROM {Fact._meta.db_table} WHERE id = ANY(%s)", [dropped])
    store = _ReplayStore(agent_id)
    # Two lookups, each through its own index (ids; the few definition
    # events by type), then one read in chain order: an OR of the two makes
    # PostgreSQL scan the whole ledger.
    event_ids |= set(config.order_by().values_list("pk", flat=True))
    events = (
        Event.objects.filter(pk__any=event_ids, agent_id=agent_id, redacted_at__isnull=True)
        .exclude(pk__in=without if isinstance(without, RawSQL) else list(without))
        .order_by("seq")
    )
    for event in events.iterator(chunk_size=REBUILD_FLUSH_EVERY):
        if event.event_type == PREDICATE_DEFINED:
            store.define(event)
        elif event.event_type == AUTHORITY_ORDER_SET:
            store.order_from(event)
        else:
            apply_surviving(event, store)
    store.flush()
    made = pair_facts(agent_id, pairs)
    # The versions made now carry each moment's cardinality; a later
    # redefinition had set every version of its predicate to its own.
    for predicate_id in predicate_ids:
        predicate = Predicate.objects.filter(pk=predicate_id).only("cardinality").first()
        if predicate is not None:
            single = predicate.cardinality == Cardinality.ONE
            Fact.objects.filter(pk__any=made, predicate_id=predicate_id).exclude(
                single_valued=single
            ).update(single_valued=single)
    return dropped, made


class _ReplayStore(Store):
    """A store whose predicates and authority order are those of the moment
    being replayed, without writing the definitions back. Until the agent's
    first order event, the default order holds, as it did then."""

    def __init__(self, agent_id: uuid.UUID) -> None:
        super().__init__()
        self.orders[agent_id] = AUTHORITY_ORDER
        self.admissions[agent_id] = ""

    def define(self, event: Event) -> None:
        self.forget()  # cached versions carry the old cardinality
        p_ = event.payload
        self.predicates[uuid.UUID(p_["predicate_id"])] = Predicate(
            id=uuid.UUID(p_["predicate_id"]),
            agent_id=event.agent_id,
            name=p_["name"],
            cardinality=p_["cardinality"],
            value_type=p_["value_type"],
            volatility_seconds=p_["volatility_seconds"],
            description=p_["description"],
            aliases=p_.get("aliases", []),
            examples=p_.get("examples", []),
        )

    def order_from(self, event: Event) -> None:
        order = tuple(event.payload["order"])
        self.orders[event.agent_id] = order + tuple(a for a in AUTHORITY_ORDER if a not in order)
        self.admissions[event.agent_id] = event.payload.get("admit_from", "")

    def forget(self) -> None:
        # Keep the historical definitions, order and admission across the flush.
        predicates, orders, admissions = self.predicates, self.orders, self.admissions
        super().forget()
        self.predicates, self.orders, self.admissions = predicates, orders, admissions
