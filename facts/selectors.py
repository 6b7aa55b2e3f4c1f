"""Every read of semantic memory, one function per query mode (DESIGN §4).

"Believed" means the system currently holds the version (status active, record
time still open); valid time says when it is true in the world. Vector
similarity never picks truth here: lookups are by entity and predicate.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.postgres.expressions import ArraySubquery
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Value
from django.db.models.functions import Lower
from django.utils import timezone

from ledger.models import Event
from piper.db import fetchall_prepared
from piper.errors import InvalidInput, NotFound
from piper.tenancy.models import Agent

from .models import Entity, EntityAlias, Fact, FactStatus, Predicate
from .projection import admission_for, authority_order_for

BELIEVED = Q(status=FactStatus.ACTIVE, superseded_at__isnull=True)
OPEN_CONTEST = Q(status=FactStatus.CONTESTED, superseded_at__isnull=True)


def _with_status(qs: QuerySet[Fact]) -> QuerySet[Fact]:
    """What every fact response needs for its memory_status, in one query: the
    related rows joined, the open contests against each version as an array."""
    open_contests = (
        Fact.objects.filter(OPEN_CONTEST, contests=OuterRef("pk"))
        .order_by("recorded_at")
        .values("pk")
    )
    return (
        qs.select_related("subject", "predicate", "object_entity", "source_event")
        .defer("source_event__payload")
        .annotate(open_contest_ids=ArraySubquery(open_contests))
    )


# ------------------------------------------------------------------------ entities


def entity_get(*, agent: Agent, entity_id: uuid.UUID, with_aliases: bool = True) -> Entity:
    entity = Entity.objects.filter(agent=agent, pk=entity_id)
    entity = (entity.prefetch_related("aliases") if with_aliases else entity).first()
    if entity is None:
        raise NotFound(f"entity {entity_id} not found")
    return entity


def alias_lookup(*, agent: Agent, name: str) -> QuerySet[EntityAlias]:
    """Aliases equal to `name` ignoring case, through the (agent, lower(alias))
    unique index. (alias__iexact compiles to UPPER(alias) = UPPER(…), which no
    index serves: a scan of the agent's aliases per lookup; docs/experiments.md.)"""
    return EntityAlias.objects.alias(lowered=Lower("alias")).filter(
        agent=agent, lowered=Lower(Value(name))
    )


def entity_resolve(*, agent: Agent, ref: str | uuid.UUID) -> Entity:
    """An entity by id, or by any of its names (case-insensitive)."""
    try:
        entity_id = ref if isinstance(ref, uuid.UUID) else uuid.UUID(str(ref))
    except ValueError:
        entity_id = None
    if entity_id is not None:
        return entity_get(agent=agent, entity_id=entity_id, with_aliases=False)
    alias = alias_lookup(agent=agent, name=ref).select_related("entity").first()
    if alias is None:
        raise NotFound(f"no entity named {ref!r}")
    return alias.entity


def entity_list(*, agent: Agent) -> QuerySet[Entity]:
    return Entity.objects.filter(agent=agent).prefetch_related("aliases").order_by("-id")


@dataclass(frozen=True)
class EntityMatch:
    entity: Entity
    alias: str
    similarity: float


def entity_search(*, agent: Agent, query: str, limit: int = 10) -> list[EntityMatch]:
    """Entities whose names resemble `query` (pg_trgm) or start with it, best
    first; an exact name first of all. One row per entity, its best name."""
    query = query.strip()
    if not query:
        raise InvalidInput("q must not be empty", details={"q": ["required"]})
    # The query is text, not a pattern: % and _ match only themselves.
    prefix = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT entity_id, alias, score FROM (
                SELECT DISTINCT ON (entity_id) entity_id, alias,
                       similarity(lower(alias), lower(%s)) AS score,
                       lower(alias) = lower(%s) AS exact
                  FROM facts_entityalias
                 WHERE agent_id = %s AND (lower(alias) %% lower(%s) OR lower(alias) LIKE %s)
                 ORDER BY entity_id, lower(alias) = lower(%s) DESC, score DESC
            ) best
            ORDER BY exact DESC, score DESC, entity_id
            LIMIT %s
            """,
            [query, query, agent.pk, query, prefix, query, limit],
        )
        rows = cursor.fetchall()
    entities = Entity.objects.in_bulk([r[0] for r in rows])
    return [EntityMatch(entities[r[0]], r[1], round(float(r[2]), 4)) for r in rows]


def predicate_get(*, agent: Agent, name: str) -> Predicate:
    predicate = Predicate.objects.filter(agent=agent, name=name).first()
    if predicate is None:
        raise NotFound(f"no predicate named {name!r}")
    return predicate


def predicate_list(*, agent: Agent) -> QuerySet[Predicate]:
    return Predicate.objects.filter(agent=agent).order_by("name")


def predicate_value_samples(*, agent: Agent, per_predicate: int = 8) -> dict[uuid.UUID, list]:
    """A few values stated under each of the agent's predicates (any version,
    relations left out): what kind of value a predicate holds, read off its data."""
    sql = f"""
        SELECT p.id, v.object_value::text
        FROM {Predicate._meta.db_table} p
        CROSS JOIN LATERAL (
            -- A bounded look: a relation's rows have no value to find.
            SELECT s.object_value FROM (
                SELECT f.object_value FROM {Fact._meta.db_table} f
                WHERE f.predicate_id = p.id LIMIT %(look)s
            ) s
            WHERE s.object_value IS NOT NULL
            LIMIT %(n)s
        ) v
        WHERE p.agent_id = %(agent)s
    """
    samples: dict[uuid.UUID, list] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, {"agent": agent.pk, "n": per_predicate, "look": 4 * per_predicate})
        for predicate_id, value in cursor.fetchall():
            samples.setdefault(predicate_id, []).append(json.loads(value))
    return samples


STATED_TOGETHER_SUBJECTS = 5000


def predicates_stated_together(
    *, agent: Agent, predicate_id: uuid.UUID, others: Iterable[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of `others` were ever stated about a subject that `predicate_id`
    was also stated about (any version, among up to `STATED_TOGETHER_SUBJECTS`
    of its subjects, so that the cost is bounded): two attributes, not one
    under two names."""
    subjects = Fact.objects.filter(agent=agent, predicate_id=predicate_id).values("subject_id")[
        :STATED_TOGETHER_SUBJECTS
    ]
    return set(
        Fact.objects.filter(agent=agent, predicate_id__in=list(others), subject_id__in=subjects)
        .values_list("predicate_id", flat=True)
        .distinct()
    )


