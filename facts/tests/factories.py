"""Factories and helpers for facts tests.

Every row is made through facts.services (which append ledger events and apply
them), never by Model.objects.create: a row nobody can replay is not a fact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import factory

from facts.models import AuthorityPolicy, Entity, EntityAlias, Fact, FactEvidence, Predicate
from facts.projection import Applied
from facts.services import (
    MISSING,
    ClaimInput,
    Provenance,
    entity_create,
    fact_assert,
    predicate_define,
)
from ledger.models import Event
from ledger.tests.helpers import ledger_state
from piper.provenance import Authority
from piper.tenancy.tests.factories import AgentFactory


def at(year: int, month: int = 1, day: int = 1, hour: int = 0) -> datetime:
    """A valid-time instant, in UTC."""
    return datetime(year, month, day, hour, tzinfo=UTC)


def by(authority: str, **fields: Any) -> Provenance:
    """Provenance with an explicit authority level."""
    return Provenance(authority=authority, **fields)


class EntityFactory(factory.Factory):
    """`EntityFactory(agent=…, name=…, aliases=[…])` creates through entity_create."""

    class Meta:
        model = Entity

    agent = factory.SubFactory(AgentFactory)
    name = factory.Sequence(lambda n: f"Entity {n}")
    entity_type = "thing"
    aliases = ()

    @classmethod
    def _create(cls, model_class, **fields):
        return entity_create(**fields)

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("entities only exist once created: use EntityFactory()")


class PredicateFactory(factory.Factory):
    """`PredicateFactory(agent=…, name=…, cardinality=…, value_type=…)` through predicate_define."""

    class Meta:
        model = Predicate

    agent = factory.SubFactory(AgentFactory)
    name = factory.Sequence(lambda n: f"predicate_{n}")
    cardinality = "one"
    value_type = "any"

    @classmethod
    def _create(cls, model_class, **fields):
        return predicate_define(**fields)

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("predicates only exist once defined: use PredicateFactory()")


def claim(
    agent,
    subject: Entity | str,
    predicate: Predicate | str,
    value: Any = MISSING,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    *,
    authority: str = Authority.AGENT_INFERENCE,
    object_entity: Entity | str | None = None,
    **fields: Any,
) -> Applied:
    """fact_assert with positional shorthand: `claim(agent, alice, "lives_in", "Paris", at(2020))`."""
    if isinstance(object_entity, Entity):
        object_entity = object_entity.pk
    provenance = fields.pop("provenance", None) or by(authority)
    return fact_assert(
        agent=agent,
        claim=ClaimInput(
            subject=subject.pk if isinstance(subject, Entity) else subject,
            predicate=predicate.name if isinstance(predicate, Predicate) else predicate,
            value=value,
            object_entity=object_entity,
            valid_from=valid_from,
            valid_to=valid_to,
            provenance=provenance,
            **fields,
        ),
    )


class FactFactory(factory.Factory):
    """`FactFactory(agent=…, subject=…, predicate="status", value=…)`: the version
    fact_assert made (or confirmed, or stored as contested)."""

    class Meta:
        model = Fact

    agent = factory.SubFactory(AgentFactory)
    subject = factory.SubFactory(EntityFactory, agent=factory.SelfAttribute("..agent"))
    predicate = factory.Sequence(lambda n: f"fact_predicate_{n}")
    value = factory.Sequence(lambda n: f"value {n}")
    valid_from = None
    valid_to = None
    authority = Authority.AGENT_INFERENCE

    @classmethod
    def _create(cls, model_class, *, agent, subject, predicate, value, **fields):
        return claim(agent, subject, predicate, value, **fields).fact

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("facts only exist once asserted: use FactFactory()")


# ------------------------------------------------------------------ exact rows


FACT_EVENTS = (
    "facts.asserted",
    "facts.retracted",
    "facts.corrected",
    "facts.ended",
    "facts.contest_resolved",
)


def record_times(agent) -> dict[datetime, str]:
    """The record time of each of the agent's fact writes (assert, retract, correct,
    end, resolve), named R1, R2, … in order: one per call, one per batch."""
    moments = (
        Event.objects.filter(agent=agent, event_type__in=FACT_EVENTS)
        .order_by("recorded_at")
        .values_list("recorded_at", flat=True)
        .distinct()
    )
    return {moment: f"R{n}" for n, moment in enumerate(moments, start=1)}


def _pair_rows(agent, subject: Entity, predicate: Predicate | str) -> list[Fact]:
    if isinstance(predicate, str):
        predicate = Predicate.objects.get(agent=agent, name=predicate)
    return list(
        Fact.objects.filter(agent=agent, subject=subject, predicate=predicate)
        .select_related("object_entity")
        .order_by("recorded_at", "valid_from", "status", "source_event__seq")
    )


def _object(fact: Fact) -> Any:
    return fact.object_value if fact.object_entity_id is None else fact.object_entity.name


def versions(agent, subject: Entity, predicate: Predicate | str) -> list[tuple]:
    """Every version of subject+predicate as a comparable tuple, in (record, valid) order:

    (value, valid_from, valid_to, recorded, superseded, status, origin, authority,
     supersedes, superseded_by, contests)

    record times are R-names (record_times) and links are indexes into this list
    (or "?" for a row of another pair), so a test states a whole chain exactly.
    """
    rows = _pair_rows(agent, subject, predicate)
    names = record_times(agent)
    index = {f.pk: n for n, f in enumerate(rows)}

    def link(fact_id):
        return None if fact_id is None else index.get(fact_id, "?")

    return [
        (
            _object(f),
            f.valid_from,
            f.valid_to,
            names[f.recorded_at],
            names.get(f.superseded_at),
            f.status,
            f.origin,
            f.authority,
            link(f.supersedes_id),
            link(f.superseded_by_id),
            link(f.contests_id),
        )
        for f in rows
    ]


def evidence(agent, subject: Entity, predicate: Predicate | str) -> list[tuple[int, str]]:
    """(version index as in `versions`, record time name) of every FactEvidence row."""
    rows = _pair_rows(agent, subject, predicate)
    index = {f.pk: n for n, f in enumerate(rows)}
    names = record_times(agent)
    return sorted(
        (index[fact_id], names[recorded_at])
        for fact_id, recorded_at in FactEvidence.objects.filter(
            fact__in=[f.pk for f in rows]
        ).values_list("fact_id", "recorded_at")
    )


def believed_now(agent, subject: Entity, predicate: Predicate | str) -> list[tuple]:
    """(value, valid_from, valid_to) of the believed versions, in valid-time order."""
    if isinstance(predicate, str):
        predicate = Predicate.objects.get(agent=agent, name=predicate)
    return [
        (_object(f), f.valid_from, f.valid_to)
        for f in Fact.objects.filter(
            agent=agent,
            subject=subject,
            predicate=predicate,
            status="active",
            superseded_at__isnull=True,
        )
        .select_related("object_entity")
        .order_by("valid_from")
    ]


def moments(agent) -> dict[str, datetime]:
    """The inverse of record_times: {"R1": datetime, …}."""
    return {name: moment for moment, name in record_times(agent).items()}


def event_types(agent) -> list[str]:
    """The agent's ledger, as event types in chain order."""
    return list(
        Event.objects.filter(agent=agent).order_by("seq").values_list("event_type", flat=True)
    )


def facts_state() -> dict:
    """Every row a facts write could touch, in every table. Bad-input tests assert it did not change."""
    return {
        **ledger_state(),
        "entities": sorted(Entity.objects.values_list("id", "name")),
        "aliases": sorted(EntityAlias.objects.values_list("id", "alias", "entity_id")),
        "predicates": sorted(
            Predicate.objects.values_list("id", "name", "cardinality", "value_type")
        ),
        "facts": sorted(
            Fact.objects.values_list(
                "id", "status", "superseded_at", "superseded_by_id", "contests_id", "single_valued"
            )
        ),
        "evidence": sorted(FactEvidence.objects.values_list("fact_id", "event_id")),
        "policies": sorted(AuthorityPolicy.objects.values_list("agent_id", "order")),
    }
