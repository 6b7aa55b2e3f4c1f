"""Erasure in semantic memory: facts, entities and their names, predicates, fact texts.

Called by the forgetting app, inside its transaction, with the events being
erased (their payloads still readable). A fact version is a function of the
events of its (subject, predicate) pair: the pairs an erased event touched are
dropped and replayed from their surviving events (projection.replay_pairs),
so what remains is what a rebuild of the whole ledger makes of it — a later
version the erased claim had closed is believed again, and a retraction of an
erased claim has nothing left to act on. An entity whose creation is erased
takes every claim about it, and every claim pointing at it, along.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from ledger.erasure import ErasureScope, finding
from ledger.models import Event
from piper.tenancy.models import Agent

from . import projection as p
from .fact_texts import all_pairs, fact_texts_refresh
from .models import AuthorityPolicy, Entity, EntityAlias, Fact, FactEvidence, FactText, Predicate

FACTS = "facts"
ENTITIES = "entities"
ALIASES = "entity_aliases"
PREDICATES = "predicates"
FACT_TEXTS = "fact_texts"
# Rows kept but changed: versions made again by the replay, texts re-rendered.
FACTS_REPLAYED = "facts.replayed"
FACT_TEXTS_RERENDERED = "fact_texts.rerendered"
POLICY = "authority_policy"
PAIRS_NOTE = "facts.pairs"  # the pairs the erased events made versions of

Pair = tuple[uuid.UUID, uuid.UUID]


def events_about(*, agent: Agent, entity: Entity) -> set[uuid.UUID]:
    """Everything the ledger holds about an entity: its creation, its names,
    every event of a pair it is the subject of, every claim naming it as object."""
    ids = {entity.source_event_id}
    ids |= set(
        Event.objects.filter(
            agent=agent, event_type=p.ALIAS_ADDED, payload__entity_id=str(entity.pk)
        )
        .order_by()
        .values_list("id", flat=True)
    )
    ids |= set(
        EntityAlias.objects.filter(agent=agent, entity=entity).values_list(
            "source_event_id", flat=True
        )
    )
    # Every version about it, and every version pointing at it (the relations'
    # versions keep their object, whatever their status).
    versions = Fact.objects.filter(agent=agent).filter(Q(subject=entity) | Q(object_entity=entity))
    ids |= p.events_of_facts(agent.pk, list(versions.values_list("id", flat=True)))
    return ids


def expand(*, agent: Agent, event_ids: set[uuid.UUID], staged: RawSQL) -> set[uuid.UUID]:
    """The events that must go with `event_ids` (also `staged`, a subquery of
    them): all about an entity whose creation goes, and every claim of a
    predicate whose definition goes."""
    more: set[uuid.UUID] = set()
    for entity in Entity.objects.filter(agent=agent, source_event_id__in=staged):
        more |= events_about(agent=agent, entity=entity)
    for predicate_id in Predicate.objects.filter(
        agent=agent, source_event_id__in=staged
    ).values_list("pk", flat=True):
        versions = Fact.objects.filter(agent=agent, predicate_id=predicate_id).values_list(
            "id", flat=True
        )
        more |= p.events_of_facts(agent.pk, list(versions))
        more |= set(
            Event.objects.filter(
                agent=agent, event_type=p.PREDICATE_DEFINED, payload__predicate_id=str(predicate_id)
            )
            .order_by()
            .values_list("id", flat=True)
        )
    return more - event_ids


def _pairs_touched(agent: Agent, events: list[Event]) -> set[Pair]:
    """The (subject, predicate) pairs these events made versions of: an
    assertion names its pair, every other act names the version it acts on
    (read while the payloads are still there)."""
    pairs: set[Pair] = set()
    fact_ids: set[str] = set()
    for event in events:
        payload = event.payload
        if event.event_type == p.ASSERTED:
            pairs.add((uuid.UUID(payload["subject_id"]), uuid.UUID(payload["predicate_id"])))
        elif event.event_type in p.TARGETING:
            fact_ids.add(payload["fact_id"])
    if fact_ids:
        pairs |= set(
            Fact.objects.filter(agent=agent, pk__any=list(fact_ids))
            .values_list("subject_id", "predicate_id")
            .distinct()
        )
    return pairs


def erase(scope: ErasureScope) -> None:
    """Remove what `scope.event_ids` made here; note every removed id in the scope."""
    agent, erased = scope.agent, scope.erased_events()
    events = list(
        Event.objects.filter(agent=agent, pk__in=erased, event_type__in=list(p.HANDLERS)).order_by(
            "seq"
        )
    )
    if not events:
        return
    by_type: dict[str, list[Event]] = {}
    for event in events:
        by_type.setdefault(event.event_type, []).append(event)
    pairs = _pairs_touched(agent, events)
    scope.notes[PAIRS_NOTE] = set(pairs)
    erased_entities = list(Entity.objects.filter(agent=agent, source_event_id__in=erased))
    erased_predicates = list(Predicate.objects.filter(agent=agent, source_event_id__in=erased))
    redefined = {
        uuid.UUID(e.payload["predicate_id"]) for e in by_type.get(p.PREDICATE_DEFINED, [])
    } - {pr.pk for pr in erased_predicates}
    if p.AUTHORITY_ORDER_SET in by_type:
        # The order decided every contest: every pair is replayed.
        pairs |= set(all_pairs(agent.pk))
    if redefined:
        pairs |= set(
            Fact.objects.filter(agent=agent, predicate_id__any=redefined)
            .values_list("subject_id", "predicate_id")
            .distinct()
        )

    # The erased words, before they go: values, names, predicate texts.
    for event in events:
        payload = event.payload
        words = [
            v
            for v in (
                payload.get("value"),
                payload.get("name"),
                payload.get("alias"),
                payload.get("description"),
                *payload.get("aliases", []),
            )
            if isinstance(v, str)
        ]
        scope.add_texts(words)
        scope.values.update(w.strip() for w in words if len(w.strip()) >= 2)
    for vector in FactText.objects.filter(
        agent=agent, subject_id__any={s for s, _ in pairs}, embedding__isnull=False
    ).values_list("embedding", flat=True)[:20]:
        scope.add_vector(FactText._meta.db_table, vector)

    # Names: aliases made by an erased event, and (below) erased entities.
    aliases = EntityAlias.objects.filter(agent=agent, source_event_id__in=erased)
    renamed = set(aliases.values_list("entity_id", flat=True))
    scope.note_removed(ALIASES, aliases.order_by("id").values_list("id", flat=True))
    aliases.delete()

    # Facts: replay every touched pair from what survives.
    dropped, made = p.replay_pairs(agent_id=agent.pk, pairs=pairs, without=erased)
    kept = set(made)
    scope.note_removed(FACTS, [f for f in dropped if f not in kept])
    scope.note_removed(FACTS_REPLAYED, [f for f in made if f in set(dropped)])

    # Definitions: a redefinition erased leaves the last surviving one in force.
    for predicate_id in redefined:
        latest = (
            Event.objects.filter(
                agent=agent,
                event_type=p.PREDICATE_DEFINED,
                payload__predicate_id=str(predicate_id),
                redacted_at__isnull=True,
            )
            .exclude(pk__in=erased)
            .order_by("-seq")
            .first()
        )
        if latest is not None:
            p.apply(latest)
    if p.AUTHORITY_ORDER_SET in by_type:
        latest = (
            Event.objects.filter(
                agent=agent, event_type=p.AUTHORITY_ORDER_SET, redacted_at__isnull=True
            )
            .exclude(pk__in=erased)
            .order_by("-seq")
            .first()
        )
        if latest is not None:
            p.apply(latest)
        else:
            scope.note_removed(POLICY, [str(agent.pk)])
            AuthorityPolicy.objects.filter(agent=agent).delete()

    # Entities and predicates whose creation is erased: their facts went above
    # (expand() erased every event about them).
    if erased_entities:
        entity_ids = [e.pk for e in erased_entities]
        names = EntityAlias.objects.filter(entity_id__any=entity_ids)
        scope.add_texts(names.values_list("alias", flat=True))
        scope.note_removed(ALIASES, names.order_by("id").values_list("id", flat=True))
        names.delete()
        FactText.objects.filter(agent=agent, subject_id__any=entity_ids).delete()
        scope.note_removed(ENTITIES, entity_ids)
        Entity.objects.filter(pk__any=entity_ids).delete()
    if erased_predicates:
        predicate_ids = [pr.pk for pr in erased_predicates]
        FactText.objects.filter(agent=agent, predicate_id__any=predicate_ids).delete()
        scope.note_removed(PREDICATES, predicate_ids)
        Predicate.objects.filter(pk__any=predicate_ids).delete()

    # Texts: re-rendered for every pair whose versions or names changed.
    if renamed:
        pairs |= set(
            Fact.objects.filter(agent=agent, subject_id__any=renamed)
            .values_list("subject_id", "predicate_id")
            .distinct()
        )
    _refresh_texts(scope, agent, pairs)


def _refresh_texts(scope: ErasureScope, agent: Agent, pairs: Iterable[Pair]) -> None:
    pairs = sorted(set(pairs))
    before = dict(
        FactText.objects.filter(agent=agent, subject_id__any={s for s, _ in pairs}).values_list(
            "id", "subject_id"
        )
    )
    result = fact_texts_refresh(agent_id=agent.pk, pairs=pairs, embed="later")
    after = set(FactText.objects.filter(pk__any=list(before)).values_list("id", flat=True))
    scope.note_removed(FACT_TEXTS, [pk for pk in before if pk not in after])
    scope.note_removed(FACT_TEXTS_RERENDERED, [pk for pk in result.changed if pk in after])


def residue(scope: ErasureScope) -> list[dict]:
    """What of the erased material is still here: rows made from an erased
    event, versions or names of erased entities, and erased words in the
    rendered texts that no surviving fact justifies."""
    agent, erased = scope.agent, scope.erased_events()
    erased_entities = scope.removed_ids(ENTITIES)
    # A version made from an erased event can only be one of the pairs that
    # event named (facts are not indexed by their event: searched pair by pair).
    versions = p.pair_facts(agent.pk, scope.notes.get(PAIRS_NOTE, ()))
    findings = [
        finding(
            FACTS,
            "made_from_erased_event",
            Fact.objects.filter(pk__any=versions, source_event_id__in=erased),
        ),
        finding(
            FACTS,
            "evidence_from_erased_event",
            FactEvidence.objects.filter(fact_id__any=versions, event_id__in=erased),
        ),
        finding(
            ENTITIES,
            "made_from_erased_event",
            Entity.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            ALIASES,
            "made_from_erased_event",
            EntityAlias.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            PREDICATES,
            "made_from_erased_event",
            Predicate.objects.filter(agent=agent, source_event_id__in=erased),
        ),
        finding(
            FACTS,
            "about_erased_entity",
            Fact.objects.filter(agent=agent).filter(
                Q(subject_id__any=erased_entities) | Q(object_entity_id__any=erased_entities)
            ),
        ),
        finding(
            FACT_TEXTS,
            "about_erased_entity",
            FactText.objects.filter(agent=agent, subject_id__any=erased_entities),
        ),
    ]
    # A rendered text holds the names and believed values of its pair: an
    # erased string there is residue unless a surviving fact or name holds it.
    stale: list[str] = []
    probes = sorted(set(scope.text_probes()) | scope.values)
    if probes:
        with connection.cursor() as cursor:
            cursor.execute(_STALE_TEXTS, {"agent": agent.pk, "probes": probes})
            stale = sorted({str(row[0]) for row in cursor.fetchall()})
    findings.append(
        {
            "projection": FACT_TEXTS,
            "check": "erased_words",
            "found": len(stale),
            "sample": stale[:10],
        }
    )
    return findings


# Rendered texts holding an erased string that nothing surviving of their own
# pair vouches for: not a value of the pair's facts, not a name of its subject
# or of an entity its facts point at, not its predicate's name or description.
# Found through the full-text index, then the exact string; one statement.
_STALE_TEXTS = f"""
SELECT hit.id FROM unnest(%(probes)s::text[]) AS probe(p), LATERAL (
    SELECT t.id, t.subject_id, t.predicate_id FROM {FactText._meta.db_table} t
     WHERE t.agent_id = %(agent)s
       AND t.search_vector @@ phraseto_tsquery('english', probe.p)
       AND strpos(lower(t.text), lower(probe.p)) > 0
     LIMIT 50) AS hit
 WHERE NOT EXISTS (
        SELECT 1 FROM {Fact._meta.db_table} f
         WHERE f.agent_id = %(agent)s AND f.subject_id = hit.subject_id
           AND f.predicate_id = hit.predicate_id
           AND strpos(lower(coalesce(f.object_value::text, '')), lower(probe.p)) > 0)
   AND NOT EXISTS (
        SELECT 1 FROM {EntityAlias._meta.db_table} a
         WHERE a.agent_id = %(agent)s AND strpos(lower(a.alias), lower(probe.p)) > 0
           AND (a.entity_id = hit.subject_id OR a.entity_id IN (
                SELECT f.object_entity_id FROM {Fact._meta.db_table} f
                 WHERE f.agent_id = %(agent)s AND f.subject_id = hit.subject_id
                   AND f.predicate_id = hit.predicate_id AND f.object_entity_id IS NOT NULL)))
   AND NOT EXISTS (
        SELECT 1 FROM {Entity._meta.db_table} e
         WHERE e.id IN (SELECT f.object_entity_id FROM {Fact._meta.db_table} f
                         WHERE f.agent_id = %(agent)s AND f.subject_id = hit.subject_id
                           AND f.predicate_id = hit.predicate_id)
           AND strpos(lower(e.name), lower(probe.p)) > 0)
   AND NOT EXISTS (
        SELECT 1 FROM {Predicate._meta.db_table} pr
         WHERE pr.id = hit.predicate_id
           AND strpos(lower(pr.name || ' ' || replace(pr.name, '_', ' ') || ' ' || pr.description),
                      lower(probe.p)) > 0)
"""