# --------------------------------------------------------------------------- facts


def fact_get(*, agent: Agent, fact_id: uuid.UUID) -> Fact:
    fact = _with_status(Fact.objects.filter(agent=agent, pk=fact_id)).first()
    if fact is None:
        raise NotFound(f"fact {fact_id} not found")
    return fact


def _about(agent: Agent, subject: Entity, predicate: Predicate | None) -> QuerySet[Fact]:
    qs = Fact.objects.filter(agent=agent, subject=subject)
    return qs.filter(predicate=predicate) if predicate is not None else qs


def _valid_at(moment: datetime) -> Q:
    return Q(valid_from__lte=moment) & (Q(valid_to__isnull=True) | Q(valid_to__gt=moment))


def facts_as_of(
    *, agent: Agent, subject: Entity, predicate: Predicate | None, valid_time: datetime
) -> QuerySet[Fact]:
    """True at valid_time, as currently believed."""
    qs = _about(agent, subject, predicate).filter(BELIEVED & _valid_at(valid_time))
    return _with_status(qs).order_by("predicate__name", "valid_from", "id")


def facts_believed_at(
    *,
    agent: Agent,
    pairs: Iterable[tuple[uuid.UUID, uuid.UUID]] = (),
    subjects: Iterable[uuid.UUID] = (),
    valid_time: datetime,
) -> QuerySet[Fact]:
    """True at valid_time, as currently believed, for each (subject id, predicate
    id) pair and for every predicate of each subject in `subjects`: one query,
    by subject and predicate name."""
    wanted = Q(subject_id__in=list(subjects))
    for subject_id, predicate_id in pairs:
        wanted |= Q(subject_id=subject_id, predicate_id=predicate_id)
    qs = Fact.objects.filter(wanted, BELIEVED & _valid_at(valid_time), agent=agent)
    return _with_status(qs).order_by("subject__name", "predicate__name", "valid_from", "id")


def facts_current(*, agent: Agent, subject: Entity, predicate: Predicate | None) -> QuerySet[Fact]:
    """Valid now, as currently believed."""
    return facts_as_of(agent=agent, subject=subject, predicate=predicate, valid_time=timezone.now())


# The lookup agents make most — one subject, one predicate, at a moment — as
# one statement: subject (by id, or by name through the lower(alias) index),
# predicate by name, the believed versions with everything their
# memory_status needs. Through the ORM the same answer took three queries, most
# of the time compiling SQL (docs/benchmarks.md). It is prepared once per
# connection: planning five joins costs more than running them.
_LOOKUP_PARTS = (
    ("f", Fact, ()),
    ("s", Entity, ()),
    ("p", Predicate, ()),
    ("o", Entity, ()),
    ("e", Event, ("payload",)),  # deferred, as _with_status does
)
_LOOKUP_SQL: dict[bool, tuple[str, list]] = {}


def _lookup_sql(by_id: bool) -> tuple[str, list]:
    if by_id not in _LOOKUP_SQL:
        layout, columns = [], []
        for alias, model, skip in _LOOKUP_PARTS:
            fields = [f for f in model._meta.concrete_fields if f.attname not in skip]
            layout.append((model, [f.attname for f in fields], fields))
            columns += [f'{alias}."{f.column}"' for f in fields]
        subject = (
            "%(ref)s::uuid"
            if by_id
            else "(SELECT a.entity_id FROM facts_entityalias a"
            " WHERE a.agent_id = %(agent)s AND lower(a.alias) = lower(%(ref)s))"
        )
        sql = f"""
            SELECT {", ".join(columns)},
                   ARRAY(SELECT c.id FROM facts_fact c
                          WHERE c.contests_id = f.id AND c.status = 'contested'
                            AND c.superseded_at IS NULL ORDER BY c.recorded_at)
              FROM facts_fact f
              JOIN facts_predicate p ON p.id = f.predicate_id
              JOIN facts_entity s ON s.id = f.subject_id
              JOIN ledger_event e ON e.id = f.source_event_id
              LEFT JOIN facts_entity o ON o.id = f.object_entity_id
             WHERE f.agent_id = %(agent)s AND f.subject_id = {subject}
               AND p.agent_id = %(agent)s AND p.name = %(predicate)s
               AND f.status = 'active' AND f.superseded_at IS NULL
               AND f.valid_from <= %(at)s AND (f.valid_to IS NULL OR f.valid_to > %(at)s)
             ORDER BY f.valid_from, f.id
        """
        _LOOKUP_SQL[by_id] = (sql, layout)
    return _LOOKUP_SQL[by_id]


def facts_valid_at_by_ref(
    *, agent: Agent, subject_ref: str, predicate_name: str, valid_time: datetime | None = None
) -> tuple[Entity, Predicate, list[Fact]]:
    """What as_of / current answer for one predicate, from the references the
    API receives. Raises NotFound for an unknown subject or predicate. The
    facts come with subject, predicate and object entity loaded and their open
    contests and claim event (its payload deferred)."""
    valid_time = valid_time or timezone.now()
    try:
        uuid.UUID(str(subject_ref))
        by_id = True
    except ValueError:
        by_id = False
    sql, layout = _lookup_sql(by_id)
    params = {"agent": agent.pk, "ref": str(subject_ref), "predicate": predicate_name}
    params["at"] = valid_time
    rows = fetchall_prepared(sql, params)
    if not rows:  # nothing believed then — or an unknown name: the slow path says which
        subject = entity_resolve(agent=agent, ref=subject_ref)
        return subject, predicate_get(agent=agent, name=predicate_name), []
    facts = []
    for row in rows:
        objects, at = [], 0
        for model, names, fields in layout:
            values = list(row[at : at + len(names)])
            at += len(names)
            for n, field in enumerate(fields):
                if values[n] is not None and hasattr(field, "from_db_value"):
                    values[n] = field.from_db_value(values[n], None, connection)
            objects.append(None if values[0] is None else model.from_db("default", names, values))
        fact, subject, predicate, object_entity, event = objects
        Fact.subject.field.set_cached_value(fact, subject)
        Fact.predicate.field.set_cached_value(fact, predicate)
        Fact.object_entity.field.set_cached_value(fact, object_entity)
        Fact.source_event.field.set_cached_value(fact, event)
        fact.open_contest_ids = list(row[at])
        facts.append(fact)
    return facts[0].subject, facts[0].predicate, facts


def facts_as_known_at(
    *,
    agent: Agent,
    subject: Entity,
    predicate: Predicate | None,
    valid_time: datetime,
    record_time: datetime,
) -> QuerySet[Fact]:
    """What the system believed at record_time about valid_time.

    A version was believed from recorded_at until superseded_at; contested
    claims were never believed, so they never appear here.
    """
    believed_then = (
        ~Q(status=FactStatus.CONTESTED)
        & Q(recorded_at__lte=record_time)
        & (Q(superseded_at__isnull=True) | Q(superseded_at__gt=record_time))
    )
    qs = _about(agent, subject, predicate).filter(believed_then & _valid_at(valid_time))
    return _with_status(qs).order_by("predicate__name", "valid_from", "id")


def fact_chain(*, agent: Agent, subject: Entity, predicate: Predicate) -> QuerySet[Fact]:
    """Every version of subject+predicate ever recorded — believed, superseded,
    retracted and contested — in record order, with their links."""
    return _with_status(_about(agent, subject, predicate)).order_by(
        "recorded_at", "valid_from", "id"
    )


def contested_queue(*, agent: Agent) -> QuerySet[Fact]:
    """Open contests, oldest first: what an operator has to settle."""
    return _with_status(Fact.objects.filter(agent=agent).filter(OPEN_CONTEST)).order_by(
        "recorded_at", "id"
    )


# --------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class Path:
    entities: list[Entity]
    facts: list[Fact]


MAX_HOPS = 4


def graph_paths(
    *,
    agent: Agent,
    start: Entity,
    end: Entity | None = None,
    min_hops: int = 1,
    max_hops: int = 3,
    predicates: list[Predicate] | None = None,
    valid_time: datetime | None = None,
    limit: int = 50,
) -> list[Path]:
    """Paths of relations from `start` (to `end`, if given), believed and valid at
    valid_time (default now), as one recursive SQL query.

    `predicates`, when given, is the predicate of each hop in order and fixes
    the path length. No entity is visited twice in one path. Each path comes
    with its facts as evidence. Shortest paths first.
    """
    if predicates:
        min_hops = max_hops = len(predicates)
    if not 1 <= min_hops <= max_hops <= MAX_HOPS:
        raise InvalidInput(
            f"hops must satisfy 1 <= min_hops <= max_hops <= {MAX_HOPS}",
            details={"max_hops": [f"at most {MAX_HOPS}"]},
        )
    moment = valid_time or timezone.now()
    predicate_ids = [p.pk for p in predicates] if predicates else None
    edge = """
        f.agent_id = %(agent)s AND f.object_entity_id IS NOT NULL
        AND f.status = 'active' AND f.superseded_at IS NULL
        AND f.valid_from <= %(at)s AND (f.valid_to IS NULL OR f.valid_to > %(at)s)
    """
    sql = f"""
        WITH RECURSIVE walk(depth, node, nodes, facts) AS (
            SELECT 1, f.object_entity_id, ARRAY[f.subject_id, f.object_entity_id], ARRAY[f.id]
              FROM facts_fact f
             WHERE {edge} AND f.subject_id = %(start)s
               AND f.object_entity_id <> %(start)s
               AND (%(preds)s::uuid[] IS NULL OR f.predicate_id = (%(preds)s::uuid[])[1])
            UNION ALL
            SELECT w.depth + 1, f.object_entity_id, w.nodes || f.object_entity_id, w.facts || f.id
              FROM walk w JOIN facts_fact f ON f.subject_id = w.node
             WHERE {edge} AND w.depth < %(max)s
               AND NOT f.object_entity_id = ANY(w.nodes)
               AND (%(preds)s::uuid[] IS NULL OR f.predicate_id = (%(preds)s::uuid[])[w.depth + 1])
        )
        SELECT nodes, facts FROM walk
         WHERE depth >= %(min)s AND (%(end)s::uuid IS NULL OR node = %(end)s::uuid)
         ORDER BY depth, nodes
         LIMIT %(limit)s
    """
    params = {
        "agent": agent.pk,
        "at": moment,
        "start": start.pk,
        "end": end.pk if end else None,
        "preds": predicate_ids,
        "min": min_hops,
        "max": max_hops,
        "limit": limit,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    entity_ids = {e for nodes, _ in rows for e in nodes}
    fact_ids = {f for _, facts in rows for f in facts}
    entities = Entity.objects.in_bulk(list(entity_ids))
    facts = _with_status(Fact.objects.filter(pk__in=fact_ids)).in_bulk()
    return [
        Path([entities[e] for e in nodes], [facts[f] for f in fact_list])
        for nodes, fact_list in rows
    ]


def authority_order(*, agent: Agent) -> tuple[str, ...]:
    """The agent's precedence of authorities in force, most trusted first."""
    return authority_order_for(agent.pk)


def admission_threshold(*, agent: Agent) -> str:
    """The least trusted authority believed on its own word ("" for every one)."""
    return admission_for(agent.pk)
